"""Removing records: retention, ack compaction, purge, and dead letters.

Records only ever leave from the front of the log, so the retained records
are always the dense range ``[earliest, next_offset)`` and offsets are never
reused (as Kafka's log start offset). The front record goes when:

- ``retention_ms > 0`` and it is at least that old (acked or not, as SQS's
  retention period and Kafka's retention.ms);
- ``retention_bytes > 0`` and the retained payload exceeds it;
- ``retention_ms == 0`` and it is finished (acked, or dead and forgotten):
  the log is then a queue that compacts itself as consumers ack.

Each rule dooms a prefix of the front segment at once (a segment's records
share one timestamp; finished records are the offsets in no run; sizes come
from its end table), so trimming costs O(segments + runs), not O(records).
A segment is deleted when its last record goes; until then it stays, with
``earliest`` inside it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from raft_queue.core import dedup, runs
from raft_queue.core.delivery import mature, release_range
from raft_queue.core.results import ExpireResult
from raft_queue.core.segments import HAS_DEDUP, Segment, segment_at
from raft_queue.core.state import DEAD, DELIVERY, RECORDS, Run, Status, View, int_of, u64

# Records one Expire removes at most (bounds its latency; the next Expire
# continues), and dead offsets one Expire lists at most.
TRIM_LIMIT = 100_000
DEAD_LIST_LIMIT = 1_000

# Given the front segment and the front offset in it: where the doomed prefix ends.
Doomed = Callable[[View, Segment, int], int]


def expire(view: View) -> ExpireResult:
    """End due leases, trim the front by policy, expire dedup entries, and
    list dead records (repeatedly, until ForgetDead: at-least-once to the DLQ)."""
    mature(view)
    removed = _trim(view, _by_policy, TRIM_LIMIT)
    dedup.expire(view)
    return ExpireResult(removed, _dead_offsets(view, DEAD_LIST_LIMIT))


def purge(view: View) -> int:
    """Remove every record (dead ones too); dedup entries stay for their window."""
    return _trim(view, lambda _view, seg, _front: seg.end, None)


def forget_dead(view: View, offsets: tuple[int, ...]) -> int:
    """The leader forwarded these dead records; they become finished."""
    c, forgotten = view.c, 0
    for offset in offsets:
        held = runs.at(view, offset) if c.earliest <= offset < c.cursor else None
        if held is not None and held[1].status == Status.DEAD:
            runs.reshape(view, held[0], held[1], offset, offset + 1, None)
            c.done += 1
            forgotten += 1
    return forgotten


def _dead_offsets(view: View, limit: int) -> tuple[int, ...]:
    out: list[int] = []
    for key, _ in view.txn.scan(DEAD):
        if len(out) >= limit:
            break
        raw = view.txn.get(DELIVERY, key)
        if raw is not None:
            start = int_of(key)
            out.extend(range(start, start + min(Run.unpack(raw).length, limit - len(out))))
    return tuple(out)


def _by_policy(view: View, seg: Segment, front: int) -> int:
    """The end of the prefix from ``front`` that retention removes now,
    within ``seg``: each rule dooms a prefix, so their union is the longest."""
    cfg, c = view.cfg, view.c
    if cfg.retention_ms and view.now - seg.timestamp_ms >= cfg.retention_ms:
        return seg.end
    doomed = front
    over = c.stored_bytes - cfg.retention_bytes
    if cfg.retention_bytes and over > 0:
        # A record goes while the bytes retained before it exceed the bound:
        # up to the first j with size(front, j) >= over.
        i = front - seg.base
        if seg.size(i, seg.count) < over:
            return seg.end
        lo = bisect_left(range(i + 1, seg.count + 1), over, key=lambda j: seg.size(i, j))
        doomed = seg.base + i + 1 + lo
    if cfg.retention_ms == 0 and front < c.cursor and runs.at(view, front) is None:
        nxt = next(view.txn.scan(DELIVERY, u64(front)), None)
        finished = min(seg.end, c.cursor, int_of(nxt[0]) if nxt else c.cursor)
        doomed = max(doomed, finished)
    return doomed


def _trim(view: View, doomed: Doomed, limit: int | None) -> int:
    """Remove records from the front while ``doomed`` says so; the count."""
    c, removed = view.c, 0
    while c.earliest < c.next_offset and (limit is None or removed < limit):
        front = c.earliest
        seg = segment_at(view.txn, RECORDS, front)
        if seg is None or front >= seg.end:
            break  # cannot happen: the log is dense
        end = doomed(view, seg, front)
        if limit is not None:
            end = min(end, front + limit - removed)
        if end <= front:
            break
        _remove(view, seg, front, end)
        removed += end - front
    return removed


def _remove(view: View, seg: Segment, lo: int, hi: int) -> None:
    """Drop records [lo, hi) of ``seg`` (the front of the log) with their
    delivery state, keeping their dedup entries for their window."""
    c = view.c
    touched = min(hi, c.cursor)
    if lo < touched:
        covered, gone = 0, []
        for start, run in runs.overlapping(view, lo, touched):
            end = min(start + run.length, touched)
            covered += end - start
            runs.drop(view, start, run)
            if start + run.length > end:
                runs.put(view, end, run._replace(length=start + run.length - end))
            gone.append((start, end))
        c.done -= touched - lo - covered  # the rest were finished
        for start, end in gone:
            release_range(view, start, end)
    if seg.flags & HAS_DEDUP:
        for offset in range(lo, hi):
            head = seg.head(offset - seg.base)
            dedup.preserve(view, head.dedup_id, offset, seg.timestamp_ms)
    c.stored_bytes -= seg.size(lo - seg.base, hi - seg.base)
    if hi == seg.end:
        view.txn.delete(RECORDS, u64(seg.base))
    c.earliest = hi
    c.cursor = max(c.cursor, c.earliest)
