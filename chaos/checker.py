"""Judge a recorded queue history (chaos.history) the way Jepsen judges Kafka and NATS.

``check(ops)`` returns a ``Report`` whose ``anomalies`` maps each class to examples:

- lost: an acknowledged (``ok``) send whose payload no receive, read or drain returned.
  Meaningful only after a final drain with faults healed (a warning says if none).
- unexpected: a payload returned that no send ever attempted.
- duplicated: delivery beyond the contract. Always: a record received again after an
  ack of it had completed (``redelivered_after_ack``), or two leases of one record both
  acked (``acked_twice``). With ``dedup`` (sends carry dedup ids, so retries must not
  store twice) also a payload stored at two offsets (``stored_twice``) or acked under
  two leases anywhere; a payload may be *received* again only while unacked.
- failed_but_seen: a payload whose every send attempt ended in ``fail`` was returned.
- offset_conflict: one (queue, partition, offset) holding two payloads.
- non_monotonic: one process's reads of a partition went backwards (offsets not
  increasing within a read, below its start, an offset it saw earlier no longer
  returned, or the reported high offset shrinking).
- hole: a read skipped offsets in [its start, its last offset].
- fifo_violation (``fifo_keys``): per (queue, key), records delivered out of offset order.
  Across a split (raft_queue/core/placement_keys.py) a key's records sit in a parent
  and then in one child: ``partition_rank`` {(queue, partition): depth in the split
  tree} orders them by (rank, offset), the order the queue promises.
- replica_divergence: one partition's replicas report different digests.

``recovered`` (info sends that were returned) is informational, as in Jepsen.
Assumed: no retention expiry, purge or dead-lettering during the run, and offset reads
return every record in [start, last] (acks do not remove records from the log).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chaos.history import Facts, Record, Slot, extract

ANOMALIES = (
    "lost",
    "unexpected",
    "duplicated",
    "failed_but_seen",
    "offset_conflict",
    "non_monotonic",
    "hole",
    "fifo_violation",
    "replica_divergence",
)
Example = dict[str, Any]


@dataclass
class Report:
    """The verdict: ``ok`` iff every anomaly class is empty."""

    anomalies: dict[str, list[Example]]
    recovered: list[Any]
    stats: dict[str, int]
    warnings: list[str]

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    @property
    def counts(self) -> dict[str, int]:
        counts = {name: len(self.anomalies.get(name, [])) for name in ANOMALIES}
        counts["recovered"] = len(self.recovered)
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": self.counts,
            "anomalies": self.anomalies,
            "recovered": self.recovered,
            "stats": self.stats,
            "warnings": self.warnings,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    def render(self, examples: int = 3) -> str:
        """A short human summary: verdict, stats, then a few examples per anomaly."""
        bad = {k: v for k, v in self.anomalies.items() if v}
        head = (
            "VALID" if self.ok else "INVALID: " + ", ".join(f"{k} {len(v)}" for k, v in bad.items())
        )
        stats = ", ".join(f"{k} {v}" for k, v in self.stats.items())
        lines = [head, f"  {stats}, recovered {len(self.recovered)}"]
        lines += [f"  warning: {w}" for w in self.warnings]
        for name, found in bad.items():
            lines += [f"  {name}: {json.dumps(e, default=str)}" for e in found[:examples]]
            if len(found) > examples:
                lines.append(f"  {name}: ... {len(found) - examples} more")
        return "\n".join(lines)


def check(
    history_ops: Iterable[Mapping[str, Any]],
    replica_digests: Mapping[Any, Mapping[Any, Any]] | None = None,
    fifo_keys: bool = False,
    dedup: bool = True,
    partition_rank: Mapping[tuple[str, Any], int] | None = None,
) -> Report:
    """Check a history. ``replica_digests``: {partition: {replica: digest}} at the end."""
    facts = extract(history_ops)
    anomalies: dict[str, list[Example]] = {
        "lost": _lost(facts),
        "unexpected": _unexpected(facts),
        "duplicated": _duplicated(facts, dedup),
        "failed_but_seen": _failed_but_seen(facts),
        "offset_conflict": _offset_conflicts(facts),
        "non_monotonic": _non_monotonic(facts),
        "hole": _holes(facts),
        "fifo_violation": _fifo_violations(facts, partition_rank or {}) if fifo_keys else [],
        "replica_divergence": _divergence(replica_digests or {}),
    }
    warnings = (
        [] if facts.drained else ["no ok drain: 'lost' means never returned, not proven lost"]
    )
    return Report(anomalies, _recovered(facts), _stats(facts), warnings)


def _seen(facts: Facts) -> set[Any]:
    return {r.payload for r in facts.observed()}


def _lost(facts: Facts) -> list[Example]:
    seen = _seen(facts)
    return [
        {"payload": payload, **(stored.where() if stored else {})}
        for payload, stored in facts.acked_sends.items()
        if payload not in seen
    ]


def _unexpected(facts: Facts) -> list[Example]:
    first: dict[Any, Record] = {}
    for record in facts.observed():
        if record.payload not in facts.attempts:
            first.setdefault(record.payload, record)
    return [{"payload": p, **r.where()} for p, r in first.items()]


def _failed_but_seen(facts: Facts) -> list[Example]:
    seen = _seen(facts)
    return [
        {"payload": payload}
        for payload, kinds in facts.attempts.items()
        if kinds == {"fail"} and payload in seen
    ]


def _recovered(facts: Facts) -> list[Any]:
    seen = _seen(facts)
    return [
        p
        for p, kinds in facts.attempts.items()
        if "info" in kinds and "ok" not in kinds and p in seen
    ]


def _stats(facts: Facts) -> dict[str, int]:
    def count(kind: str) -> int:
        return sum(kind in kinds for kinds in facts.attempts.values())

    return {
        "sends attempted": len(facts.attempts),
        "acked": count("ok"),
        "failed": count("fail"),
        "indeterminate": sum("ok" not in k and "info" in k for k in facts.attempts.values()),
        "delivered": len(facts.delivered),
        "read": sum(len(r.records) for r in facts.reads),
        "acks": len(facts.acks),
    }


def _duplicated(facts: Facts, dedup: bool) -> list[Example]:
    """Deliveries beyond the contract; with ``dedup`` a payload is one record everywhere."""

    def unit(record: Record) -> Any:
        return record.payload if dedup else record.slot

    found: list[Example] = []
    if dedup:
        slots: dict[Any, set[Slot]] = defaultdict(set)
        for record in [*facts.stored, *facts.observed()]:
            slots[record.payload].add(record.slot)
        found += [
            {"kind": "stored_twice", "payload": p, "slots": sorted(s, key=repr)}
            for p, s in slots.items()
            if len(s) > 1
        ]
    leases: dict[Any, set[Any]] = defaultdict(set)
    first_ack: dict[Any, Record] = {}
    for ack in facts.acks:
        leases[unit(ack)].add(ack.receipt if ack.receipt is not None else ("ack", ack.completed))
        if unit(ack) not in first_ack or ack.completed < first_ack[unit(ack)].completed:
            first_ack[unit(ack)] = ack
    found += [
        {
            "kind": "acked_twice",
            "payload": first_ack[u].payload,
            **first_ack[u].where(),
            "leases": len(ls),
        }
        for u, ls in leases.items()
        if len(ls) > 1
    ]
    return found + _redelivered_after_ack(facts, unit, first_ack)


def _redelivered_after_ack(facts: Facts, unit: Any, first_ack: dict[Any, Record]) -> list[Example]:
    """A receive invoked after an ack of the same record had completed returned it."""
    found = []
    for record in facts.delivered:
        ack = first_ack.get(unit(record))
        if ack is not None and record.invoked > ack.completed:
            found.append(
                {
                    "kind": "redelivered_after_ack",
                    "payload": record.payload,
                    **record.where(),
                    "ack_op": ack.completed,
                    "delivery_op": record.completed,
                }
            )
    return found


def _offset_conflicts(facts: Facts) -> list[Example]:
    payloads: dict[Slot, set[Any]] = defaultdict(set)
    for record in [*facts.stored, *facts.observed()]:
        payloads[record.slot].add(record.payload)
    return [
        {"queue": q, "partition": p, "offset": o, "payloads": sorted(ps, key=repr)}
        for (q, p, o), ps in payloads.items()
        if len(ps) > 1
    ]


def _non_monotonic(facts: Facts) -> list[Example]:
    """Per (process, partition): reads must never show the log going backwards."""
    found = []
    seen_max: dict[tuple[Any, str, Any], int] = {}
    seen_high: dict[tuple[Any, str, Any], int] = {}
    for read in sorted(facts.reads, key=lambda r: r.index):
        at = (read.process, read.queue, read.partition)
        where = {
            "process": read.process,
            "queue": read.queue,
            "partition": read.partition,
            "op": read.index,
        }
        offsets = [o for o, _ in read.records]
        if any(b <= a for a, b in zip(offsets, offsets[1:], strict=False)):
            found.append({**where, "problem": "offsets not increasing", "offsets": offsets[:20]})
        if offsets and offsets[0] < read.start:
            found.append(
                {**where, "problem": "offset below start", "start": read.start, "first": offsets[0]}
            )
        floor = seen_max.get(at)
        if not offsets and floor is not None and read.start <= floor:
            found.append(
                {**where, "problem": "earlier offset vanished", "start": read.start, "seen": floor}
            )
        high_floor = max(seen_high.get(at, 0), (floor + 1) if floor is not None else 0)
        if read.high is not None and read.high < high_floor:
            found.append(
                {**where, "problem": "high offset shrank", "high": read.high, "was": high_floor}
            )
        if offsets:
            seen_max[at] = max(seen_max.get(at, offsets[-1]), max(offsets))
        if read.high is not None:
            seen_high[at] = max(seen_high.get(at, 0), read.high)
    return found


def _holes(facts: Facts) -> list[Example]:
    """Offsets in [start, last returned] that a read did not return."""
    found = []
    for read in facts.reads:
        offsets = {o for o, _ in read.records}
        if not offsets:
            continue
        missing = sorted(set(range(read.start, max(offsets) + 1)) - offsets)
        if missing:
            found.append(
                {
                    "queue": read.queue,
                    "partition": read.partition,
                    "op": read.index,
                    "start": read.start,
                    "missing": missing[:20],
                    "count": len(missing),
                }
            )
    return found


def _fifo_violations(facts: Facts, rank: Mapping[tuple[str, Any], int]) -> list[Example]:
    """Per (queue, key), deliveries must follow offset order: never go back, never skip.
    A position is (the partition's rank, offset): a split parent's records come first.

    Redelivering the current record (its lease expired) is allowed.
    """

    def at(r: Record) -> tuple[int, int]:
        return (rank.get((r.queue, r.partition), 0), r.offset)

    known: dict[tuple[str, Any], set[tuple[int, int]]] = defaultdict(set)
    for record in [*facts.stored, *facts.delivered]:
        if record.key is not None:
            known[(record.queue, record.key)].add(at(record))
    delivered: dict[tuple[str, Any], set[tuple[int, int]]] = defaultdict(set)
    found = []
    for record in sorted(facts.delivered, key=lambda r: r.completed):
        if record.key is None:
            continue
        group = (record.queue, record.key)
        done = delivered[group]
        here = at(record)
        behind = [o for o in done if o > here]
        skipped = sorted(o for o in known[group] if o < here and o not in done)
        if behind or skipped:
            found.append(
                {
                    "queue": record.queue,
                    "key": record.key,
                    "partition": record.partition,
                    "offset": record.offset,
                    "after": [o for _, o in sorted(behind)][:5],
                    "skipped": [o for _, o in skipped][:5],
                    "op": record.completed,
                }
            )
        done.add(here)
    return found


def _divergence(replica_digests: Mapping[Any, Mapping[Any, Any]]) -> list[Example]:
    return [
        {"partition": partition, "digests": {str(r): d for r, d in by_replica.items()}}
        for partition, by_replica in replica_digests.items()
        if len(set(by_replica.values())) > 1
    ]


def main(argv: list[str] | None = None) -> int:
    """``python -m chaos.checker history.jsonl [--fifo] [--no-dedup]``: exit 1 if invalid."""
    import argparse

    from chaos.history import load

    parser = argparse.ArgumentParser(description="Check a chaos history (JSON lines).")
    parser.add_argument("history")
    parser.add_argument("--fifo", action="store_true", help="check per-key FIFO delivery")
    parser.add_argument("--no-dedup", action="store_true", help="sends carry no dedup ids")
    args = parser.parse_args(argv)
    report = check(load(args.history), fifo_keys=args.fifo, dedup=not args.no_dedup)
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
