"""Offset arithmetic for the ``raftq`` Spark source: pure, no Spark, no gRPC.

Everything here takes the queue's shape as plain values (``Layout``: each
partition's retained ``[earliest, latest)``) so that it can be unit-tested
without a cluster, and so that the Spark driver and the tests agree exactly.

Offsets travel through Spark's checkpoint as JSON, so they are kept in the
JSON shape Kafka's source uses: ``{"queue": {"<partition>": offset}}`` with
**string** partition keys (``{0: 5}`` would come back as ``{"0": 5}``).
In a spec given by the user, ``-2`` means earliest and ``-1`` latest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1
_NAMED = {"earliest": EARLIEST, "latest": LATEST}

Offsets = dict[str, dict[str, int]]
"""``{queue: {"<partition>": offset}}``, the checkpointed form."""


class OffsetError(ValueError):
    """A bad offset option, or offsets that cannot be honoured (data loss)."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """One partition's retained records: offsets ``[earliest, latest)``."""

    earliest: int
    latest: int


Layout = dict[str, dict[int, Bounds]]
"""``{queue: {partition: Bounds}}`` as read from the cluster at one moment."""


@dataclass(frozen=True, slots=True)
class Range:
    """Records ``[start, end)`` of one queue partition: the unit of a Spark task."""

    queue: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A parsed ``startingOffsets`` / ``endingOffsets`` value.

    ``default`` (EARLIEST or LATEST) applies to every partition that
    ``explicit`` does not name, including partitions that appear later.
    """

    default: int
    explicit: Mapping[str, Mapping[int, int]]


def parse_spec(text: str | None, option: str, default: int, queues: Sequence[str]) -> OffsetSpec:
    """Parse ``earliest`` / ``latest`` / Kafka-style JSON; raise OffsetError naming ``option``.

    JSON may only name subscribed queues, partitions as non-negative integers
    and offsets >= -2; omitted partitions take ``default``.
    """
    raw = (text or "").strip()
    if not raw:
        return OffsetSpec(default, {})
    if raw.lower() in _NAMED:
        return OffsetSpec(_NAMED[raw.lower()], {})
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OffsetError(
            f"option {option}: not 'earliest', 'latest' or JSON like "
            f'{{"queue": {{"0": 42, "1": -2}}}}: {exc}'
        ) from exc
    return OffsetSpec(default, _explicit(parsed, option, queues))


def _explicit(parsed: object, option: str, queues: Sequence[str]) -> dict[str, dict[int, int]]:
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise OffsetError(f'option {option}: JSON must look like {{"queue": {{"0": 42}}}}')
    out: dict[str, dict[int, int]] = {}
    for queue, parts in parsed.items():
        if queue not in queues:
            raise OffsetError(f"option {option}: queue {queue!r} is not subscribed ({queues})")
        out[queue] = {}
        for key, value in parts.items():
            if not str(key).isdigit():
                raise OffsetError(f"option {option}: partition {key!r} of {queue!r} is not >= 0")
            if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
                raise OffsetError(
                    f"option {option}: offset {value!r} of {queue}/{key} must be an integer "
                    ">= 0, or -2 (earliest) or -1 (latest)"
                )
            out[queue][int(key)] = value
    return out


def resolve(spec: OffsetSpec, layout: Layout, option: str) -> Offsets:
    """Concrete offsets for every partition of ``layout``; explicit values are kept as given.

    Raises OffsetError if ``spec`` names a partition the queue does not have.
    """
    for queue, parts in spec.explicit.items():
        missing = sorted(set(parts) - set(layout.get(queue, {})))
        if missing:
            have = len(layout.get(queue, {}))
            raise OffsetError(
                f"option {option}: queue {queue!r} has {have} partitions, no partition {missing}"
            )
    out: Offsets = {}
    for queue, parts in layout.items():
        out[queue] = {}
        for partition, bounds in parts.items():
            want = spec.explicit.get(queue, {}).get(partition, spec.default)
            out[queue][str(partition)] = pick(want, bounds)
    return out


def pick(want: int, bounds: Bounds) -> int:
    """``want`` with EARLIEST / LATEST replaced by the partition's bounds."""
    if want == EARLIEST:
        return bounds.earliest
    if want == LATEST:
        return bounds.latest
    return want


def latest_of(layout: Layout) -> Offsets:
    """The end of every partition: where a reader caught up with the log stands."""
    return {q: {str(p): b.latest for p, b in parts.items()} for q, parts in layout.items()}


def check_retained(start: Offsets, layout: Layout, fail_on_data_loss: bool) -> Offsets:
    """``start`` moved up to each partition's earliest retained offset.

    An offset below it means records were deleted (retention, purge) before
    they were read: OffsetError if ``fail_on_data_loss``, as Kafka's source.
    An offset above ``latest`` means the queue was recreated: same rule,
    and without failing the partition is read again from its earliest.
    """
    out: Offsets = {}
    for queue, parts in start.items():
        out[queue] = {}
        for key, offset in parts.items():
            bounds = layout.get(queue, {}).get(int(key))
            if bounds is None or bounds.earliest <= offset <= bounds.latest:
                out[queue][key] = offset
                continue
            if fail_on_data_loss:
                raise OffsetError(_loss_message(queue, key, offset, bounds))
            out[queue][key] = bounds.earliest
    return out


