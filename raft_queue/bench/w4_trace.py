"""W4's path per Receive, from RAFTQ_STAGE_TRACE files (docs/benchmarks.md, "W4: a push path").

Usage: a cluster whose nodes run with ``RAFTQ_STAGE_TRACE=<nodes dir>``, and
the harness's W4 (``loadgen.py run --workloads W4`` with our adapter) with
``RAFTQ_STAGE_TRACE=<run dir>`` in its environment (the producer and the
spawned consumer inherit it)::

    python -m raft_queue.bench.w4_trace <run dir> [<nodes dir>]

The node marks inside the run's time window are taken (one nodes dir can
serve several runs). Prints, p50/p90/p99 in ms: the producer's send round
(``p.send`` -> ``p.sent``), the consumer's Receive (``k.recv`` ->
``k.got``), its way in (``k.recv`` -> the leader's ``r.in``), the time the
leader holds it (``r.in`` -> ``r.out``: messages ready), its way out
(``r.out`` -> ``k.got``: includes waiting for carried acks that are
confirmed), the leader's journal sync; then how the Receives found their
messages (the sequence of ``r.*`` marks, most common first).
"""

from __future__ import annotations

import bisect
import glob
import os
import sys
from collections import Counter

Events = list[tuple[int, str]]


def _load(directory: str, window: tuple[int, int] | None = None) -> dict[str, Events]:
    out: dict[str, Events] = {}
    for path in glob.glob(os.path.join(directory, "*.trace")):
        pid = os.path.basename(path).split(".")[0]
        with open(path) as f:
            # "p.send/3": a mark with a count (bench/w4_messages.py)
            rows = [(int(t), name.split("/")[0]) for t, name, _ in (ln.split() for ln in f)]
        if window is not None:
            rows = [r for r in rows if window[0] <= r[0] <= window[1]]
        out[pid] = sorted(rows)
    return out


def _times(evs: Events, *names: str) -> list[int]:
    return [t for t, n in evs if n in names]


def _with(events: dict[str, Events], name: str) -> Events:
    for evs in events.values():
        if any(n == name for _, n in evs):
            return evs
    return []


def _pct(xs: list[int], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] / 1e6 if xs else float("nan")


def _row(name: str, xs: list[int]) -> str:
    return (
        f"{name:44s} n={len(xs):5d} p50={_pct(xs, 0.5):7.2f} "
        f"p90={_pct(xs, 0.9):7.2f} p99={_pct(xs, 0.99):7.2f}"
    )


def _next_after(starts: list[int], ends: list[int]) -> list[int]:
    """For each start, the time to the first end at or after it."""
    out = []
    for s in starts:
        i = bisect.bisect_left(ends, s)
        if i < len(ends):
            out.append(ends[i] - s)
    return out


def _paths(leader: Events) -> Counter[str]:
    paths: Counter[str] = Counter()
    seq: list[str] = []
    for _, n in leader:
        if not n.startswith("r."):
            continue
        if n in ("r.in", "r.in_ack"):
            seq = [n]
        elif n in ("r.out", "r.out_empty"):
            paths[" ".join([*seq, n])] += 1
            seq = []
        else:
            seq.append(n)
    return paths


def report(run_dir: str, nodes_dir: str | None = None) -> list[str]:
    events = _load(run_dir)
    if nodes_dir:
        stamps = [t for evs in events.values() for t, _ in evs]
        events |= _load(nodes_dir, (min(stamps), max(stamps)) if stamps else None)
    prod, cons = _with(events, "p.send"), _with(events, "k.recv")
    leader = _with(events, "r.in_ack") or _with(events, "r.in")
    sends, sent = _times(prod, "p.send"), _times(prod, "p.sent")
    recvs, gots = _times(cons, "k.recv"), _times(cons, "k.got", "k.none")
    r_in, r_out = _times(leader, "r.in", "r.in_ack"), _times(leader, "r.out", "r.out_empty")
    syncs = list(zip(_times(leader, "x.sync_begin"), _times(leader, "x.sync_done"), strict=False))
    lines = [
        _row("producer send round (p.send -> p.sent)", _next_after(sends, sent)),
        _row("consumer Receive (k.recv -> k.got)", _next_after(recvs, gots)),
        _row("way in (k.recv -> leader r.in)", _next_after(recvs, r_in)),
        _row("held (r.in -> r.out: messages ready)", _next_after(r_in, r_out)),
        _row("way out (r.out -> k.got)", _next_after(r_out, gots)),
        _row("leader journal sync", [b - a for a, b in syncs]),
    ]
    lines += [f"{count:6d} {path}" for path, count in _paths(leader).most_common(8)]
    return lines


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__)
        return 2
    print("\n".join(report(argv[0], argv[1] if len(argv) > 1 else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
