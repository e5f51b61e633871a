"""State Machine Safety of SafeSyncObj under simulated faults (raftsim.py).

Real replicas (handlers, ticks, pre-vote, journals with fdatasync, term/vote
files, multi-chunk snapshots) on a simulated clock and network: link cuts,
swallowing links, crashes and restarts, pauses, slow links and slow syncs.
Every replica must apply the same command at each index, and an acked
command must be the one applied at its index. With the snapshot-chunk
commit of pysyncobj back in (hazard 7), 3 or 4 of these 20 seeds failed in
each of several runs (a deposed leader acked its own uncommitted entries;
which seeds varies a little: sets of nodes iterate in address order); with
it fixed, none has.
"""

from __future__ import annotations

import pytest

from raft_queue.testing import raftsim

SEEDS = [20, 31, 68, *range(100, 117)]


@pytest.mark.parametrize("seed", SEEDS)
def test_every_replica_applies_the_same_command_at_each_index(seed: int) -> None:
    report = raftsim.run(seed, steps=6000)
    assert not report.violations, "\n".join(report.violations[:10])
    assert report.committed > 50 and report.elections >= 2  # it did run, through failovers


@pytest.mark.parametrize("seed", SEEDS[:8])
def test_followers_syncing_inline_keep_the_same_safety(seed: int) -> None:
    """Half of the followers' syncs run on the driver (syncs.SyncThreads.run_inline):
    their acks go out with the sync's end, never before it."""
    report = raftsim.run(seed, steps=6000, inline_share=0.5)
    assert not report.violations, "\n".join(report.violations[:10])
    assert report.committed > 50 and report.elections >= 2
