"""bench/tail_report.py: the slowest sends against the rest, on synthetic traces;
observability/stagetrace.py's GC and slow-callback marks, in a traced process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from raft_queue.bench.tail_report import intervals, rayleigh_p, report, windows

MS = 1_000_000


def _send(t: int, took_ms: float) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """A client's and a leader's marks of one send starting at ``t`` ns."""
    end = t + int(took_ms * MS)
    client = [(t, "c.send"), (end, "c.recv")]
    leader = [
        (t + MS // 10, "s.intercept"),
        (t + MS // 5, "s.handler"),
        (end - MS // 10, "s.reply"),
    ]
    return client, leader


def _write(path: Path, rows: list[tuple[int, str]]) -> None:
    path.write_text("".join(f"{t} {name} 7\n" for t, name in sorted(rows)))


def _traces(tmp_path: Path, n: int, slow_every: int, gc_on_slow: bool) -> Path:
    client: list[tuple[int, str]] = []
    leader: list[tuple[int, str]] = []
    for i in range(n):
        t = 10 * MS * (i + 1)
        slow = i % slow_every == 0
        c, s = _send(t, 8.0 if slow else 2.0)
        client += c
        leader += s
        if slow and gc_on_slow:
            leader += [(t + 2 * MS, "gc.start0"), (t + 6 * MS, "gc.stop0")]
        if i % 10 == 5:  # a timer's work that meets fast sends only
            leader += [(t + MS, "slow.start"), (t + MS + MS // 2, "slow.Timer.run")]
    _write(tmp_path / "100.trace", client)
    _write(tmp_path / "200.trace", leader)
    return tmp_path


def test_the_tail_is_lined_up_with_the_pause_that_made_it(tmp_path: Path) -> None:
    lines = report(str(_traces(tmp_path, 400, 50, True)), skip=0, tail=0.02)
    assert lines[0].startswith("400 sends, tail 8 (from 8.000 ms)")
    row = next(line for line in lines if line.strip().startswith("gc0@200"))
    assert row.split()[1:] == ["100.0", "%", "/", "0.0", "%"], row
    timer = next(line for line in lines if line.strip().startswith("Timer.run@200"))
    assert timer.split()[1] == "0.0", timer  # only with fast sends: not a cause
    assert "L:s.intercept -> L:s.handler" in "\n".join(lines)


def test_no_pause_no_overlap(tmp_path: Path) -> None:
    lines = report(str(_traces(tmp_path, 400, 50, False)), skip=0, tail=0.02)
    assert not any(line.strip().startswith("gc0@") for line in lines)


def test_sends_of_another_cluster_are_left_out(tmp_path: Path) -> None:
    rows = [(0, "100", "c.send", "1"), (2 * MS, "100", "c.recv", "1")]
    rows += [(3 * MS, "100", "c.send", "1"), (5 * MS, "100", "c.recv", "1")]
    rows += [(MS, "200", "s.handler", "2")]  # only the first ran here
    assert windows(sorted(rows), 0) == [(0, 2 * MS)]
    spans = intervals(
        [(0, "200", "slow.start", "9"), (3, "200", "slow.driver.c0.p0.t1.b0.i1", "9")]
    )
    assert spans == [(0, 3, "200", "driver(tick+sync)")]


def test_rayleigh_sees_a_period() -> None:
    in_phase = [k * 0.5 + 0.01 for k in range(30)]
    assert rayleigh_p(in_phase, 0.5) < 1e-6
    spread = [k * 0.5 * 1.618 % 15 for k in range(30)]
    assert rayleigh_p(spread, 0.5) > 0.01


_PROBE = """
import asyncio, gc, time
from raft_queue.observability import stagetrace
stagetrace.watch_loop()
gc.collect()
async def hog():
    time.sleep(0.002)
async def main():
    await hog()
asyncio.run(main())
"""


def test_a_traced_process_marks_collections_and_slow_callbacks(tmp_path: Path) -> None:
    env = {**os.environ, "RAFTQ_STAGE_TRACE": str(tmp_path)}
    subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True, timeout=60)
    (trace,) = tmp_path.glob("*.trace")
    names = [line.split()[1] for line in trace.read_text().splitlines()]
    assert "gc.start2" in names and "gc.stop2" in names
    assert "slow.hog" in names or "slow.main" in names, names
