"""What the slowest W1 sends have in common, from RAFTQ_STAGE_TRACE files.

``stage_report`` gives each stage's median; a p99 is made of other
requests. ``python -m raft_queue.bench.tail_report DIR [--tail 0.02]
[--skip 200]`` takes the same traces (``w1_ab --trace``, one cluster's
directory) and compares the slowest ``--tail`` of the sends with the rest:

- per stage, its p50 over all sends and over the tail, and how often it was
  the stage that ran furthest over its own median (where a slow send lost
  its time);
- the commit gate: how often the leader's own sync ended after the first
  follower's ack (then the commit waited for the leader's disk);
- the work that overlapped a send besides the send itself: the nodes' and
  client's garbage collections (``gc.*`` marks) and long asyncio callbacks
  and driver rounds (``slow.*``: observability/stagetrace.py), per label the
  share of tail sends and of other sends it overlapped; a label far more
  often in the tail than in the rest is a cause, one equally often is not;
- periodicity: the Rayleigh test of the tail sends' start times against
  periods of timers in the node (a tail made by a timer clusters in phase;
  ``p`` near 1 means no sign of that period).

Only sends whose Send handler ran in DIR's processes count (``w1_ab``
copies one client trace into both clusters' directories).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import math
import sys
from collections.abc import Iterator

from raft_queue.bench.stage_report import PAIRS, marks, requests
from raft_queue.bench.stage_report import events as stage_events

PERIODS_S = (0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0)  # tick, heartbeats, checks, loops
Interval = tuple[int, int, str, str]  # start ns, end ns, pid, label


def _label(name: str) -> str:
    if name.startswith("slow.driver"):
        # driver.c<calls>.p<posted>.t<ticked>.b<beat>.i<inline syncs>: keep the
        # shape (ticked one group, ran a sync inline) without the counts.
        parts = dict((p[0], p[1:]) for p in name.split(".")[2:] if p)
        shape = "tick" if parts.get("t") not in (None, "0") else "no-tick"
        shape += "+sync" if parts.get("i") not in (None, "0") else ""
        shape += "+calls" if parts.get("c") not in (None, "0") else ""
        return f"driver({shape})"
    return name[5:] if name.startswith("slow.") else name


def intervals(rows: list[tuple[int, str, str, str]]) -> list[Interval]:
    """GC pauses and long callbacks/rounds as (start, end, pid, label)."""
    opened: dict[tuple[str, str], int] = {}
    out: list[Interval] = []
    for t, pid, name, tid in rows:
        if name in ("slow.start",) or name.startswith("gc.start"):
            opened[(pid, "gc" if name.startswith("gc.") else tid)] = t
        elif name.startswith("gc.stop") and (pid, "gc") in opened:
            out.append((opened.pop((pid, "gc")), t, pid, "gc" + name[-1]))
        elif name.startswith("slow.") and (pid, tid) in opened:
            out.append((opened.pop((pid, tid)), t, pid, _label(name)))
    return out


def windows(rows: list[tuple[int, str, str, str]], skip: int) -> list[tuple[int, int]]:
    """(c.send, c.recv) of each send whose handler ran in these processes."""
    client = {pid for _, pid, name, _ in rows if name == "c.send"}
    handlers = [t for t, pid, name, _ in rows if name == "s.handler" and pid not in client]
    out, start = [], None
    for t, pid, name, _ in rows:
        if pid not in client:
            continue
        if name == "c.send":
            start = t
        elif name == "c.recv" and start is not None:
            i = bisect.bisect_left(handlers, start)
            if i < len(handlers) and handlers[i] < t:
                out.append((start, t))
            start = None
    return out[skip:]


def rayleigh_p(starts_s: list[float], period_s: float) -> float:
    """p-value of the Rayleigh test: the starts uniform in phase (~exp(-Z))."""
    if not starts_s:
        return 1.0
    c = sum(math.cos(2 * math.pi * t / period_s) for t in starts_s)
    s = sum(math.sin(2 * math.pi * t / period_s) for t in starts_s)
    z = (c * c + s * s) / len(starts_s)
    return math.exp(-z)


def _stage_lines(directory: str, skip: int, tail: float) -> Iterator[str]:
    reqs = list(requests(stage_events(directory)))[skip:]
    reqs.sort(key=lambda r: r["C:c.recv"])
    slow = reqs[int(len(reqs) * (1 - tail)) :]
    if not slow:
        return
    yield f"{len(reqs)} sends, tail {len(slow)} (from {slow[0]['C:c.recv']:.3f} ms)"
    medians, worst = {}, collections.Counter[str]()
    yield f"{'stage':36s} {'p50 all':>8s} {'p50 tail':>9s} {'max tail':>9s}"
    for a, b in PAIRS:
        every = sorted(r[b] - r[a] for r in reqs if a in r and b in r)
        few = sorted(r[b] - r[a] for r in slow if a in r and b in r)
        if every and few:
            medians[(a, b)] = every[len(every) // 2]
            mid, top = few[len(few) // 2], few[-1]
            yield f"{a + ' -> ' + b:36s} {medians[(a, b)]:8.3f} {mid:9.3f} {top:9.3f}"
    for r in slow:
        over = {k: (r[k[1]] - r[k[0]]) - m for k, m in medians.items() if k[0] in r and k[1] in r}
        if over:
            k = max(over, key=lambda key: over[key])
            worst[f"{k[0]} -> {k[1]}"] += 1
    yield "stage furthest over its median, per tail send: " + ", ".join(
        f"{k} {v}" for k, v in worst.most_common(6)
    )
    for label, group in (("all", reqs), ("tail", slow)):
        both = [r for r in group if "L:x.sync_done" in r and "L:s.ack_rx" in r]
        own = sum(1 for r in both if r["L:x.sync_done"] > r["L:s.ack_rx"])
        yield f"commit gate ({label}): leader's sync after the first ack in {own}/{len(both)}"


def _overlap_lines(rows: list[tuple[int, str, str, str]], skip: int, tail: float) -> Iterator[str]:
    wins = windows(rows, skip)
    if not wins:
        return
    by_len = sorted(wins, key=lambda w: w[1] - w[0])
    cut = int(len(by_len) * (1 - tail))
    slow, rest = by_len[cut:], by_len[:cut]
    spans = [iv for iv in intervals(rows) if wins[0][0] <= iv[0] <= wins[-1][1]]
    spans.sort()
    starts = [iv[0] for iv in spans]
    longest = max((iv[1] - iv[0] for iv in spans), default=0)

    def labels(w: tuple[int, int]) -> set[str]:
        lo = bisect.bisect_left(starts, w[0] - longest)
        hi = bisect.bisect_left(starts, w[1])
        return {f"{iv[3]}@{iv[2]}" for iv in spans[lo:hi] if iv[1] > w[0]}

    share: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for i, group in enumerate((slow, rest)):
        for w in group:
            for lab in labels(w):
                share[lab][i] += 1 / len(group)
    yield "work overlapping a send (share of tail sends / of the others), by label@pid:"
    ranked = sorted(share.items(), key=lambda kv: -(kv[1][0] - kv[1][1]))
    for lab, (t_share, r_share) in ranked[:12]:
        yield f"  {lab:48s} {100 * t_share:5.1f} % / {100 * r_share:5.1f} %"
    t0 = wins[0][0]
    tail_starts = [(w[0] - t0) / 1e9 for w in slow]
    yield "periodicity of the tail's start times (Rayleigh p; small = in phase): " + ", ".join(
        f"{p:g} s {rayleigh_p(tail_starts, p):.3f}" for p in PERIODS_S
    )


def report(directory: str, skip: int = 200, tail: float = 0.02) -> list[str]:
    rows = marks(directory)
    return [*_stage_lines(directory, skip, tail), *_overlap_lines(rows, skip, tail)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raft_queue.bench.tail_report")
    parser.add_argument("directory")
    parser.add_argument("--tail", type=float, default=0.02, help="the slowest share of sends")
    parser.add_argument("--skip", type=int, default=200, help="warm-up sends to leave out")
    args = parser.parse_args(argv)
    print("\n".join(report(args.directory, args.skip, args.tail)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
