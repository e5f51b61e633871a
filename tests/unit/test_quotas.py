"""Quotas and usage, pure parts: the token bucket (fake clock), the metadata
commands, the usage counter's batches, the gate's per-node share, the wire
form of OverQuota and the SDK's waiting on it."""

from __future__ import annotations

import random
from types import SimpleNamespace

import grpc
import pytest

from raft_queue import errors
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.retry import Retrier
from raft_queue.core import metadata as meta
from raft_queue.core import quotas as q
from raft_queue.core import usage as u
from raft_queue.core.metadata_records import PartitionAssignment, ReplicaRef
from raft_queue.server.api.quota import QuotaGate
from raft_queue.server.api.status import to_status
from raft_queue.server.api.usage import UsageCounter
from raft_queue.testing.clock import FakeClock

# ---- the bucket ---------------------------------------------------------------------


def test_bucket_starts_full_then_refills_at_its_rate():
    clock = FakeClock()
    b = q.Bucket(rate=200, burst_s=1.0)
    assert b.wait_s(200, clock()) == 0.0
    b.take(200, clock())
    assert b.wait_s(1, clock()) == pytest.approx(0.005)
    clock.advance(ms=5)
    assert b.wait_s(1, clock()) == 0.0
    clock.advance(seconds=100)
    b._refill(clock())
    assert b.tokens == 200  # never more than the burst


def test_bucket_paces_2000_messages_at_200_per_s_in_9_s():
    clock = FakeClock()
    lim = [q.Limiter(q.Quota("p", "", 200, 0, 1.0))]
    sent = 0
    while sent < 2000:
        wait = q.admit(lim, 50, 0, clock())
        if wait:
            clock.advance(ms=max(1, round(wait * 1000)))
        else:
            sent += 50
    assert 8.9 <= clock() <= 9.2


def test_request_bigger_than_the_burst_passes_when_full_and_is_repaid():
    clock = FakeClock()
    b = q.Bucket(rate=1, burst_s=1.0)
    assert b.wait_s(10, clock()) == 0.0
    b.take(10, clock())
    assert b.wait_s(1, clock()) == pytest.approx(10.0)
    clock.advance(10)
    assert b.wait_s(1, clock()) == 0.0


def test_admit_is_all_or_nothing_over_messages_and_bytes():
    clock = FakeClock()
    a = q.Limiter(q.Quota("p", "", 100, 1000, 1.0))
    b = q.Limiter(q.Quota("p", "qq", 10, 0, 1.0))
    assert q.admit([a, b], 10, 500, clock()) == 0.0
    wait = q.admit([a, b], 1, 1, clock())
    assert wait == pytest.approx(0.1)  # b is empty: 1 message at 10/s
    assert a.messages is not None and a.messages.tokens == 90  # a was not charged
    assert a.bytes is not None and a.bytes.tokens == 500
    assert q.admit([a], 1, 600, clock()) == pytest.approx(0.1)  # bytes: 100 short at 1000/s


@pytest.mark.parametrize(
    ("quota", "field"),
    [
        (q.Quota("p", "", 0, 0), "messages_per_s"),
        (q.Quota("p", "", -1, 0), "messages_per_s"),
        (q.Quota("p", "", 1, 0, 0.0), "burst_s"),
        (q.Quota("p", "", 1, 0, float("nan")), "burst_s"),
        (q.Quota("", "", 1, 0), "principal"),
        (q.Quota("p", "bad name!", 1, 0), "queue"),
    ],
)
def test_bad_quota_names_the_field(quota, field):
    with pytest.raises(errors.InvalidArgument) as info:
        q.check_quota(quota)
    assert info.value.field == field


# ---- the metadata machine -------------------------------------------------------------


def test_set_and_remove_quota_are_versioned_and_survive_snapshots_and_codec():
    m = meta.MetadataMachine()
    cmd = meta.SetQuota("alice", "orders", 200, 0, 2.0)
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    m.apply(cmd)
    v = m.version
    m.apply(cmd)
    assert m.version == v  # the same quota again changes nothing
    m.apply(meta.SetQuota("alice", "", 500, 10_000))
    assert [x.key for x in m.quotas()] == [("alice", ""), ("alice", "orders")]
    copy = meta.MetadataMachine.from_bytes(m.to_bytes())
    assert copy.quotas() == m.quotas() and copy.to_bytes() == m.to_bytes()
    assert m.apply(meta.RemoveQuota("alice", "orders")).messages_per_s == 200
    with pytest.raises(errors.NotFound):
        m.apply(meta.RemoveQuota("alice", "orders"))
    with pytest.raises(errors.InvalidArgument):
        m.apply(meta.SetQuota("alice", "", 0, 0))


def test_record_usage_applies_once_per_node_and_sequence():
    m = meta.MetadataMachine()
    rows = (("alice", "q", 3_600_000, "send", 2, 20, 200),)
    cmd = meta.RecordUsage("n1", 7, rows)
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    version = m.version
    assert m.apply(cmd) == 7
    assert m.apply(cmd) == 7  # retried flush: not counted twice
    assert m.apply(meta.RecordUsage("n1", 6, rows)) == 7  # older: ignored
    m.apply(meta.RecordUsage("n2", 1, rows))  # another node's sequence is its own
    assert m.usage() == [("alice", "q", 3_600_000, "send", 4, 40, 400)]
    assert m.version == version  # usage changes no routing
    copy = meta.MetadataMachine.from_bytes(m.to_bytes())
    assert copy.usage() == m.usage() and copy.usage_seq("n1") == 7
    assert copy.apply(cmd) == 7 and copy.usage() == m.usage()
    with pytest.raises(errors.InvalidArgument):
        m.apply(meta.RecordUsage("n1", 8, (("a", "q", 0, "steal", 1, 1, 1),)))


