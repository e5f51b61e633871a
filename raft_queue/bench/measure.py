"""What the benchmarks measure with: the message header, percentiles, CPU accounting.

Kept apart from the workloads so their definitions read without plumbing.
CPU figures are % of ONE core, read from /proc like the peer harness
(``loadgen.py``'s CpuMeter), so our rows and the peers' compare directly.
Linux only (/proc).
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import time
from typing import Any

HDR = struct.Struct("<Qqq")  # seq, sent_ns, intended_ns: the peer harness's 24-byte header
_TCK = os.sysconf("SC_CLK_TCK")


def make_msg(seq: int, size: int, sent_ns: int = 0, intended_ns: int = 0) -> bytes:
    """A ``size``-byte payload that starts with HDR (times from time.monotonic_ns)."""
    head = HDR.pack(seq, sent_ns, intended_ns)
    return head + b"x" * max(0, size - len(head))


def percentiles_ms(samples_ns: list[int]) -> dict[str, float]:
    """p50/p99/p99.9/max in ms, nearest rank as the peer harness; {} without samples."""
    v = sorted(samples_ns)
    if not v:
        return {}

    def at(p: float) -> float:
        return round(v[min(len(v) - 1, round(p / 100 * (len(v) - 1)))] / 1e6, 3)

    return {"p50": at(50), "p99": at(99), "p99.9": at(99.9), "max": at(100), "n": len(v)}


def quantile(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples``, by rank ``int(q * n)`` (the
    A/B tools' blocks of sends); NaN without samples."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def round_medians(per_mode: dict[str, list[list[float]]]) -> dict[str, dict[str, Any]]:
    """Each mode's samples (ms) of several rounds -> the medians of the
    rounds' p50 and p99 and the range of their p50 (the floor benchmarks'
    summary: single rounds on a shared machine are noise)."""
    out: dict[str, dict[str, Any]] = {}
    for mode, rounds in per_mode.items():
        p50s = [quantile(r, 0.5) for r in rounds]
        p99s = [quantile(r, 0.99) for r in rounds]
        out[mode] = {
            "p50_ms": round(statistics.median(p50s), 3),
            "p99_ms": round(statistics.median(p99s), 3),
            "p50_range": [round(min(p50s), 3), round(max(p50s), 3)],
        }
    return out


def print_round_medians(result: dict[str, dict[str, Any]]) -> None:
    """One line a mode, then the whole result as one JSON line."""
    for mode, fig in result.items():
        print(
            f"{mode:10} p50 {fig['p50_ms']:.3f} ms  p99 {fig['p99_ms']:.3f} ms  "
            f"(p50 over rounds {fig['p50_range'][0]:.3f}..{fig['p50_range'][1]:.3f})"
        )
    print(json.dumps(result))


def proc_cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid`` in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:9]]
    total = sum(vals) / _TCK
    return total - (vals[3] + vals[4]) / _TCK, total


class CpuWindow:
    """CPU over a ``with`` block in % of one core: ``server_pct`` (the node pids; None
    without pids), ``client_pct`` (this process, all threads), ``machine_pct``, and
    ``other_pct`` = machine minus both (other tenants, kernel, a child consumer)."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.result: dict[str, Any] = {}

    def __enter__(self) -> CpuWindow:
        self._t0 = time.monotonic()
        self._srv0 = sum(proc_cpu_s(p) for p in self.pids)
        self._cli0 = sum(os.times()[:2])
        self._m0 = machine_busy_s()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy, total = (b - a for a, b in zip(self._m0, machine_busy_s(), strict=True))
        machine = 100 * (os.cpu_count() or 1) * busy / total if total > 0 else 0.0
        srv = 100 * (sum(proc_cpu_s(p) for p in self.pids) - self._srv0) / wall
        cli = 100 * (sum(os.times()[:2]) - self._cli0) / wall
        self.result = {
            "server_pct": round(srv, 1) if self.pids else None,
            "client_pct": round(cli, 1),
            "machine_pct": round(machine, 1),
            "other_pct": round(machine - cli - srv, 1),
        }


def cpu_pct_over(pids: list[int], secs: float) -> list[float]:
    """Each pid's CPU over the next ``secs`` seconds (sleeping meanwhile), % of one core."""
    before = [proc_cpu_s(pid) for pid in pids]
    t0 = time.monotonic()
    time.sleep(secs)
    wall = time.monotonic() - t0
    return [round(100 * (proc_cpu_s(p) - b) / wall, 2) for p, b in zip(pids, before, strict=True)]


def machine_pct_over(secs: float) -> float:
    """Whole-machine busy CPU over the next ``secs`` seconds, % of one core."""
    busy0, total0 = machine_busy_s()
    time.sleep(secs)
    busy1, total1 = machine_busy_s()
    total = total1 - total0
    return round(100 * (os.cpu_count() or 1) * (busy1 - busy0) / total, 1) if total > 0 else 0.0


def wait_quiet(max_wait_s: float, below_pct: float) -> float:
    """Wait up to ``max_wait_s`` for the machine to be below ``below_pct`` busy (over 1 s
    samples; other tenants skew results, as in the peer harness); the last value seen."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy = machine_pct_over(1.0)
        if busy <= below_pct or time.monotonic() >= deadline:
            return busy


def loadavg() -> str:
    """The first three fields of /proc/loadavg (1, 5, 15 min), for the record."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
