"""Per-stage latency of one-at-a-time sends, from RAFTQ_STAGE_TRACE files.

Usage: run a cluster and a client with ``RAFTQ_STAGE_TRACE=<dir>`` in their
environment; the client marks ``c.send`` before each send and ``c.recv``
after it (``observability.stagetrace.mark``), one send in flight at a time
(W1). Then ``python -m raft_queue.bench.stage_report <dir>`` prints, for the
stages between each pair, the median and p90 over requests. The leader is
the process that marked ``s.handler`` in the request's window; followers are
numbered by when the entry reached them (F0 first).
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Iterator

# (from, to): the critical path of a synced quorum commit, in order.
PAIRS = [
    ("C:c.send", "L:s.intercept"),
    ("L:s.intercept", "L:s.handler"),
    ("L:s.handler", "L:s.submit"),
    ("L:s.submit", "L:s.driver"),
    ("L:s.driver", "L:s.ae_tx"),
    ("L:s.ae_tx", "L:x.sync_begin"),
    ("L:x.sync_begin", "L:io.start"),
    ("L:io.start", "L:io.end"),
    ("L:io.end", "L:x.sync_done"),
    ("L:s.ae_tx", "F0:f.ae_rx"),
    ("F0:f.ae_rx", "F0:x.sync_begin"),
    ("F0:x.sync_begin", "F0:io.start"),
    ("F0:io.start", "F0:io.end"),
    ("F0:io.end", "F0:x.sync_done"),
    ("F0:x.sync_done", "F0:f.ack_tx"),
    ("F0:f.ack_tx", "L:s.ack_rx"),
    ("L:s.ack_rx", "L:s.commit"),
    ("L:s.commit", "L:s.applied"),
    ("L:s.applied", "L:s.resumed"),
    ("L:s.resumed", "L:s.reply"),
    ("L:s.reply", "C:c.recv"),
]


def marks(directory: str) -> list[tuple[int, str, str, str]]:
    """Every mark of the trace files in ``directory``, in time order: (ns,
    pid, name, thread)."""
    out = []
    for path in glob.glob(os.path.join(directory, "*.trace")):
        pid = os.path.basename(path).split(".")[0]
        with open(path) as f:
            for line in f:
                t, name, thread = line.split()
                out.append((int(t), pid, name, thread))
    out.sort()
    return out


def events(directory: str) -> list[tuple[int, str, str]]:
    return [(t, pid, name) for t, pid, name, _thread in marks(directory)]


def requests(evs: list[tuple[int, str, str]]) -> Iterator[dict[str, float]]:
    """Per request: role-qualified stage name -> ms after its c.send (first mark)."""
    client = {p for _, p, n in evs if n == "c.send"}
    starts = [i for i, e in enumerate(evs) if e[2] == "c.send"]
    for i in starts:
        t0 = evs[i][0]
        seen: dict[tuple[str, str], int] = {}
        j = i + 1
        while j < len(evs) and not (evs[j][2] == "c.recv" and evs[j][1] in client):
            seen.setdefault((evs[j][1], evs[j][2]), evs[j][0])
            j += 1
        if j >= len(evs):
            return
        leaders = [p for p, n in seen if n == "s.handler"]
        if not leaders:
            continue
        followers = sorted(
            {p for p, n in seen if n == "f.ae_rx"}, key=lambda p: seen[(p, "f.ae_rx")]
        )
        out = {"C:c.send": 0.0, "C:c.recv": (evs[j][0] - t0) / 1e6}
        for (p, n), t in seen.items():
            role = "L" if p == leaders[0] else f"F{followers.index(p)}" if p in followers else "?"
            out[f"{role}:{n}"] = (t - t0) / 1e6
        yield out


def main(directory: str) -> None:
    reqs = list(requests(events(directory)))
    print(f"{len(reqs)} requests")
    for a, b in PAIRS:
        v = sorted(r[b] - r[a] for r in reqs if a in r and b in r)
        if v:
            print(f"{a:16s} -> {b:16s} {_quantiles(v)}")
    total = sorted(r["C:c.recv"] for r in reqs)
    if total:
        print(f"{'total':36s} {_quantiles(total)}")


def _quantiles(v: list[float]) -> str:
    return f"p50 {v[len(v) // 2]:7.3f} ms  p90 {v[int(len(v) * 0.9)]:7.3f} ms"


if __name__ == "__main__":
    main(sys.argv[1])
