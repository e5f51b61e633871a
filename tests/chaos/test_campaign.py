"""Chaos campaigns on real node processes, every link through the fault proxy.

``make test`` runs one seeded campaign over every kind of fault (the schedule visits
each nemesis before repeating one) and a targeted kill-during-snapshot run. Each prints
its seed; RAFTQ_CHAOS_SEED replays another schedule; RAFTQ_CHAOS_OUT=DIR keeps the
output. RAFTQ_CHAOS_EACH=1 also runs one short campaign per nemesis (about 40 s each),
for when a class needs attention.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from chaos import campaign
from chaos.nemesis import FACTORIES
from chaos.workload import lease_and_read_checks

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.integration]

FIXED_SEED = 20261122


def _run(tmp_path: Path, **overrides: Any) -> campaign.Result:
    # A failed run keeps its output (campaign.log, history.jsonl, report, node logs
    # and data) under RAFTQ_CHAOS_OUT, default .raftq/chaos-failed in the working
    # directory, where pytest's rotation of its temp directories cannot delete it;
    # a valid run's output is removed. The paths are printed either way.
    out = Path(os.environ.get("RAFTQ_CHAOS_OUT") or ".raftq/chaos-failed")
    config = campaign.CampaignConfig(out=out, **overrides)
    before = set(out.glob("seed-*")) if out.exists() else set()
    try:
        result = campaign.run(config)
    except BaseException:
        _print_kept(set(out.glob("seed-*")) - before)
        raise
    print(result.render())
    kept = set(out.glob("seed-*")) - before
    if result.ok and not os.environ.get("RAFTQ_CHAOS_OUT"):
        for run_dir in kept:
            shutil.rmtree(run_dir, ignore_errors=True)
    else:
        _print_kept(kept)
    return result


def _print_kept(run_dirs: set[Path]) -> None:
    for run_dir in run_dirs:
        print(f"campaign output kept in {run_dir.resolve()}")
        for log in sorted(run_dir.glob("cluster/n*/node.log")):
            lines = log.read_text(errors="replace").splitlines()
            print(f"--- {log} (last 30 of {len(lines)} lines) ---")
            print("\n".join(lines[-30:]))


def test_seeded_campaign_over_every_kind_of_fault_is_valid(tmp_path: Path) -> None:
    seed = int(os.environ.get("RAFTQ_CHAOS_SEED") or FIXED_SEED)
    result = _run(
        tmp_path,
        duration_s=90,  # about 2 minutes with warm-up and the final phase (issue 4: 2-3 min)
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


# ---- fast: the pieces, without a cluster --------------------------------------------------


def _spec(i: int, grpc: int, meta: int, lo: int, block: int = 4) -> Any:
    from raft_queue.testing.cluster import NodeSpec

    return NodeSpec(f"n{i + 1}", Path(f"/x/n{i + 1}"), grpc, meta, lo, lo + block - 1)


def test_one_raft_proxy_per_replica_pair_on_the_dialing_side_only() -> None:
    from chaos.cluster import plan_links

    specs = [
        _spec(0, 21001, 21051, 21100),
        _spec(1, 21002, 21052, 21200),
        _spec(2, 21003, 21053, 21300),
    ]
    raft = [link for link in plan_links(specs) if link.kind == "raft"]
    # pysyncobj: the greater address dials, so only higher nodes dial lower ones here.
    assert all(link.src > link.dst for link in raft)
    assert len(raft) == 3 * (4 + 1)  # 3 pairs x (4 block ports + the metadata port)
    grpc = [link for link in plan_links(specs) if link.kind == "grpc"]
    assert sorted((x.src, x.dst) for x in grpc) == [
        (a, b) for a in range(3) for b in range(3) if a != b
    ]


def _op(
    index: int, process: int, type_: str, f: str, t_ms: int, value: Any = None, **kw: Any
) -> dict:
    return {"index": index, "time_ns": t_ms * 1_000_000, "process": process, "type": type_,
            "f": f, "value": value, **kw}  # fmt: skip


def test_lease_check_flags_a_second_lease_inside_the_first_ones_window() -> None:
    rec = [{"partition": 0, "offset": 5, "payload": "a", "receipt": "r"}]
    ops = [
        _op(0, 1, "invoke", "receive", 0), _op(1, 1, "ok", "receive", 10, rec),
        _op(2, 2, "invoke", "receive", 1000), _op(3, 2, "ok", "receive", 1010, rec),
        _op(4, 3, "invoke", "receive", 5000), _op(5, 3, "ok", "receive", 5010, rec),
    ]  # fmt: skip
    found = lease_and_read_checks(ops, {"receive": 4000})["double_lease"]
    assert [(d["first_op"], d["second_op"]) for d in found] == [(1, 3)]  # 5010 ms is after 0+4000


def _sent(index: int, t_ms: int, payload: str, partition: int, offset: int) -> list[dict]:
    done = _op(index + 1, 1, "ok", "send", t_ms + 5, payload, partition=partition, offset=offset)
    return [_op(index, 1, "invoke", "send", t_ms, payload), done]


def _read(index: int, t_ms: int, offset: int, records: list[Any], high: int) -> list[dict]:
    start = {"partition": 0, "offset": offset}
    done = _op(index + 1, 2, "ok", "read", t_ms + 2, {**start, "records": records, "high": high})
    return [_op(index, 2, "invoke", "read", t_ms, start), done]


def test_read_check_flags_a_read_that_misses_an_earlier_acknowledged_send() -> None:
    ops = [*_sent(0, 0, "p1", 0, 7), *_read(2, 6, 0, [], 7), *_read(4, 10, 7, [[7, "p1"]], 8)]
    stale = lease_and_read_checks(ops, {"receive": 4000})["stale_read"]
    assert [s["op"] for s in stale] == [3]


def test_recovery_time_is_from_heal_to_every_partition_acking_a_new_send() -> None:
    from chaos.nemesis import Fault

    faults = [Fault("split", "", 1.0, heal_s=2.0)]
    ops = [*_sent(0, 1900, "old", 0, 0), *_sent(2, 2100, "a", 0, 1), *_sent(4, 2495, "b", 1, 0)]
    assert campaign.recovery_times(ops, faults, 2, end_s=9.0) == [pytest.approx(0.5)]
    assert campaign.recovery_times(ops, faults, 3, end_s=9.0) == [None]
