"""Raft entries larger than pysyncobj's 64 KiB chunk size reach every replica.

pysyncobj 0.3.17 sends such an entry in "transmission" chunks and labels the
last ones by the command's length instead of the pickle's: a command a few
bytes under a multiple of 64 KiB arrived as start, finish, finish, the
follower failed to unpickle it on every resend, and the chunked path skipped
the hazard 1 and 3 fixes. Three real replicas (journals, LMDB, loopback TCP)
must all apply such entries, the largest several MiB, and end identical.
"""

from __future__ import annotations

import logging

import pytest
from pysyncobj import pickle as raft_pickle

from raft_queue.core import commands as cmd
from raft_queue.replication.partition import PartitionReplica
from tests.integration.conftest import wait_for

pytestmark = pytest.mark.integration

CHUNK = 1 << 16  # pysyncobj's default appendEntriesBatchSizeBytes


def raft_sizes(payload: bytes) -> tuple[int, int]:
    """(command length, pickled entry length) of ``payload`` as pysyncobj 0.3.17
    stores and chunks it: ``@replicated`` pickles (func id, args) behind a type
    byte, and the chunked path pickles (command, index, term) again."""
    command = b"\x00" + raft_pickle.dumps((0, (payload,)))
    return len(command), len(raft_pickle.dumps((command, 10**6, 10**3)))


def mislabelled_append(chunks: int, now_ms: int) -> cmd.Append:
    """An Append that pysyncobj's chunked path sent as ..., finish, finish: its
    command length is at most the start of the last chunk."""
    body_len = chunks * CHUNK
    while True:
        append = cmd.Append((cmd.NewRecord(body=b"x" * body_len),), now_ms=now_ms)
        command_len, pickled_len = raft_sizes(cmd.encode(append))
        last_chunk = (pickled_len - 1) // CHUNK * CHUNK
        if command_len <= last_chunk == chunks * CHUNK:
            return append
        body_len -= 1


def test_entries_over_64k_reach_every_replica(
    group: list[PartitionReplica], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    wait_for(lambda: any(r.is_leader() for r in group))
    leader = next(r for r in group if r.is_leader())
    # Each would have been mislabelled; the last is 3 MiB (one command, so
    # one entry), then one of 6 MiB and a small one.
    appends = [mislabelled_append(n, 1_000 + n) for n in (2, 5, 48)]
    appends.append(cmd.Append((cmd.NewRecord(body=b"y" * (6 << 20)),), now_ms=2_000))
    appends.append(cmd.Append((cmd.NewRecord(body=b"z"),), now_ms=2_001))
    offsets = []
    for append in appends:
        result = leader.submit(append).result(30)
        offsets.append(result.items[0].offset)
    assert offsets == list(range(len(appends)))
    target = leader.raftLastApplied
    wait_for(lambda: all(r.raftLastApplied >= target for r in group))
    digests = {r.digest() for r in group}
    assert len(digests) == 1, "replicas differ"
    for r in group:
        got = r.read(0, 10).records
        assert [x.body for x in got] == [a.records[0].body for a in appends]
    # A handler exception (pysyncobj: "pickle data was truncated") also drops
    # the rest of that poll round for every group on the host.
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, f"replicas logged errors: {errors[:3]}"