def _loss_message(queue: str, key: str, offset: int, bounds: Bounds) -> str:
    why = "deleted (retention or purge)" if offset < bounds.earliest else "beyond the end"
    return (
        f"data loss: {queue}/{key} offset {offset} is {why}; the partition holds "
        f"[{bounds.earliest}, {bounds.latest}). Set failOnDataLoss=false to skip to "
        f"offset {bounds.earliest} instead."
    )


def with_new_partitions(start: Offsets, layout: Layout) -> Offsets:
    """``start`` plus every partition of ``layout`` it lacks, at that partition's earliest.

    A partition created after the query started has nothing to miss, so it is
    read from its beginning (Kafka's source does the same).
    """
    out = {q: dict(parts) for q, parts in start.items()}
    for queue, parts in layout.items():
        known = out.setdefault(queue, {})
        for partition, bounds in parts.items():
            known.setdefault(str(partition), bounds.earliest)
    return out


def ranges(start: Offsets, end: Offsets, option: str = "endingOffsets") -> list[Range]:
    """One Range per partition of ``end`` with records to read, ordered by (queue, partition).

    A partition missing from ``start`` starts at 0. Raises OffsetError if an
    end is before its start (a user's endingOffsets below startingOffsets).
    """
    out = []
    for queue in sorted(end):
        for key in sorted(end[queue], key=int):
            lo, hi = start.get(queue, {}).get(key, 0), end[queue][key]
            if hi < lo:
                raise OffsetError(f"option {option}: {queue}/{key} ends at {hi} before {lo}")
            if hi > lo:
                out.append(Range(queue, int(key), lo, hi))
    return out


def split_ranges(items: Sequence[Range], min_partitions: int | None) -> list[Range]:
    """Split big ranges so that there are about ``min_partitions`` tasks (Kafka's minPartitions).

    Each range gets a share of the tasks proportional to its size (at least
    one); pieces are contiguous, in order, and cover each range exactly.
    """
    if not min_partitions or min_partitions <= len(items):
        return list(items)
    total = sum(r.size for r in items) or 1
    out: list[Range] = []
    for r in items:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
        pairs = zip(bounds, bounds[1:], strict=False)
        out.extend(Range(r.queue, r.partition, a, b) for a, b in pairs if b > a)
    return out


def rate_limit(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """End offsets admitting at most ``max_rows`` records in total (maxOffsetsPerTrigger).

    The budget is split in proportion to each partition's backlog with the
    largest-remainder method, so the total is exactly ``min(max_rows,
    backlog)`` (Kafka's split can overshoot by rounding up); ties go to the
    first (queue, partition). A partition absent from ``start`` starts at 0.
    """
    if max_rows < 1:
        raise OffsetError(f"maxOffsetsPerTrigger must be >= 1, got {max_rows}")
    keys = [(q, p) for q in sorted(latest) for p in sorted(latest[q], key=int)]
    begin = {(q, p): start.get(q, {}).get(p, 0) for q, p in keys}
    backlog = {k: max(latest[k[0]][k[1]] - begin[k], 0) for k in keys}
    total = sum(backlog.values())
    if total <= max_rows:
        return {q: dict(parts) for q, parts in latest.items()}
    shares = {k: divmod(max_rows * backlog[k], total) for k in keys}
    grant = {k: share for k, (share, _) in shares.items()}
    spare = max_rows - sum(grant.values())
    by_remainder = sorted(keys, key=lambda k: -shares[k][1])  # stable: ties keep order
    for k in by_remainder[:spare]:
        grant[k] += 1
    out: Offsets = {q: {} for q in latest}
    for q, p in keys:
        out[q][p] = begin[(q, p)] + grant[(q, p)]
    return out


def cap(end: Offsets, target: Offsets | None) -> Offsets:
    """``end`` lowered to ``target`` (Trigger.AvailableNow); partitions absent from it stay put."""
    if target is None:
        return end
    return {
        q: {p: min(o, target.get(q, {}).get(p, o)) for p, o in parts.items()}
        for q, parts in end.items()
    }


def offset_for_time(bounds: Bounds, found: int | None) -> int:
    """Where a partition starts for a time: ``found``, the offset of the first
    record appended at or after it (the server's answer to a Read with
    ``timestamp_ms``, as Kafka's offsetsForTimes; None if there is none, which
    means the partition's end), kept within the planned ``bounds``: records
    appended after the plan's layout wait for the next plan."""
    if found is None:
        return bounds.latest
    return max(bounds.earliest, min(found, bounds.latest))


def parse_timestamp(text: str | None, option: str) -> int | None:
    """``startingTimestamp`` / ``endingTimestamp``: milliseconds since the epoch, as Kafka."""
    if text is None or not str(text).strip():
        return None
    try:
        value = int(str(text).strip())
    except ValueError as exc:
        raise OffsetError(f"option {option}: {text!r} is not milliseconds since the epoch") from exc
    if value < 0:
        raise OffsetError(f"option {option}: must be >= 0, got {value}")
    return value


def to_json(offsets: Offsets) -> str:
    """Stable JSON text (sorted keys) for logs and for Kafka-style ``endingOffsets``."""
    return json.dumps(offsets, sort_keys=True)


def total(items: Iterable[Range]) -> int:
    return sum(r.size for r in items)
