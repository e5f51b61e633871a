"""PartitionMachine against a reference model (Hypothesis state machine).

The model is the contract written as plainly as possible: a dict of records,
each with a status, and "visible" computed from scratch on every lease. The
machine (cursor, timers, ready/blocked tables, counters) must give exactly
the same results, and a second replica fed the same commands through the
wire codec must end with the same digest.

Invariants checked on the way, independent of the model's bookkeeping:
offsets only grow and are dense; a leased message is not delivered again
before its deadline; an acked message is never delivered again; a dedup id
within its window returns the original offset; FIFO never has two records of
a key in flight and leases a key in offset order.
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from raft_queue.core.codec import encode
from raft_queue.core.commands import (
    Ack,
    Append,
    Batch,
    ChangeVisibility,
    Command,
    CommitOffset,
    Configure,
    Expire,
    ForgetDead,
    Lease,
    Nack,
    NewRecord,
    PartitionConfig,
    Purge,
    ReceiptRef,
    Release,
)
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.records import to_blob
from raft_queue.core.results import (
    NOT_FOUND,
    OK,
    STALE,
    AppendItem,
    AppendResult,
    ExpireResult,
    History,
    LeaseEvent,
    LeaseResult,
    ReceiptsResult,
)
from raft_queue.core.segments import RECORD_OVERHEAD, Segment
from raft_queue.core.state import (
    BLOCKED,
    DEAD,
    DEDUP,
    DELIVERY,
    HISTORY_LIMIT,
    READY,
    RECORDS,
    TIMERS,
    Run,
    Status,
    int_of,
    load_counters,
    pair_key,
    u64,
    unpack_pair,
)
from raft_queue.storage import MemoryStore

FINISHED = ("done", "dead", "forgotten")


@dataclass
class Rec:
    offset: int
    ts: int
    rec: NewRecord
    status: str = "new"  # new | leased | waiting | ready | done | dead | forgotten
    epoch: int = 0
    count: int = 0
    at: int = 0  # leased: deadline; waiting: visible-at
    events: list[LeaseEvent] = field(default_factory=list)

    @property
    def size(self) -> int:
        return RECORD_OVERHEAD + len(to_blob(self.rec))  # as retention_bytes counts it


@dataclass
class Model:
    """The partition contract, executed naively."""

    cfg: PartitionConfig
    recs: dict[int, Rec] = field(default_factory=dict)  # retained records
    next_offset: int = 0
    earliest: int = 0
    last_ts: int = 0
    clock: int = 0  # highest now seen: dedup windows are measured on it
    dedup: dict[str, tuple[int, int]] = field(default_factory=dict)
    requests: dict[bytes, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)

    def status_at(self, r: Rec, now: int) -> str:
        """``r.status`` once the timers due by ``now`` have run."""
        if r.status == "leased" and r.at <= now:
            limit = self.cfg.max_receives
            return "dead" if limit and r.count >= limit else "ready"
        return "ready" if r.status == "waiting" and r.at <= now else r.status

    def mature(self, now: int) -> None:
        """Every command but Append and CommitOffset first runs the due timers:
        leases end by ``now``, waits by ``clock`` (which never goes back)."""
        self.clock = max(self.clock, now)
        for r in self.recs.values():
            r.status = self.status_at(r, self.clock if r.status == "waiting" else now)

    def append(self, recs: tuple[NewRecord, ...], now: int, request: bytes = b"") -> AppendResult:
        ts = self.last_ts = max(now, self.last_ts)
        self.clock = max(self.clock, now)
        window = self.cfg.dedup_window_ms
        seen_request = self.requests.get(request) if request and window else None
        if seen_request and self.clock - seen_request[1] < window:
            return AppendResult.of(AppendItem(o, True) for o in seen_request[0])
        items = []
        for rec in recs:
            seen = self.dedup.get(rec.dedup_id)
            window = self.cfg.dedup_window_ms
            if rec.dedup_id and window and seen and self.clock - seen[1] < window:
                items.append(AppendItem(seen[0], True))
                continue
            if rec.dedup_id and window:
                self.dedup[rec.dedup_id] = (self.next_offset, ts)
            self.recs[self.next_offset] = Rec(self.next_offset, ts, rec)
            items.append(AppendItem(self.next_offset, False))
            self.next_offset += 1
        if request and window:
            self.requests[request] = (tuple(i.offset for i in items), ts)
        return AppendResult.of(items)

    def is_head(self, r: Rec) -> bool:
        if self.cfg.ordering != "fifo" or not r.rec.key:
            return True
        same = [
            o for o, x in self.recs.items() if x.rec.key == r.rec.key and x.status not in FINISHED
        ]
        return min(same) == r.offset

    def visible(self, r: Rec) -> bool:
        if r.status == "new":
            delay = max(r.rec.delay_ms, self.cfg.delay_ms)
            return (delay == 0 or self.clock >= r.ts + delay) and self.is_head(r)
        return r.status == "ready" and self.is_head(r)

    def lease(
        self, n: int, visibility: int, now: int, consumer: str
    ) -> list[tuple[int, int, int, int]]:
        self.mature(now)
        chosen = [r for o, r in sorted(self.recs.items()) if self.visible(r)][:n]
        deadline = now + (visibility or self.cfg.visibility_timeout_ms)
        for r in chosen:
            r.status, r.epoch, r.count, r.at = "leased", r.epoch + 1, r.count + 1, deadline
            r.events.append(LeaseEvent(now, consumer, deadline))
        return [(r.offset, r.epoch, r.count, deadline) for r in chosen]

    def settle(self, refs: tuple[ReceiptRef, ...], now: int, action: Any) -> tuple[str, ...]:
        self.mature(now)
        out = []
        for ref in refs:
            r = self.recs.get(ref.offset)
            if r is None or r.status in FINISHED or r.epoch == 0:
                out.append(NOT_FOUND)
            elif r.epoch != ref.epoch:
                out.append(STALE)
            else:
                action(r)
                out.append(OK)
        return tuple(out)

    def nack(self, r: Rec, delay: int, now: int) -> None:
        if self.cfg.max_receives and r.count >= self.cfg.max_receives:
            r.status = "dead"
        elif delay == 0:
            r.status = "ready"
        else:
            r.status, r.at = "waiting", now + delay

    def release(self, r: Rec) -> None:
        """Undo a running lease; the core keeps only the last HISTORY_LIMIT
        events, so one dropped before this lease stays dropped."""
        if r.status == "leased":
            r.status, r.epoch, r.count, r.at = "ready", r.epoch + 1, r.count - 1, 0
            r.events = r.events[-HISTORY_LIMIT:][:-1]

    def expire(self, now: int) -> ExpireResult:
        self.mature(now)
        removed = 0
        while self.earliest < self.next_offset and self.removable(self.recs[self.earliest], now):
            del self.recs[self.earliest]
            self.earliest += 1
            removed += 1
        dead = tuple(o for o, r in sorted(self.recs.items()) if r.status == "dead")
        return ExpireResult(removed, dead)

    def removable(self, r: Rec, now: int) -> bool:
        cfg = self.cfg
        if cfg.retention_ms and now - r.ts >= cfg.retention_ms:
            return True
        if cfg.retention_bytes and self.bytes() > cfg.retention_bytes:
            return True
        return cfg.retention_ms == 0 and r.status in ("done", "forgotten")

    def bytes(self) -> int:
        return sum(r.size for r in self.recs.values())

    def in_flight(self, now: int) -> list[Rec]:
        return [r for r in self.recs.values() if r.status == "leased" and r.at > now]


class PartitionModelTest(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.machine = PartitionMachine()
        self.replicas = [MemoryStore(PartitionMachine.TABLES) for _ in range(2)]
        self.now = 1000
        self.issued: list[ReceiptRef] = []
        self.acked: set[int] = set()
        self.dead_seen: tuple[int, ...] = ()
        self.last_lease: tuple[ReceiptRef, ...] = ()
        self.model = Model(PartitionConfig())

    def run(self, cmd: Command) -> Any:
        """Apply on replica 0 as a command and on replica 1 as its Raft entry."""
        with self.replicas[0].begin(write=True) as txn:
            result = self.machine.apply(txn, cmd)
        with self.replicas[1].begin(write=True) as txn:
            assert self.machine.apply_encoded(txn, encode(cmd)) == result
        return result

    @initialize(
        ordering=st.sampled_from(["none", "fifo"]),
        max_receives=st.sampled_from([0, 1, 2, 3]),
        dedup_window_ms=st.sampled_from([0, 30, 300]),
        retention_ms=st.sampled_from([0, 0, 50, 500]),
        retention_bytes=st.sampled_from([0, 0, 12, 80, 200]),
        delay_ms=st.sampled_from([0, 0, 10]),
        visibility_timeout_ms=st.sampled_from([10, 50]),
    )
    def configure(self, **config: Any) -> None:
        self.model.cfg = PartitionConfig(**config)
        assert self.run(Configure(self.model.cfg)) is None

    @rule(
        records=st.lists(
            st.builds(
                NewRecord,
                body=st.binary(max_size=4),
                key=st.sampled_from(["", "a", "b", "c"]),
                dedup_id=st.sampled_from(["", "", "d1", "d2", "d3"]),
                delay_ms=st.sampled_from([0, 0, 0, 5, 40]),
                headers=st.sampled_from([(), (), (("h", b"v"), ("i", b""))]),
            ),
            min_size=1,
            max_size=6,
        ),
        batched=st.booleans(),
        request=st.sampled_from([b"", b"", b"r1", b"r2"]),
    )
    def append(self, records: list[NewRecord], batched: bool, request: bytes) -> None:
        """One Append, or (as the leader's group commit) a Batch of one each;
        with a request id, a repeat within the window is one duplicate."""
        before, clock = self.model.next_offset, max(self.now, self.model.clock)
        window = self.model.dedup.copy()
        if batched:
            cmds = tuple(Append((r,), self.now, request) for r in records)
            results = self.run(Batch(cmds))
            result = AppendResult.of(i for res in results for i in res.items)
            expected = AppendResult.of(
                i for r in records for i in self.model.append((r,), self.now, request).items
            )
        else:
            result = self.run(Append(tuple(records), self.now, request))
            expected = self.model.append(tuple(records), self.now, request)
        assert result == expected
        fresh = [item.offset for item in result.items if not item.duplicate]
        assert fresh == list(range(before, before + len(fresh)))  # dense, growing
        if request and self.model.cfg.dedup_window_ms:
            return  # a repeated request answers with its first offsets, whatever the ids
        for rec, item in zip(records, result.items, strict=True):
            seen = window.get(rec.dedup_id)
            if seen and clock - seen[1] < self.model.cfg.dedup_window_ms:
                assert item == AppendItem(seen[0], True)

    @rule(
        n=st.integers(1, 8),
        visibility=st.sampled_from([0, 5, 20, 100]),
        consumer=st.sampled_from(["alpha", "beta"]),
    )
    def lease(self, n: int, visibility: int, consumer: str) -> None:
        in_flight = {r.offset for r in self.model.in_flight(self.now)}
        result = self.run(Lease(consumer, n, visibility, self.now))
        assert isinstance(result, LeaseResult)
        got = [(m.record.offset, m.epoch, m.receive_count, m.deadline_ms) for m in result.messages]
        assert got == self.model.lease(n, visibility, self.now, consumer)
        for m in result.messages:
            assert m.record.offset not in in_flight  # invisible until its deadline
            assert m.record.offset not in self.acked  # never redelivered once acked
            assert m.record.body == self.model.recs[m.record.offset].rec.body
            self.issued.append(ReceiptRef(m.record.offset, m.epoch))
        self.last_lease = tuple(ReceiptRef(m.record.offset, m.epoch) for m in result.messages)

    def _receipts(self, data: st.DataObject) -> tuple[ReceiptRef, ...]:
        pool = self.issued[-8:] + [ReceiptRef(self.model.next_offset + 3, 1)]
        return tuple(data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)))

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        refs = self._receipts(data)

        def done(r: Rec) -> None:
            r.status = "done"

        result = self.run(Ack(refs, self.now))
        assert result == ReceiptsResult.of(self.model.settle(refs, self.now, done))
        self.acked |= {ref.offset for ref, o in zip(refs, result.outcomes, strict=True) if o == OK}

    @precondition(lambda self: self.last_lease)
    @rule(action=st.sampled_from(["ack", "nack", "nack_later", "extend", "end", "release"]))
    def settle_the_last_lease(self, action: str) -> None:
        """Every receipt of the last Lease, in order: the runs a consumer sends."""
        refs = self.last_lease
        acts: dict[str, tuple[Command, Any]] = {
            "ack": (Ack(refs, self.now), lambda r: setattr(r, "status", "done")),
            "nack": (Nack(refs, 0, self.now), lambda r: self.model.nack(r, 0, self.now)),
            "nack_later": (Nack(refs, 15, self.now), lambda r: self.model.nack(r, 15, self.now)),
            "extend": (ChangeVisibility(refs, 60, self.now), self._extend(60)),
            "end": (ChangeVisibility(refs, 0, self.now), self._extend(0)),
            "release": (Release(refs, self.now), self.model.release),
        }
        cmd, change = acts[action]
        result = self.run(cmd)
        assert result == ReceiptsResult.of(self.model.settle(refs, self.now, change))
        if action == "ack":
            self.acked |= {r.offset for r, o in zip(refs, result.outcomes, strict=True) if o == OK}

    def _extend(self, visibility: int) -> Any:
        def change(r: Rec) -> None:
            r.status, r.at = "leased", self.now + visibility

        return change

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), delay=st.sampled_from([0, 0, 15]))
    def nack(self, data: st.DataObject, delay: int) -> None:
        refs = self._receipts(data)
        result = self.run(Nack(refs, delay, self.now))
        expected = self.model.settle(refs, self.now, lambda r: self.model.nack(r, delay, self.now))
        assert result == ReceiptsResult.of(expected)

    @precondition(lambda self: self.issued)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        refs = self._receipts(data)
        result = self.run(Release(refs, self.now))
        assert result == ReceiptsResult.of(self.model.settle(refs, self.now, self.model.release))

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), visibility=st.sampled_from([0, 10, 60]))
    def change_visibility(self, data: st.DataObject, visibility: int) -> None:
        refs = self._receipts(data)

        def change(r: Rec) -> None:
            r.status, r.at = "leased", self.now + visibility

        result = self.run(ChangeVisibility(refs, visibility, self.now))
        assert result == ReceiptsResult.of(self.model.settle(refs, self.now, change))

    @rule(ms=st.sampled_from([0, 1, 5, 10, 25, 100, 400]))
    def advance_clock(self, ms: int) -> None:
        self.now += ms

    @rule(back=st.sampled_from([1, 30]))
    def leader_clock_steps_back(self, back: int) -> None:
        """A new leader's clock may lag; appends still never go back in time."""
        self.now = max(self.now - back, 0)

    @rule()
    def expire(self) -> None:
        result = self.run(Expire(self.now))
        assert result == self.model.expire(self.now)
        self.dead_seen = result.dead
        self._check_dedup_table()

    @precondition(lambda self: self.dead_seen)
    @rule(data=st.data())
    def forget_dead(self, data: st.DataObject) -> None:
        offsets = tuple(data.draw(st.lists(st.sampled_from(self.dead_seen), max_size=3)))
        forgotten = 0
        for o in set(offsets):
            r = self.model.recs.get(o)
            if r is not None and r.status == "dead":
                r.status, forgotten = "forgotten", forgotten + 1
        assert self.run(ForgetDead(offsets)) == forgotten

    @rule(data=st.data())
    def purge(self, data: st.DataObject) -> None:
        if data.draw(st.integers(0, 9)) != 0:  # rare: it resets everything
            return
        m = self.model
        m.clock = max(m.clock, self.now)
        assert self.run(Purge(self.now)) == m.next_offset - m.earliest
        m.recs.clear()
        m.earliest = m.next_offset

    @rule(data=st.data())
    def read_from_any_offset(self, data: st.DataObject) -> None:
        """Reads by offset find the segment holding it: at segment boundaries,
        inside a partly trimmed one, below earliest and past the end."""
        m = self.model
        offset = data.draw(st.integers(max(m.earliest - 2, 0), m.next_offset + 1))
        n = data.draw(st.integers(0, 5))
        max_bytes = data.draw(st.sampled_from([None, 0, 3, 8]))
        with self.replicas[1].begin() as txn:
            got = self.machine.read(txn, offset, n, max_bytes)
        want: list[int] = []
        total = 0
        for o in range(offset, m.next_offset) if m.earliest <= offset else ():
            total += len(m.recs[o].rec.body)
            if len(want) >= n or (want and max_bytes is not None and total > max_bytes):
                break
            want.append(o)
        assert [r.offset for r in got.records] == want
        for r in got.records:
            rec = m.recs[r.offset]
            assert (r.body, r.key, r.headers, r.dedup_id, r.timestamp_ms) == (
                rec.rec.body,
                rec.rec.key,
                rec.rec.headers,
                rec.rec.dedup_id,
                rec.ts,
            )
        assert got.next_offset == (want[-1] + 1 if want else offset)

    @rule(group=st.sampled_from(["g", "h"]), offset=st.integers(0, 20), reset=st.booleans())
    def commit_offset(self, group: str, offset: int, reset: bool) -> None:
        old = self.model.groups.get(group)
        stored = offset if reset or old is None or offset > old else old
        self.model.groups[group] = stored
        assert self.run(CommitOffset(group, offset, reset)) == stored

    def _check_dedup_table(self) -> None:
        """After Expire, exactly the dedup entries still inside their window
        remain: per dedup id, and per request id (with the Append's offsets)."""
        m = self.model
        window = m.cfg.dedup_window_ms
        live = {e for e in m.dedup.values() if m.clock - e[1] < window}
        live_requests = {
            (b"\xfe" + rid, ts, offsets)
            for rid, (offsets, ts) in m.requests.items()
            if m.clock - ts < window
        }
        stored, requests = set(), set()
        with self.replicas[0].begin() as txn:
            for key, value in txn.scan(DEDUP):
                if key.startswith(b"\xfe"):
                    first, ts = unpack_pair(value[:16])
                    count = int.from_bytes(value[16:20], "big")
                    listed = struct.unpack(f">{count}Q", value[20:]) if value[20:] else None
                    requests.add((key, ts, listed or tuple(range(first, first + count))))
                else:
                    stored.add(unpack_pair(value))
        assert stored == live
        assert requests == live_requests

    @invariant()
    def log_and_counters_match_the_model(self) -> None:
        m = self.model
        with self.replicas[0].begin() as txn:
            read = self.machine.read(txn, m.earliest, 1000)
            stats = self.machine.stats(txn, self.now)
            offsets = self.machine.offsets(txn)
        assert [(r.offset, r.body) for r in read.records] == [
            (o, r.rec.body) for o, r in sorted(m.recs.items())
        ]
        assert (read.earliest_offset, read.latest_offset) == (m.earliest, m.next_offset)
        status = [m.status_at(r, self.now) for r in m.recs.values()]
        live = [s for s in status if s not in FINISHED]
        dead = [s for s in status if s == "dead"]
        assert (stats.messages, stats.dead, stats.bytes) == (len(live), len(dead), m.bytes())
        assert stats.in_flight == len(m.in_flight(self.now))
        assert offsets == m.groups

    @invariant()
    def segments_runs_index_tables_and_counters_agree_with_a_recount(self) -> None:
        with self.replicas[0].begin() as txn:
            c = load_counters(txn)
            runs = [(int_of(k), Run.unpack(v)) for k, v in txn.scan(DELIVERY)]
            segments = [Segment(int_of(k), v) for k, v in txn.scan(RECORDS)]
            index = {t: [k for k, _ in txn.scan(t)] for t in (TIMERS, READY, BLOCKED, DEAD)}
        # The log: segments back to back, the first one possibly trimmed in part.
        held = [o for seg in segments for o in range(seg.base, seg.end)]
        assert held[held.index(c.earliest) if held else 0 :] == list(
            range(c.earliest, c.next_offset)
        )
        assert not segments or segments[0].base <= c.earliest < segments[0].end
        # Runs: disjoint, inside [earliest, cursor), merged when they could be.
        in_runs = [o for start, run in runs for o in range(start, start + run.length)]
        assert len(in_runs) == len(set(in_runs))
        assert all(c.earliest <= o < c.cursor for o in in_runs)
        for (a, ra), (b, rb) in itertools.pairwise(runs):
            if a + ra.length == b and Status.BLOCKED not in (ra.status, rb.status):
                assert not ra.same_state(rb), (a, ra, b, rb)
        records = Counter()
        for _, run in runs:
            records[run.status] += run.length
        assert (c.leased, c.waiting, c.dead) == tuple(
            records[s] for s in (Status.LEASED, Status.WAITING, Status.DEAD)
        )
        timed = (Status.LEASED, Status.WAITING)
        assert index == {
            TIMERS: sorted(pair_key(r.at_ms, s) for s, r in runs if r.status in timed),
            READY: [u64(s) for s, r in runs if r.status == Status.READY],
            BLOCKED: index[BLOCKED],
            DEAD: [u64(s) for s, r in runs if r.status == Status.DEAD],
        }
        blocked = sorted(s for s, r in runs if r.status == Status.BLOCKED)
        assert sorted(int_of(k[-8:]) for k in index[BLOCKED]) == blocked
        assert all(r.length == 1 for _, r in runs if r.status == Status.BLOCKED)
        assert c.done == c.cursor - c.earliest - len(in_runs)

    @invariant()
    def history_and_oldest_timestamp_match_the_model(self) -> None:
        m = self.model
        names = {"leased": "in_flight", "waiting": "delayed", "ready": "queued", "dead": "dead"}
        with self.replicas[0].begin() as txn:
            stats = self.machine.stats(txn, self.now)
            for o, r in m.recs.items():
                hist = self.machine.history(txn, o)
                assert hist is not None
                if r.status in ("done", "forgotten"):
                    assert hist == History("done", 0, ())
                elif r.status == "new":
                    assert (hist.state, hist.receive_count) in {
                        ("queued", 0),
                        ("blocked", 0),
                        ("delayed", 0),
                    }
                else:
                    events = tuple(r.events[-HISTORY_LIMIT:])
                    assert hist == History(names[r.status], r.count, events)
        unfinished = [r for _, r in sorted(m.recs.items()) if r.status not in FINISHED]
        assert stats.oldest_timestamp_ms == (unfinished[0].ts if unfinished else 0)

    @invariant()
    def fifo_keeps_one_in_flight_per_key(self) -> None:
        if self.model.cfg.ordering != "fifo":
            return
        keys = [r.rec.key for r in self.model.in_flight(self.now) if r.rec.key]
        assert len(keys) == len(set(keys))
        for r in self.model.recs.values():
            if r.status in ("leased", "waiting", "ready") and r.rec.key:
                assert self.model.is_head(r)  # leased in offset order per key

    @invariant()
    def replicas_have_equal_digests(self) -> None:
        digests = []
        for store in self.replicas:
            with store.begin() as txn:
                digests.append(self.machine.digest(txn))
        assert digests[0] == digests[1]


PartitionModelTest.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None, report_multiple_bugs=False
)
test_partition_matches_model = PartitionModelTest.TestCase
