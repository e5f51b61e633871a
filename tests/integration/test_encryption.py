"""Encryption at rest on real nodes (issue 14 part 1, docs/security.md
"Encryption at rest"): no body or header reaches a journal, an LMDB file or
a snapshot in plain form; rotation, replay, dead-letter moves and redrive
work across keys; deleting a queue destroys its keys; a restart decrypts."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue import errors
from raft_queue.client.models import OutgoingMessage
from raft_queue.core.sealing import open_records
from raft_queue.core.segments import SEALED, Segment
from raft_queue.security.encryption import wrap_context
from raft_queue.security.keyring import FileKeyProvider
from raft_queue.testing.cluster import LocalCluster
from raft_queue.testing.files import written_bytes

pytestmark = pytest.mark.integration

# Small compaction threshold: every node takes snapshots while the test runs,
# so the grep covers journal, LMDB and snapshot files alike.
RAFT = {"log_compaction_min_entries": 20, "log_compaction_min_time_s": 0.5}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(Path(tmp_path_factory.mktemp("enc")) / "cluster", nodes=3, raft=RAFT)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    except BaseException:
        for i in range(c.nodes):
            print(f"--- n{i + 1} log tail ---")
            print("\n".join(c.log_path(i).read_text(errors="replace").splitlines()[-30:]))
        raise
    finally:
        c.stop()


def grep_data(cluster: LocalCluster, marker: bytes) -> list[str]:
    """Every file under any node's data directory holding ``marker``."""
    return [
        str(p.relative_to(cluster.base_dir))
        for p in data_files(cluster)
        if marker in written_bytes(p)  # not the holes of data.mdb's sparse map
    ]


def data_files(cluster: LocalCluster) -> list[Path]:
    """Every file in the nodes' data directories (journals, LMDB, snapshots),
    walked again if a directory went away meanwhile (a deleted queue's)."""
    for _ in range(20):
        try:
            return sorted(
                p
                for p in cluster.base_dir.rglob("*")
                if p.is_file() and "data" in p.relative_to(cluster.base_dir).parts
            )
        except FileNotFoundError:  # rglob listed a directory the node then removed
            continue
    raise AssertionError("the data directories kept changing under 20 walks")


def send_markers(client, queue: str, marker: str, n: int = 60) -> None:
    for k in range(n):  # many Appends: the journal compacts into snapshots
        client.send_batch(queue, [f"{marker}-{k}-{j}" for j in range(5)])
        client.send(queue, f"{marker}-h{k}", headers={"secret-header": f"{marker}-hv{k}"})


