"""The fleet campaign (chaos/move_campaign.py) on real processes: two 3-node
clusters and a 3-node manager, one FIFO queue moved back and forth between
them through ManagedClient while a second FIFO queue on c1 is split in place,
the manager's leader and cluster nodes killed along the way (issue 16: "a chaos
campaign with the move and split operations as nemeses is VALID").

About 50 s of faults, about 2 minutes in all. RAFTQ_CHAOS_SEED replays another
schedule; a failed run keeps its history under .raftq/chaos-failed (or
RAFTQ_CHAOS_OUT).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from chaos import move_campaign

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.integration]

FIXED_SEED = 20261126


@pytest.mark.timeout(600)
def test_moves_and_splits_under_load_leave_a_valid_history(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_CHAOS_SEED") or FIXED_SEED)
    out = Path(os.environ.get("RAFTQ_CHAOS_OUT") or ".raftq/chaos-failed") / f"moves-{seed}"
    nemeses = move_campaign.DEFAULT_NEMESES.split(",")
    outcome = move_campaign.run(seed, 50.0, tmp_path / "fleet", nemeses)
    if not outcome.ok or os.environ.get("RAFTQ_CHAOS_OUT"):
        shutil.copytree(tmp_path / "fleet", out, dirs_exist_ok=True, ignore=_node_data)
        print(f"campaign output kept in {out.resolve()} (seed {seed})")
    assert outcome.ok, outcome.report.render()
    done = outcome.counts
    assert done.get("move", 0) + done.get("move-kill-manager", 0) >= 1, done
    assert done.get("grow", 0) >= 1, done
    assert outcome.report.stats["acked"] > 500, outcome.report.stats


def _node_data(_dir: str, names: list[str]) -> list[str]:
    """Keep histories and logs, not the nodes' LMDB and journals."""
    return [
        n
        for n in names
        if n in ("data", "cluster.secret", "keyring.json") or n.startswith("admin.token")
    ]
