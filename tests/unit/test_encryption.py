"""Encryption at rest, the pure and local parts: sealing framing with a real
AES-GCM, the keyring file and the key-provider hook, and the data keys in
the metadata machine (rotation, rewrap, crypto-shredding)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue import errors
from raft_queue.config import QueueSpec, SecurityConfig
from raft_queue.core import metadata as meta
from raft_queue.core.records import NewRecord, plain_blob, to_blob
from raft_queue.core.sealing import ENVELOPE, open_records, seal_blobs
from raft_queue.core.segments import SEALED, Segment, encode_body, segment_value, summarize
from raft_queue.security.encryption import DataKeys, encrypter, wrap_context
from raft_queue.security.keyring import (
    FileKeyProvider,
    KeyProvider,
    add_master_key,
    generate_keyring_file,
    load_key_provider,
)
from raft_queue.testing.key_provider import ENV, EnvKeyProvider

KEY = AESGCM(bytes(range(32)))


def _blobs() -> tuple[bytes, ...]:
    return (
        plain_blob(b"first body", "", ""),
        to_blob(
            NewRecord(b"with headers", "k1", (("a", b"1"), ("b", b"header value 22")), "", 5_000)
        ),
        plain_blob(b"", "k2", ""),
        plain_blob(b"x" * 3000, "k3", ""),
    )


def _segment(blobs: tuple[bytes, ...], summary) -> Segment:
    body = encode_body(blobs, summary)
    return Segment(100, segment_value(1234, body, 0))


def _dec(aes: AESGCM = KEY):
    return lambda key_id, nonce, sealed, aad: aes.decrypt(nonce, sealed, aad)


def test_a_sealed_batch_opens_to_the_records_and_hides_bodies_and_headers() -> None:
    blobs = _blobs()
    sealed, summary = seal_blobs(blobs, summarize(blobs), 7, 2, 1, encrypter(KEY))
    assert summary.flags & SEALED and summary.max_delay_ms == 5_000
    assert summary == summarize(sealed)._replace(flags=summarize(sealed).flags | SEALED)
    joined = b"".join(sealed)
    # Each secret is long enough (>= 8 bytes) that ~3 KB of ciphertext does not hold it by
    # chance: a 2-byte one did in about 1 of 20 runs.
    for secret in (b"first body", b"with headers", b"header value 22", b"x" * 64):
        assert secret not in joined
    assert b"k1" in joined and b"k3" in joined  # keys stay clear: FIFO needs them
    # One envelope (one seal) for the whole batch; pieces as long as the secrets.
    assert len(joined) == len(b"".join(blobs)) + ENVELOPE.size + 2 * len(blobs)
    records = open_records(_segment(sealed, summary), 7, 2, _dec())
    assert [r.offset for r in records] == [100, 101, 102, 103]
    assert [r.body for r in records] == [b"first body", b"with headers", b"", b"x" * 3000]
    assert records[1].headers == (("a", b"1"), ("b", b"header value 22"))
    assert [r.key for r in records] == ["", "k1", "k2", "k3"]
    assert [r.dedup_id for r in records] == ["", "", "", ""]
    assert {r.timestamp_ms for r in records} == {1234}


@pytest.mark.parametrize("uid, partition", [(8, 2), (7, 3)])
def test_a_batch_does_not_open_in_another_queue_or_partition(uid: int, partition: int) -> None:
    blobs = _blobs()
    sealed, summary = seal_blobs(blobs, summarize(blobs), 7, 2, 1, encrypter(KEY))
    with pytest.raises(InvalidTag):
        open_records(_segment(sealed, summary), uid, partition, _dec())


def test_tampering_with_a_clear_key_or_a_piece_fails_the_tag() -> None:
    blobs = _blobs()
    sealed, summary = seal_blobs(blobs, summarize(blobs), 7, 2, 1, encrypter(KEY))
    moved_key = (sealed[0], sealed[1].replace(b"k1", b"k9"), *sealed[2:])  # a clear key altered
    flipped = (*sealed[:3], sealed[3][:-1] + bytes([sealed[3][-1] ^ 1]))
    for bad in (moved_key, flipped):
        with pytest.raises(InvalidTag):
            open_records(_segment(bad, summary), 7, 2, _dec())
    with pytest.raises(InvalidTag):
        open_records(_segment(sealed, summary), 7, 2, _dec(AESGCM(bytes(32))))


def test_every_seal_has_a_fresh_nonce() -> None:
    blobs = _blobs()
    a, _ = seal_blobs(blobs, summarize(blobs), 7, 2, 1, encrypter(KEY))
    b, _ = seal_blobs(blobs, summarize(blobs), 7, 2, 1, encrypter(KEY))
    assert a[0] != b[0] and a[3] != b[3]


def test_keyring_file_is_private_and_grows_by_add_master(tmp_path: Path) -> None:
    path = generate_keyring_file(tmp_path / "ring" / "keyring.json")
    assert os.stat(path).st_mode & 0o777 == 0o600
    provider = FileKeyProvider(path)
    assert isinstance(provider, KeyProvider) and provider.current_master_id() == "m1"
    wrapped = provider.wrap("m1", b"k" * 32, wrap_context("q", 1))
    assert provider.unwrap("m1", wrapped, wrap_context("q", 1)) == b"k" * 32
    with pytest.raises(InvalidTag):
        provider.unwrap("m1", wrapped, wrap_context("other", 1))
    assert add_master_key(path) == "m2"
    assert provider.current_master_id() == "m2"  # re-read: a key added while running
    assert provider.unwrap("m1", wrapped, wrap_context("q", 1)) == b"k" * 32
    os.chmod(path, 0o644)
    with pytest.raises(errors.ConfigError, match="readable by others"):
        FileKeyProvider(path)


def test_a_node_without_keyring_runs_without_encryption(caplog) -> None:
    assert load_key_provider(SecurityConfig(insecure=True)) is None
    assert "seals nothing" in caplog.text


def test_a_node_without_keyring_refuses_to_start_unless_it_opts_out(caplog) -> None:
    """On by default: no keyring and no provider is a ConfigError naming the
    key and the command that makes one; ``encryption_at_rest = false`` is the
    explicit opt-out (a warning, as with ``insecure``)."""
    with pytest.raises(errors.ConfigError, match="keyring_file.*raftq keys init"):
        load_key_provider(SecurityConfig(cluster_secret_file="s"))
    assert load_key_provider(SecurityConfig(encryption_at_rest=False)) is None
    assert "seals nothing" in caplog.text
    with pytest.raises(errors.ConfigError, match="encryption_at_rest"):
        SecurityConfig(encryption_at_rest="no")  # type: ignore[arg-type]


def test_the_key_provider_hook_loads_a_class_by_entry_point(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(ENV, "ab" * 32)
    spec = "raft_queue.testing.key_provider:EnvKeyProvider"
    provider = load_key_provider(SecurityConfig(key_provider=spec))
    assert isinstance(provider, EnvKeyProvider)
    keys = DataKeys(provider)
    key = keys.new_key("q", 1)
    assert key.master_id == "env-1" and len(bytes.fromhex(key.wrapped)) == 40  # RFC 3394
    fresh = DataKeys(EnvKeyProvider())
    sealed, summary = seal_blobs(
        _blobs(), summarize(_blobs()), 1, 0, 1, encrypter(keys.cipher("q", key))
    )
    aes = fresh.cipher("q", key)
    fresh.cipher("q", key)
    assert fresh.provider.calls == 1  # unwrapped once, then cached
    assert open_records(_segment(sealed, summary), 1, 0, _dec(aes))[0].body == b"first body"
    fresh.keep_only([])
    assert len(fresh) == 0
    with pytest.raises(errors.ConfigError, match="key_provider"):
        load_key_provider(SecurityConfig(key_provider="no_such_module:X"))


def _machine_with_queue() -> meta.MetadataMachine:
    m = meta.MetadataMachine()
    m.apply(meta.RegisterNode("n1", "127.0.0.1:1", "127.0.0.1", 2000, 2100))
    a = meta.PartitionAssignment(0, (meta.ReplicaRef("n1", 2000),))
    key = meta.DataKey(1, "m1", "aa" * 40)
    m.apply(meta.CreateQueue("q", QueueSpec(replication_factor=1), (a,), 1, key))
    return m


def test_metadata_keeps_rotates_rewraps_and_shreds_data_keys() -> None:
    m = _machine_with_queue()
    uid = m.queue("q").uid
    assert [k.key_id for k in m.data_keys("q")] == [1]
    with pytest.raises(errors.FailedPrecondition, match="next id is 2"):
        m.apply(meta.AddDataKey("q", uid, meta.DataKey(3, "m1", "bb" * 40)))
    with pytest.raises(errors.FailedPrecondition, match="re-created"):
        m.apply(meta.AddDataKey("q", uid + 1, meta.DataKey(2, "m1", "bb" * 40)))
    m.apply(meta.AddDataKey("q", uid, meta.DataKey(2, "m1", "bb" * 40)))
    new = (meta.DataKey(1, "m2", "cc" * 40), meta.DataKey(2, "m2", "dd" * 40))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(meta.RewrapDataKeys("q", uid, new[:1]))
    m.apply(meta.RewrapDataKeys("q", uid, new))
    assert m.data_keys("q") == new
    image = m.to_bytes()
    assert meta.MetadataMachine.from_bytes(image).data_keys("q") == new
    for cmd in (meta.AddDataKey("q", uid, new[0]), meta.RewrapDataKeys("q", uid, new)):
        assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    m.apply(meta.DeleteQueue("q"))
    assert m.data_keys("q") == ()
    assert "cc" * 40 not in m.to_bytes().decode()
    assert json.loads(m.to_bytes())["data_keys"] == {}
    m.apply(meta.ShredKeys("q"))
    assert meta.decode_meta(meta.encode_meta(meta.ShredKeys("q"))) == meta.ShredKeys("q")


def test_create_queue_with_a_bad_key_changes_nothing() -> None:
    m = meta.MetadataMachine()
    m.apply(meta.RegisterNode("n1", "127.0.0.1:1", "127.0.0.1", 2000, 2100))
    a = meta.PartitionAssignment(0, (meta.ReplicaRef("n1", 2000),))
    cmd = meta.CreateQueue(
        "q", QueueSpec(replication_factor=1), (a,), 1, meta.DataKey(1, "m1", "zz")
    )
    with pytest.raises(errors.InvalidArgument):
        m.apply(cmd)
    assert m.queue("q") is None and m.data_keys("q") == ()
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd


def test_a_bulk_batch_takes_the_bare_path_and_opens_the_same() -> None:
    blobs = tuple(plain_blob(b"bulk-%d" % i, "", "") for i in range(50))
    summary = summarize(blobs)
    assert not summary.flags
    sealed, sealed_summary = seal_blobs(blobs, summary, 3, 1, 4, encrypter(KEY))
    assert sealed_summary.flags == SEALED and b"bulk-" not in b"".join(sealed)
    records = open_records(_segment(sealed, sealed_summary), 3, 1, _dec())
    assert [r.body for r in records] == [b"bulk-%d" % i for i in range(50)]
    with pytest.raises(InvalidTag):
        open_records(_segment(sealed, sealed_summary), 3, 0, _dec())


def test_a_batch_with_dedup_ids_is_sealed_per_record_so_any_subset_opens() -> None:
    blobs = tuple(plain_blob(b"body-%d" % i, "", f"dedup-{i}") for i in range(4))
    summary = summarize(blobs)
    sealed, sealed_summary = seal_blobs(blobs, summary, 3, 1, 2, encrypter(KEY))
    assert sealed_summary.flags & SEALED and b"body-" not in b"".join(sealed)
    kept = (sealed[1], sealed[3])  # what an Append keeps when ids 0 and 2 were seen
    seg = _segment(kept, sealed_summary._replace(records=2))
    records = open_records(seg, 3, 1, _dec())
    assert [(r.body, r.dedup_id) for r in records] == [
        (b"body-1", "dedup-1"),
        (b"body-3", "dedup-3"),
    ]
    with pytest.raises(InvalidTag):
        open_records(seg, 4, 1, _dec())


def test_a_bulk_batch_with_headers_opens_on_the_bare_path_with_its_headers() -> None:
    recs = [NewRecord(b"b%d" % i, "", (("h", b"%d" % i),) if i % 3 == 0 else ()) for i in range(9)]
    blobs = tuple(to_blob(r) for r in recs)
    sealed, sealed_summary = seal_blobs(blobs, summarize(blobs), 3, 1, 4, encrypter(KEY))
    assert sealed_summary.flags == SEALED and not sealed_summary.max_delay_ms  # the bare open
    records = open_records(_segment(sealed, sealed_summary), 3, 1, _dec())
    assert [(r.offset, r.body, r.headers, r.key) for r in records] == [
        (100 + i, b"b%d" % i, (("h", b"%d" % i),) if i % 3 == 0 else (), "") for i in range(9)
    ]


def test_a_segment_whose_flags_hide_its_keys_fails_the_tag_on_the_bare_path() -> None:
    blobs = (plain_blob(b"one", "", ""), plain_blob(b"two", "key", ""))
    sealed, sealed_summary = seal_blobs(blobs, summarize(blobs), 3, 1, 4, encrypter(KEY))
    lying = sealed_summary._replace(flags=SEALED)  # no HAS_KEY: read as bare heads
    with pytest.raises(InvalidTag):
        open_records(_segment(sealed, lying), 3, 1, _dec())
