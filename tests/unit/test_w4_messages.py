"""bench/w4_messages.py splits each W4 message's latency: synthetic trace files."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft_queue.bench.w4_messages import messages, report

MS = 1_000_000


def _write(path: Path, rows: list[tuple[float, str]]) -> None:
    path.write_text("".join(f"{int(t * MS)} {name} 1\n" for t, name in rows))


def test_each_message_gets_its_stages_class_and_path(tmp_path: Path) -> None:
    run, nodes = tmp_path / "run", tmp_path / "nodes"
    run.mkdir()
    nodes.mkdir()
    # two sends: 2 messages leased in their Append's entry, then 1 a round later
    _write(run / "10.trace", [(0, "p.send/2"), (5, "p.sent"), (10, "p.send/1"), (15, "p.sent")])
    consumer = [(1, "k.recv"), (6, "k.got/2"), (6.1, "k.ret")]
    _write(run / "11.trace", [*consumer, (7, "k.recv"), (19, "k.got/1"), (19.2, "k.ret")])
    first = [(1, "s.handler"), (2, "r.in_ack"), (2.5, "r.linger_got"), (3.9, "s.applied")]
    first += [(4, "s.resumed"), (4.5, "r.out")]
    second = [(8, "r.in_ack"), (9, "r.stand"), (11, "s.handler"), (13.9, "s.applied")]
    second += [(14, "s.resumed"), (16, "s.applied"), (16.5, "r.stand_got"), (17, "r.out")]
    _write(nodes / "20.trace", [*first, *second])
    found = messages(str(run), str(nodes))
    assert [(m.rounds, m.path, m.batch) for m in found] == [
        (0, "linger_got", 2),
        (0, "linger_got", 2),
        (1, "stand_got", 1),
    ]
    stages = found[0].stages
    assert stages["send"] == pytest.approx(1.0) and stages["commit"] == pytest.approx(3.0)
    assert stages["answer"] == pytest.approx(0.5) and stages["out"] == pytest.approx(1.5)
    assert stages["return"] == pytest.approx(0.1) and stages["total"] == pytest.approx(6.1)
    assert found[2].stages["answer"] == pytest.approx(3.0)
    assert found[2].stages["total"] == pytest.approx(9.2)
    lines = report(found)
    assert lines[0].startswith("3 messages")
