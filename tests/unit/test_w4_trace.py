"""bench/w4_trace.py lines up a W4 run's marks: synthetic trace files."""

from __future__ import annotations

from pathlib import Path

from raft_queue.bench.w4_trace import report

MS = 1_000_000


def _write(path: Path, rows: list[tuple[int, str]]) -> None:
    path.write_text("".join(f"{t} {name} 1\n" for t, name in rows))


def test_the_stages_of_one_receive_and_its_path(tmp_path: Path) -> None:
    run, nodes = tmp_path / "run", tmp_path / "nodes"
    run.mkdir()
    nodes.mkdir()
    _write(run / "10.trace", [(0, "p.send"), (5 * MS, "p.sent")])
    _write(run / "11.trace", [(1 * MS, "k.recv"), (9 * MS, "k.got")])
    leader = [(2 * MS, "r.in_ack"), (3 * MS, "r.linger_got"), (6 * MS, "r.out")]
    later = [(99 * MS, "r.in"), (100 * MS, "r.stand"), (101 * MS, "r.out")]  # after the run
    _write(nodes / "20.trace", [*leader, *later])
    lines = report(str(run), str(nodes))
    rows = {line.split(" n=")[0].strip(): line for line in lines if " n=" in line}
    assert "p50=   5.00" in rows["producer send round (p.send -> p.sent)"]
    assert "p50=   1.00" in rows["way in (k.recv -> leader r.in)"]
    assert "p50=   4.00" in rows["held (r.in -> r.out: messages ready)"]
    assert "p50=   3.00" in rows["way out (r.out -> k.got)"]
    paths = [line.split() for line in lines if " n=" not in line]
    assert paths == [["1", "r.in_ack", "r.linger_got", "r.out"]]
