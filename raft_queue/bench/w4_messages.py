"""W4's latency per message, split into stages, from RAFTQ_STAGE_TRACE files.

``bench/w4_trace.py`` lines up the consumer's Receives; this lines up every
message (docs/benchmarks.md, "W4: where a message's milliseconds go"). The
adapter marks ``p.send/<k>`` (a ``publish_batch`` of k messages, before its
Send), ``p.sent``, ``k.recv``, ``k.got/<n>`` (a Receive brought n) and
``k.ret`` (consume returns: the harness reads its clock right after). The
queue has one partition and the messages are sent and received in order, so
the j-th message sent is the j-th received (the run must have no
redeliveries: W4 has none). Per message::

    send       p.send        -> leader s.handler   (client, gRPC, the stream)
    commit     s.handler     -> s.resumed          (Append proposed, synced on a
                                                    quorum, applied, Send resumed)
    answer     s.resumed     -> r.out              (the Receive that delivers it
                                                    has its messages ready;
                                                    negative: same apply, woken first)
    out        r.out         -> k.got              (the answer's way out)
    return     k.got         -> k.ret              (background ack, bodies)

and the class of each: how many Raft entries applied on the leader after the
Append's before its Receive's messages were ready (0: its lease rode the
Append's entry), and how the Receive found them (``r.linger_got``: the
lingering lease its previous Receive left; ``r.stand_got``: it stood and
rode a later entry; ``r.lease_got``: a Lease of its own).

    python -m raft_queue.bench.w4_messages <run dir> <nodes dir> [--skip N]

``--skip``: messages not counted at the start (the harness's warm-up: 1,000).
"""

from __future__ import annotations

import argparse
import bisect
import glob
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass

Mark = tuple[int, str, int]  # (ns, name, count; 0 if the mark has none)
STAGES = ("send", "commit", "answer", "out", "return", "total")


def load(directory: str) -> dict[str, list[Mark]]:
    """pid -> its marks in time order; ``name/count`` marks split."""
    out: dict[str, list[Mark]] = {}
    for path in glob.glob(os.path.join(directory, "*.trace")):
        rows = []
        with open(path) as f:
            for line in f:
                t, name, _ = line.split()
                base, _, count = name.partition("/")
                rows.append((int(t), base, int(count) if count else 0))
        out[os.path.basename(path).split(".")[0]] = sorted(rows)
    return out


def _owner(procs: dict[str, list[Mark]], name: str) -> list[Mark]:
    best = max(procs.values(), key=lambda ms: sum(1 for m in ms if m[1] == name), default=[])
    return best if any(m[1] == name for m in best) else []


def _times(marks: list[Mark], *names: str) -> list[int]:
    return [t for t, n, _ in marks if n in names]


def _after(times: list[int], t: int) -> int | None:
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def _before(times: list[int], t: int) -> int | None:
    i = bisect.bisect_right(times, t)
    return times[i - 1] if i else None


@dataclass
class Message:
    stages: dict[str, float]  # ms
    rounds: int  # Raft entries applied after the Append's before its answer was ready
    path: str  # how its Receive found it
    batch: int  # messages in its publish_batch


def _receive_paths(leader: list[Mark]) -> dict[int, str]:
    """r.out time -> the Receive's way to its messages."""
    paths: dict[int, str] = {}
    found = "none"
    for t, n, _ in leader:
        if n in ("r.in", "r.in_ack"):
            found = "none"
        elif n in ("r.linger_got", "r.stand_got", "r.lease_got"):
            found = n[2:]
        elif n == "r.out":
            paths[t] = found
    return paths


def messages(run_dir: str, nodes_dir: str) -> list[Message]:
    run = load(run_dir)
    prod, cons = _owner(run, "p.send"), _owner(run, "k.recv")
    leader = _owner(load(nodes_dir), "r.out")
    handler, resumed = _times(leader, "s.handler"), _times(leader, "s.resumed")
    applied, outs = _times(leader, "s.applied"), _times(leader, "r.out")
    paths, rets = _receive_paths(leader), _times(cons, "k.ret")
    sent: list[tuple[int, int, int, int]] = []  # per message: p.send, s.handler, s.resumed, k
    for t, n, k in prod:
        if n != "p.send":
            continue
        h = _after(handler, t)
        c = _after(resumed, h) if h is not None else None
        if h is None or c is None:
            break
        sent += [(t, h, c, k)] * k
    got = [(t, k) for t, n, k in cons if n == "k.got" for _ in range(k)]
    out = []
    for (t0, h, c, k), (g, _) in zip(sent, got, strict=False):
        o, r = _before(outs, g), _after(rets, g)
        a = _before(applied, c)  # the Append's own apply
        if o is None or r is None or a is None:
            continue
        stages = {"send": h - t0, "commit": c - h, "answer": o - c, "out": g - o}
        stages |= {"return": r - g, "total": r - t0}
        rounds = bisect.bisect_right(applied, o) - bisect.bisect_right(applied, a)
        out.append(Message({s: v / 1e6 for s, v in stages.items()}, rounds, paths[o], k))
    return out


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def report(msgs: list[Message]) -> list[str]:
    lines = [f"{len(msgs)} messages; per stage p50 / p90 / p99 ms"]
    for s in STAGES:
        xs = [m.stages[s] for m in msgs]
        lines.append(f"  {s:8s} {_q(xs, 0.5):7.2f} {_q(xs, 0.9):7.2f} {_q(xs, 0.99):7.2f}")
    groups: dict[str, list[Message]] = defaultdict(list)
    for m in msgs:
        groups[f"rounds after its Append {min(m.rounds, 3)}{'+' if m.rounds >= 3 else ''}"].append(
            m
        )
        groups[f"found by {m.path}"].append(m)
    lines.append("class: share, then p50 of " + " / ".join(STAGES))
    for name, ms in sorted(groups.items()):
        p50s = " / ".join(f"{_q([m.stages[s] for m in ms], 0.5):.2f}" for s in STAGES)
        lines.append(f"  {name:32s} {100 * len(ms) / max(1, len(msgs)):5.1f} %  {p50s}")
    sizes = Counter(min(m.batch, 9) for m in msgs)
    lines.append(
        "messages by publish_batch size: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(sizes.items()))
    )
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("nodes_dir")
    ap.add_argument("--skip", type=int, default=1000)
    a = ap.parse_args(argv)
    print("\n".join(report(messages(a.run_dir, a.nodes_dir)[a.skip :])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
