"""Auto-create on real clusters: a Send to a missing queue creates it from
[queue_defaults] when the caller asks (SDK create=True, raftq send --create)
or the cluster allows it (cluster.auto_create_queues); never otherwise.
Concurrent first sends make one queue and all succeed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from raft_queue import OutgoingMessage, errors
from raft_queue.cli.main import main
from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration

DEFAULTS = {"partitions": 2, "dedup_window_ms": 60_000, "visibility_timeout_ms": 7_000}


def _cluster(base: Path, **kwargs) -> Iterator[LocalCluster]:
    c = LocalCluster(base / "cluster", nodes=3, queue_defaults=DEFAULTS, **kwargs)
    c.start()
    try:
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """auto_create_queues off: the default."""
    yield from _cluster(tmp_path_factory.mktemp("autocreate-off"))


def test_off_by_default_a_send_to_a_missing_queue_is_not_found(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20) as client:
        with pytest.raises(errors.NotFound):
            client.send("nosuch", b"x")
        assert all(q.name != "nosuch" for q in client.list_queues())


def test_an_explicit_create_makes_the_queue_from_the_defaults(cluster: LocalCluster) -> None:
    with cluster.client(timeout_s=20) as client:
        sent = client.send_batch(
            "made", [b"a", OutgoingMessage(b"b", key="k"), OutgoingMessage(b"c", partition=1)],
            create=True,
        )  # fmt: skip
        assert len(sent) == 3 and sent[2].partition == 1
        config = client.get_queue("made").config
        assert (config.partitions, config.replication_factor) == (2, 3)
        assert (config.dedup_window_ms, config.visibility_timeout_ms) == (60_000, 7_000)
        got = client.receive("made", max_messages=10, wait_ms=3000)
        while len(got) < 3:
            more = client.receive("made", max_messages=10, wait_ms=3000)
            assert more, f"only {len(got)} of 3 messages came back"
            got += more
        assert sorted(m.body for m in got) == [b"a", b"b", b"c"]
        again = client.send("made", b"d", create=True)  # exists: an ordinary send
        assert again.offset >= 0


def test_concurrent_creates_of_one_queue_make_one_queue(cluster: LocalCluster) -> None:
    results: list[object] = []

    def send(i: int) -> None:
        address = cluster.specs[i % 3].address
        with Client(bootstrap=address, timeout_s=30, token=cluster.token) as client:
            try:
                results.append(client.send("race", b"m%d" % i, create=True))
            except Exception as exc:  # recorded: every send must succeed
                results.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len(results) == 8
    with cluster.client(timeout_s=20) as client:
        assert [q.name for q in client.list_queues()].count("race") == 1
        assert sum(p.latest_offset for p in client.partitions("race")) == 8


def test_raftq_send_create(cluster: LocalCluster) -> None:
    runner = CliRunner()
    base = ["--server", cluster.bootstrap, "--token", cluster.token, "--timeout", "20"]
    base += ["send", "climade", "hello"]
    missing = runner.invoke(main, base)
    assert missing.exit_code == 1 and "does not exist" in missing.output, missing.output
    made = runner.invoke(main, [*base, "--create", "--json"])
    assert made.exit_code == 0, made.output
    with cluster.client(timeout_s=20) as client:
        assert client.get_queue("climade").config.partitions == 2


def test_with_the_cluster_option_a_plain_send_creates(tmp_path: Path) -> None:
    for c in _cluster(tmp_path, cluster_tuning={"auto_create_queues": True}):
        with c.client(timeout_s=20) as client:
            client.send("auto", b"x")
            assert client.get_queue("auto").config.partitions == 2
            assert [m.body for m in client.receive("auto", wait_ms=3000)] in ([b"x"], [])
            assert sum(p.latest_offset for p in client.partitions("auto")) == 1