def wait_for_snapshots(cluster: LocalCluster, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(p.name == "raft.dump" for p in data_files(cluster)) >= 4:
            return
        time.sleep(0.2)


def test_data_dirs_hold_no_marker_when_encrypted_and_do_when_not(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("enc-grep", partitions=2, replication_factor=3)
        client.create_queue("plain-grep", partitions=2, replication_factor=3, encryption=False)
        send_markers(client, "enc-grep", "SEALED-MARKER-7f3a")
        send_markers(client, "plain-grep", "PLAIN-MARKER-7f3a")
        wait_for_snapshots(cluster)
        time.sleep(1.5)  # fsync and compaction settle
        got = client.read("enc-grep", 0, 0, max_messages=1000).messages
        got += client.read("enc-grep", 1, 0, max_messages=1000).messages
        assert len(got) == 60 * 6
        assert any(m.body.startswith(b"SEALED-MARKER-7f3a-h") for m in got)
        with_headers = [m for m in got if m.headers]
        assert with_headers and all(
            m.headers["secret-header"].startswith(b"SEALED-MARKER-7f3a-hv") for m in with_headers
        )
    files = data_files(cluster)
    names = {p.name for p in files}
    assert {"raft.dump", "raft.journal", "data.mdb"} <= names, sorted(names)  # all three kinds
    assert grep_data(cluster, b"SEALED-MARKER-7f3a") == []
    assert grep_data(cluster, b"PLAIN-MARKER-7f3a"), "the grep finds plain markers"


def test_rotation_then_replay_receive_dead_letters_and_redrive(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("enc-rot-dlq", replication_factor=3)
        client.create_queue(
            "enc-rot", replication_factor=3, max_receives=1, dead_letter_queue="enc-rot-dlq"
        )
        client.send_batch("enc-rot", [f"old-{k}" for k in range(10)])
        first = client.rotate_queue_key("enc-rot")
        assert first.key_id == 2
        client.send_batch("enc-rot", [f"new-{k}" for k in range(10)])
        client.send("enc-rot", "new-h", headers={"h": "v"})
        assert client.rotate_queue_key("enc-rot").key_id == 3
        # Replay from offset 0 reads batches sealed under keys 1 and 2.
        replay = client.read("enc-rot", 0, 0, max_messages=100).messages
        bodies = [m.body.decode() for m in replay]
        assert bodies == [f"old-{k}" for k in range(10)] + [f"new-{k}" for k in range(10)] + [
            "new-h"
        ]
        assert replay[-1].headers == {"h": b"v"}
        # Receive (one at a time: single records of sealed batches), never ack:
        # with max_receives=1 each moves to the DLQ (opened, re-sealed there).
        seen = []
        for _ in range(21):
            got = client.receive("enc-rot", max_messages=1, visibility_ms=300, wait_ms=2000)
            seen += [m.body.decode() for m in got]
        assert sorted(seen) == sorted(bodies)
        deadline = time.monotonic() + 30
        dead: list = []
        while time.monotonic() < deadline and len(dead) < 21:
            dead = client.read("enc-rot-dlq", 0, 0, max_messages=100).messages
            time.sleep(0.3)
        assert sorted(m.body.decode() for m in dead) == sorted(bodies)
        client.rotate_queue_key("enc-rot-dlq")
        moved = client.redrive("enc-rot-dlq", "enc-rot")
        assert moved.moved == 21 if hasattr(moved, "moved") else True
        again = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(again) < 21:
            again += client.receive("enc-rot", max_messages=50, wait_ms=500)
        assert sorted(m.body.decode() for m in again) == sorted(bodies)


def test_delete_destroys_the_keys_and_leftover_ciphertext_stays_shut(
    cluster: LocalCluster,
) -> None:
    """Crypto-shredding: sealed segments copied out of a leader's LMDB open
    with the keyring and the wrapped keys the metadata files hold, until the
    queue is deleted; then no metadata file on any node holds its wrapped
    keys, and the copies open with nothing left."""
    with cluster.client(timeout_s=20.0) as client:
        # A queue that stays, so the search below has keys to find (this test
        # must not depend on the module's other tests having run first).
        if "enc-keep" not in {q.name for q in client.list_queues()}:
            client.create_queue("enc-keep", replication_factor=3)
        client.create_queue("enc-shred", replication_factor=3)
        client.send_batch("enc-shred", [f"shred-{k}" for k in range(20)])
        client.rotate_queue_key("enc-shred")
        client.send_batch("enc-shred", [f"shred2-{k}" for k in range(20)])
        time.sleep(1.0)
        leader = _partition_leader(cluster, client, "enc-shred")
        copies = _sealed_segments(cluster.base_dir / f"n{leader + 1}", "enc-shred")
        assert len(copies) == 2, "two Appends: two sealed segments"
        before = _queue_keys(cluster, _wrapped_keys_on_disk(cluster))
        assert sorted(k[0] for k in before) == [1, 2]
        opened = _open_with(cluster, copies, before)
        assert sorted(r.body for r in opened) == sorted(
            [f"shred-{k}".encode() for k in range(20)] + [f"shred2-{k}".encode() for k in range(20)]
        )
        client.delete_queue("enc-shred")
        with pytest.raises(errors.NotFound):
            client.read("enc-shred", 0, 0)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _queue_keys(cluster, _wrapped_keys_on_disk(cluster)):
            time.sleep(0.3)  # every voter compacts its metadata journal
        left = _wrapped_keys_on_disk(cluster)
        assert left, "other queues' keys are still there: the search works"
        assert not (left & before), "the deleted queue's wrapped keys are gone from disk"
        assert _open_with(cluster, copies, left) == []


def test_a_restarted_cluster_still_decrypts(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("enc-restart", replication_factor=3)
        client.send_batch("enc-restart", [f"r-{k}" for k in range(30)])
        client.rotate_queue_key("enc-restart")
        client.send("enc-restart", "r-30", headers={"x": "y"})
    for i in range(cluster.nodes):
        cluster.stop(i)
    for i in range(cluster.nodes):
        cluster.restart(i)
    cluster.wait_ready(60)
    with cluster.client(timeout_s=30.0) as client:
        deadline = time.monotonic() + 30
        while True:
            try:
                got = client.read("enc-restart", 0, 0, max_messages=100).messages
                break
            except errors.QueueError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert [m.body for m in got] == [f"r-{k}".encode() for k in range(31)]
        assert got[-1].headers == {"x": b"y"}


def _partition_leader(cluster: LocalCluster, client, queue: str) -> int:
    for p in client.partitions(queue):
        for i in range(cluster.nodes):
            if cluster.specs[i].node_id == p.leader:
                return i
    raise AssertionError("no leader")


def _sealed_segments(store: Path, queue: str) -> list[tuple[int, Segment]]:
    """(partition, segment) of every sealed segment in ``store``'s LMDB files of ``queue``."""
    import lmdb

    out = []
    for path in store.rglob("data.mdb"):
        name, _uid, part = path.parent.parent.name.rsplit(".", 2)
        if name != queue:
            continue
        env = lmdb.open(str(path.parent), readonly=True, lock=False, max_dbs=16)
        try:
            with env.begin() as txn:
                try:
                    db = env.open_db(b"records", txn=txn, create=False)
                except lmdb.NotFoundError:
                    continue
                for key, value in txn.cursor(db):
                    seg = Segment(int.from_bytes(key, "big"), bytes(value))
                    if seg.flags & SEALED:
                        out.append((int(part), seg))
        finally:
            env.close()
    return out


_WRAPPED = re.compile(rb'\[(\d+),"([A-Za-z0-9_-]+)","([0-9a-f]{120})"\]')


def _wrapped_keys_on_disk(cluster: LocalCluster) -> set[tuple[int, str, str]]:
    """Every wrapped data key (id, master id, hex) in any node's metadata files."""
    found = set()
    for path in data_files(cluster):
        if "metadata" in path.parts:
            for m in _WRAPPED.finditer(written_bytes(path)):
                found.add((int(m[1]), m[2].decode(), m[3].decode()))
    return found


def _queue_keys(
    cluster: LocalCluster, wrapped: set[tuple[int, str, str]], queue: str = "enc-shred"
) -> set[tuple[int, str, str]]:
    """The wrapped keys in ``wrapped`` that are ``queue``'s (they unwrap for it)."""
    provider = FileKeyProvider(cluster.keyring_path)
    out = set()
    for key_id, master, hexed in wrapped:
        try:
            provider.unwrap(master, bytes.fromhex(hexed), wrap_context(queue, key_id))
        except Exception:  # noqa: BLE001, S112 - another queue's key
            continue
        out.add((key_id, master, hexed))
    return out


def _open_with(
    cluster: LocalCluster, copies: list[tuple[int, Segment]], wrapped: set[tuple[int, str, str]]
) -> list:
    """What an attacker holding the keyring, ``wrapped`` and the segment copies
    can decrypt (trying every key and queue uid)."""
    provider = FileKeyProvider(cluster.keyring_path)
    keys = []
    for key_id, master, hexed in wrapped:
        try:
            raw = provider.unwrap(master, bytes.fromhex(hexed), wrap_context("enc-shred", key_id))
        except Exception:  # noqa: BLE001 - another queue's key
            continue
        keys.append((key_id, AESGCM(raw)))
    out = []
    for part, seg in copies:
        for uid in range(1, 200):
            for _key_id, aes in keys:
                try:
                    out += open_records(
                        seg, uid, part, lambda kid, n, c, a, aes=aes: aes.decrypt(n, c, a)
                    )
                    break
                except Exception:  # noqa: BLE001, S112 - wrong key or uid
                    continue
            else:
                continue
            break
    return out


def test_cli_rotate_key_and_rotate_master_keep_every_message_readable(
    cluster: LocalCluster,
) -> None:
    from click.testing import CliRunner

    from raft_queue.cli.main import main

    runner = CliRunner()

    def raftq(*args: str) -> dict:
        argv = ["--server", cluster.bootstrap, "--timeout", "20", "--token", cluster.token]
        res = runner.invoke(main, [*argv, *args])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)

    raftq("queue", "create", "enc-cli", "--replication", "3", "--json")
    # the key commands go through the auth door like every other call
    anon = runner.invoke(main, ["--server", cluster.bootstrap, "queue", "rotate-key", "enc-cli"])
    assert anon.exit_code == 1 and "bearer token" in anon.output, anon.output
    plain = raftq("queue", "create", "enc-cli-off", "--no-encryption", "--json")
    assert plain["config"]["encryption"] is False
    with cluster.client(timeout_s=20.0) as client:
        client.send("enc-cli", "before-rotation")
        assert raftq("queue", "rotate-key", "enc-cli", "--json")["key_id"] == 2
        client.send("enc-cli", "after-rotation")
        before = _wrapped_keys_on_disk(cluster)
        out = raftq("keys", "rotate-master", "--keyring", str(cluster.keyring_path), "--json")
        assert out["master_id"] == "m2" and out["rewrapped"] >= 2
        client.send("enc-cli", "after-master-rotation")
        bodies = [m.body for m in client.read("enc-cli", 0, 0).messages]
        assert bodies == [b"before-rotation", b"after-rotation", b"after-master-rotation"]
        ring = json.loads(cluster.keyring_path.read_text())
        assert ring["current"] == "m2" and set(ring["keys"]) == {"m1", "m2"}
        time.sleep(1.0)
        now = _queue_keys(cluster, _wrapped_keys_on_disk(cluster) - before, "enc-cli")
        assert {k[1] for k in now} == {"m2"} and len(now) == 2


def test_a_key_provider_hook_on_a_real_node(tmp_path: Path) -> None:
    """The KMS hook: a node whose master key comes from a provider class
    (raft_queue/testing/key_provider.py, AES key wrap) instead of a keyring."""
    from raft_queue.testing.key_provider import ENV

    hook = "raft_queue.testing.key_provider:EnvKeyProvider"
    c = LocalCluster(
        tmp_path / "cluster",
        nodes=1,
        security={"key_provider": hook, "keyring_file": ""},
        env={ENV: "5a" * 32},
    )
    c.start()
    try:
        c.wait_ready(60)
        with c.client(timeout_s=20.0) as client:
            client.create_queue("hooked", replication_factor=1)
            client.send_batch("hooked", ["HOOK-MARKER-1", "HOOK-MARKER-2"])
            client.rotate_queue_key("hooked")
            client.send("hooked", "HOOK-MARKER-3")
            got = [m.body for m in client.read("hooked", 0, 0).messages]
            assert got == [b"HOOK-MARKER-1", b"HOOK-MARKER-2", b"HOOK-MARKER-3"]
        keys = _wrapped_keys_on_disk(c) | _wrapped_kw_on_disk(c)
        assert {k[1] for k in keys} == {"env-1"}
        assert grep_data(c, b"HOOK-MARKER") == []
    finally:
        c.stop()


def _wrapped_kw_on_disk(cluster: LocalCluster) -> set[tuple[int, str, str]]:
    """Wrapped keys of AES key wrap (40 bytes) in the metadata files."""
    pattern = re.compile(rb'\[(\d+),"([A-Za-z0-9_-]+)","([0-9a-f]{80})"\]')
    return {
        (int(m[1]), m[2].decode(), m[3].decode())
        for p in data_files(cluster)
        if "metadata" in p.parts
        for m in pattern.finditer(written_bytes(p))
    }


def test_duplicates_dropped_from_a_sealed_batch_leave_the_rest_readable(
    cluster: LocalCluster,
) -> None:
    with cluster.client(timeout_s=20.0) as client:
        client.create_queue("enc-dedup", replication_factor=3)
        first = client.send("enc-dedup", "one", dedup_id="d1")
        assert not first.duplicate
        # One Append of three records, the first a duplicate the machine drops.
        sent = client.send_batch(
            "enc-dedup",
            [
                OutgoingMessage("one-again", dedup_id="d1"),
                OutgoingMessage("two", dedup_id="d2"),
                OutgoingMessage("three", dedup_id="d3", headers={"h": "3"}),
            ],
        )
        assert [r.duplicate for r in sent] == [True, False, False]
        got = client.read("enc-dedup", 0, 0).messages
        assert [(m.body, m.dedup_id) for m in got] == [
            (b"one", "d1"),
            (b"two", "d2"),
            (b"three", "d3"),
        ]
        assert got[2].headers == {"h": b"3"}
        leased = client.receive("enc-dedup", max_messages=10, wait_ms=1000)
        assert sorted(m.body for m in leased) == [b"one", b"three", b"two"]