def test_usage_select_filters_and_old_hours_are_dropped():
    table: dict[u.Key, u.Counts] = {}
    u.merge(table, [("a", "q1", 0, "send", 1, 1, 1), ("b", "q2", u.HOUR_MS, "read", 1, 2, 3)])
    assert [r[0] for r in u.select(table, principal="b")] == ["b"]
    assert [r[1] for r in u.select(table, queue="q1")] == ["q1"]
    assert [r[2] for r in u.select(table, since_ms=u.HOUR_MS)] == [u.HOUR_MS]
    u.merge(table, [("a", "q1", (u.KEEP_HOURS + 1) * u.HOUR_MS, "send", 1, 1, 1)])
    assert all(k[2] > 0 for k in table)


# ---- the node's counter and gate --------------------------------------------------------


def test_usage_counter_batches_until_applied_and_resends_the_same_batch():
    clock = FakeClock()
    c = UsageCounter(clock.now_ms)
    c.count("a", "q", u.SEND, 3, 30)
    c.count("a", "q", u.SEND, 1, 10)
    first = c.batch()
    assert first is not None and first[1][0][4:] == (2, 4, 40)
    c.count("a", "q", u.SEND, 1, 1)  # after the batch was cut: the next one
    assert c.batch() == first  # not applied yet: the same sequence again
    c.flushed(first[0])
    second = c.batch()
    assert second is not None and second[0] > first[0] and second[1][0][4:] == (1, 1, 1)
    c.flushed(second[0])
    assert c.batch() is None
    later = UsageCounter(lambda: clock.now_ms() + 1)  # a restarted node: newer sequences
    later.count("a", "q", u.SEND, 1, 1)
    assert later.batch()[0] > second[0]  # type: ignore[index]


def _view(quotas: list[q.Quota], leaders: list[str]) -> SimpleNamespace:
    parts = [PartitionAssignment(i, (ReplicaRef(n, 1),), 1) for i, n in enumerate(leaders)]
    return SimpleNamespace(version=1, quotas=lambda: quotas, assignments=lambda queue: parts)


def test_gate_charges_k_tokens_per_message_for_k_leader_nodes():
    clock = FakeClock()
    quota = q.Quota("alice", "", 30, 0, 1.0)
    gate = QuotaGate(lambda: _view([quota], ["n1", "n2", "n3", "n1"]), clock)
    for _ in range(10):  # 10 messages x k=3 = the whole burst of 30
        gate.check("alice", "orders", 1, 0)
    with pytest.raises(errors.OverQuota) as info:
        gate.check("alice", "orders", 1, 0)
    assert info.value.retry_after_ms == 100  # 3 tokens at 30/s
    gate.check("bob", "orders", 1000, 0)  # no quota: never limited


# ---- on the wire and in the SDK ----------------------------------------------------------


class _RpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple) -> None:
        self._c, self._d, self._t = code, details, trailers

    def code(self):
        return self._c

    def details(self):
        return self._d

    def trailing_metadata(self):
        return self._t


def test_over_quota_carries_retry_after_ms_both_ways():
    code, details, trailers = to_status(errors.OverQuota("over quota for principal 'a'", 250))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert ("retry-after-ms", "250") in trailers
    back = from_rpc_error(_RpcError(code, details, trailers))
    assert isinstance(back, errors.OverQuota) and back.retry_after_ms == 250


def test_sdk_waits_what_the_server_says_without_using_up_retries():
    clock = FakeClock()
    answers = [errors.OverQuota("over quota", 400)] * 20 + ["ok"]

    def attempt(_timeout_s: float) -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    r = Retrier(retries=2, timeout_s=30, sleep=clock.sleep, clock=clock, rng=random.Random(1))
    assert r.run(attempt) == "ok"
    assert 8.0 <= clock() <= 8.8  # 20 waits of 400 ms (+ up to 10 % jitter)


def test_sdk_says_over_quota_once_its_deadline_passes():
    clock = FakeClock()

    def attempt(_timeout_s: float) -> str:
        raise errors.OverQuota("over quota for principal 'a' on queue 'q'; retry after 700 ms", 700)

    r = Retrier(retries=5, timeout_s=3, sleep=clock.sleep, clock=clock, rng=random.Random(1))
    with pytest.raises(errors.OverQuota) as info:
        r.run(attempt)
    assert "over quota for principal 'a'" in str(info.value)
    assert "retried for 2." in str(info.value) and clock() < 3


def test_async_sdk_waits_on_over_quota_too(monkeypatch):
    import asyncio

    from raft_queue.client import retry

    clock = FakeClock()
    answers: list[object] = [errors.OverQuota("over quota", 300)] * 3 + ["ok"]

    async def attempt(_timeout_s: float) -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.advance(seconds)

    r = Retrier(retries=0, timeout_s=30, clock=clock, rng=random.Random(1))
    monkeypatch.setattr(retry.asyncio, "sleep", fake_sleep)
    assert asyncio.run(r.run_async(attempt)) == "ok"
    assert len(waits) == 3 and all(0.3 <= w <= 0.33 for w in waits)
