"""commit_floor measures what it claims: an answer waits for a majority of
durable copies, frames survive any split, and each shape runs end to end."""

from __future__ import annotations

import pytest

from raft_queue.bench import commit_floor as cf
from raft_queue.testing.cluster import free_block


def test_a_send_is_answered_at_the_second_durable_copy_of_three_and_only_once() -> None:
    copies = cf.Copies()
    copies.add(7, "waiter")
    assert copies.durable(7) is None  # one copy: no majority
    assert copies.durable(7) == "waiter"  # two of three
    assert copies.durable(7) is None  # the third is counted, not answered again
    assert 7 not in copies.count and 7 not in copies.waiters


def test_frames_and_acks_are_taken_whole_across_any_split() -> None:
    payloads = [b"a" * 3, b"", b"b" * 40]
    wire = b"".join(cf.FRAME.pack(i, len(p)) + p for i, p in enumerate(payloads))
    for cut in range(len(wire) + 1):
        buf = bytearray(wire[:cut])
        got = cf._frames(buf)
        buf += wire[cut:]
        got += cf._frames(buf)
        assert [f[cf.FRAME.size :] for f in got] == payloads
        assert not buf
    acks = bytearray(cf.ACK.pack(1) + cf.ACK.pack(2) + cf.ACK.pack(3)[:5])
    assert cf._acks(acks) == [1, 2]
    assert len(acks) == 5  # the partial ack waits for its rest


@pytest.mark.integration
@pytest.mark.parametrize("mode", cf.MODES)
def test_each_shape_answers_every_send(mode: str, tmp_path: object) -> None:
    samples = cf.measure(mode, 50, str(tmp_path), free_block(6))
    assert len(samples) == 50
    assert all(s > 0 for s in samples)
