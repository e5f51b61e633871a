"""Chaos campaigns on real node processes, every link through the fault proxy.

``make test`` runs one seeded campaign over every kind of fault (the schedule visits
each nemesis before repeating one) and a targeted kill-during-snapshot run. Each prints
its seed; RAFTQ_CHAOS_SEED replays another schedule. RAFTQ_CHAOS_EACH=1 also runs one
short campaign per nemesis (about 40 s each), for when a class needs attention.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from chaos import campaign
from chaos.nemesis import FACTORIES

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.integration]

FIXED_SEED = 20261122


def _run(tmp_path: Path, **overrides: Any) -> campaign.Result:
    config = campaign.CampaignConfig(out=tmp_path, **overrides)
    result = campaign.run(config)
    print(result.render())
    return result


def test_seeded_campaign_over_every_kind_of_fault_is_valid(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_CHAOS_SEED") or FIXED_SEED)
    result = _run(
        tmp_path,
        duration_s=70,
        seed=seed,
        fault_s=(3.0, 5.0),
        calm_s=(1.5, 3.0),
        compaction_entries=100,
    )
    assert result.ok, result.render()
    assert len({f.name for f in result.faults}) >= 8, "the schedule should cover most nemeses"
    assert result.report.stats["acked"] > 500 and result.final["read_records"] > 500


def test_a_node_killed_while_installing_a_snapshot_catches_up(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        duration_s=4,
        seed=int(os.environ.get("RAFTQ_CHAOS_SEED") or FIXED_SEED),
        nemeses=["kill-during-snapshot"],
        calm_s=(1.0, 1.5),
        warmup_s=1.0,
        quiet_s=3.0,
        compaction_entries=100,
    )
    assert result.ok, result.render()
    assert [f.hit for f in result.faults] == [True], "the kill should land mid-install"


@pytest.mark.skipif(not os.environ.get("RAFTQ_CHAOS_EACH"), reason="set RAFTQ_CHAOS_EACH=1")
@pytest.mark.parametrize("nemesis", sorted(FACTORIES))
def test_each_nemesis_alone_leaves_a_valid_history(tmp_path: Path, nemesis: str) -> None:
    result = _run(
        tmp_path,
        duration_s=12,
        seed=int(os.environ.get("RAFTQ_CHAOS_SEED") or FIXED_SEED),
        nemeses=[nemesis],
        fault_s=(4.0, 6.0),
        calm_s=(1.0, 2.0),
        warmup_s=2.0,
        quiet_s=3.0,
        compaction_entries=100,
    )
    assert result.ok, result.render()
    assert result.faults and not any(f.error for f in result.faults)
