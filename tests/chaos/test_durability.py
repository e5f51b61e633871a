"""Durability: acknowledged sends survive kill -9 of every node, and simulated power loss.

kill -9 keeps the page cache, so it proves crash recovery (journal replay, LMDB's
last_applied, snapshot restore) but not that an ack waited for the disk. For that the
nodes run with RAFTQ_POWERLOSS_COPY=1: every journal msync leaves
``<journal>.synced``, the journal exactly as synced, before the acks it allows
(replication/journal.py). "Power loss" is then SIGKILL of every node followed by putting
back only those copies and deleting every LMDB environment (written unsynced, so after
a real power loss it could hold anything; each replica must rebuild from its journal).
Two checks: every acknowledged send is in the synced journal of a quorum of its
partition's replicas, and after restart every one of them is still read back.
See docs/reliability.md for what this simulation does and does not cover.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pysyncobj.journal import FileJournal

from chaos.campaign import CampaignConfig, collect_digests, create_queue, final_phase
from chaos.checker import check
from chaos.history import History
from chaos.workload import Workload, WorkloadConfig, final_reads
from raft_queue.core import commands
from raft_queue.replication import entries
from raft_queue.testing.cluster import LocalCluster

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.integration]

QUEUE = "durable"


def _config(**workload: int) -> CampaignConfig:
    return CampaignConfig(workload=WorkloadConfig(queue=QUEUE, **workload))


def kill_all_at_once(cluster: LocalCluster) -> None:
    """SIGKILL every node before waiting for any (as one power cut)."""
    running = [i for i in range(cluster.nodes) if cluster.alive(i)]
    for i in running:
        os.kill(cluster.pid(i), signal.SIGKILL)
    for i in running:
        cluster.kill(i)


def replica_dirs(cluster: LocalCluster, i: int) -> list[Path]:
    return sorted((cluster.specs[i].dir / "data" / "partitions").glob(f"{QUEUE}.*"))


def journal_payloads(path: Path) -> set[str]:
    """Payload ids of every Append in a pysyncobj journal file (opened on a copy)."""
    copy = path.with_name(path.name + ".read")
    shutil.copyfile(path, copy)
    found: set[str] = set()
    journal = FileJournal(str(copy))
    try:
        for k in range(len(journal)):
            found |= _entry_payloads(journal[k][0])
    finally:
        journal._destroy()
        copy.unlink()
    return found


def _entry_payloads(entry: bytes) -> set[str]:
    if entries.kind(entry) != entries.REGULAR:
        return set()  # no-op, membership or version entries
    cmd = commands.decode(entries.regular_payload(entry))  # replication/entries.py
    nested = cmd.commands if isinstance(cmd, commands.Batch) else (cmd,)
    return {r.body.decode() for c in nested if isinstance(c, commands.Append) for r in c.records}


def synced_payloads(cluster: LocalCluster) -> dict[int, list[set[str]]]:
    """{partition: [payloads in the synced journal of each replica]}."""
    out: dict[int, list[set[str]]] = defaultdict(list)
    for i in range(cluster.nodes):
        for replica in replica_dirs(cluster, i):
            synced = replica / "raft.journal.synced"
            part = int(replica.name.rsplit(".", 1)[1])
            out[part].append(journal_payloads(synced) if synced.exists() else set())
    return out


def lose_unsynced_data(cluster: LocalCluster) -> None:
    """After the kill: every journal becomes its last synced copy; LMDB is gone."""
    for i in range(cluster.nodes):
        groups = [*replica_dirs(cluster, i), cluster.specs[i].dir / "data" / "metadata"]
        for group in groups:
            journal, synced = group / "raft.journal", group / "raft.journal.synced"
            if synced.exists():
                os.replace(synced, journal)
            else:
                journal.unlink(missing_ok=True)
            shutil.rmtree(group / "lmdb", ignore_errors=True)


def _acked(ops: list[dict]) -> dict[str, int]:
    return {op["value"]: op["partition"] for op in ops if op["f"] == "send" and op["type"] == "ok"}


def _start(cluster: LocalCluster) -> None:
    cluster.start()
    cluster.wait_ready(60)


def power_loss_run(tmp_path: Path, seed: int, durability: str) -> tuple[list[str], Any]:
    """Load, power cut, journals back to their synced copies, LMDB gone, restart, read.

    Returns the acked sends missing from a quorum of synced journals, and the
    checker's report on everything read back after the restart."""
    env = {"RAFTQ_POWERLOSS_COPY": "1"}
    raft = {"log_compaction_min_entries": 1_000_000}  # journals keep every entry
    with LocalCluster(tmp_path / "c", nodes=3, env=env, raft=raft) as cluster:
        _start(cluster)
        config = _config(senders=4, receivers=0, readers=0)
        config.durability = durability
        # The check reads message bodies straight out of the synced journals,
        # so the queue stores them in the clear (test_encryption.py covers sealing).
        config.encryption = False
        create_queue(cluster, config)
        history = History(tmp_path / "history.jsonl")
        workload = Workload(history, cluster.client, config.workload, seed).start()
        time.sleep(5)
        kill_all_at_once(cluster)  # the power cut, mid-load
        workload.stop()
        acked = _acked(history.ops)
        assert len(acked) > 50, "too little load to prove anything"
        synced = synced_payloads(cluster)
        short = [p for p, part in acked.items() if sum(p in s for s in synced[part]) < 2]
        lose_unsynced_data(cluster)
        _start(cluster)
        with cluster.client(timeout_s=10.0, retries=5) as client:
            _, complete = final_reads(history, client, QUEUE, config.partitions)
            digests, converged = collect_digests(client, QUEUE, config.replication)
        assert complete and converged
        report = check(history.ops, replica_digests=digests)
        print(report.render())
        return short, report


def test_acknowledged_sends_are_synced_on_a_quorum_and_survive_power_loss(
    tmp_path: Path, chaos_seed: int
) -> None:
    print(f"chaos seed: {chaos_seed}")
    short, report = power_loss_run(tmp_path, chaos_seed, "fsync")
    assert not short, f"acked but synced on fewer than 2 of 3 replicas: {short[:10]}"
    assert report.ok


def test_power_loss_check_catches_acks_that_were_never_synced(
    tmp_path: Path, chaos_seed: int
) -> None:
    """The control: durability "quorum" acks before any sync, so the same power cut
    must lose acknowledged sends, and both checks must say so."""
    print(f"chaos seed: {chaos_seed}")
    short, report = power_loss_run(tmp_path, chaos_seed, "quorum")
    assert short
    assert report.counts["lost"] > 0


def test_kill_minus_nine_of_every_node_three_times_under_load_loses_nothing(
    tmp_path: Path, chaos_seed: int
) -> None:
    print(f"chaos seed: {chaos_seed}")
    with LocalCluster(tmp_path / "c", nodes=3) as cluster:
        _start(cluster)
        config = _config()
        create_queue(cluster, config)
        history = History(tmp_path / "history.jsonl")
        workload = Workload(history, cluster.client, config.workload, chaos_seed).start()
        for _ in range(3):
            time.sleep(4)
            kill_all_at_once(cluster)
            _start(cluster)
        time.sleep(3)
        workload.stop()
        final, digests = final_phase(cluster, history, config)
        report = check(history.ops, replica_digests=digests)
        print(report.render(), final)
        assert final["healthy"] and final["drained"] and final["reads_complete"]
        assert final["digests_equal"]
        assert report.ok and report.stats["acked"] > 50


def test_a_node_whose_metadata_replays_before_start_returns_still_knows_its_queues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the 5-node campaign (seed 23): after a restart, a node answered with no
    queues and opened no replicas for minutes. The driver thread replays committed
    metadata entries as soon as the group is added; each calls _on_metadata_change,
    which asserts Node.metadata is set, but start() sets it only after host.call()
    returns: a race the load decided. Here the race is forced: start() waits 1 s
    before taking the replica, as a busy machine may."""
    import asyncio
    from concurrent.futures import Future

    from raft_queue import config as config_mod
    from raft_queue.replication.host import RaftHost
    from raft_queue.server.node import Node

    with LocalCluster(tmp_path / "c", nodes=1) as cluster:
        _start(cluster)
        with cluster.client() as client:
            client.create_queue(QUEUE, partitions=1, replication_factor=1)
        time.sleep(2.0)  # pysyncobj saves the commit index once a second
    real_call = RaftHost.call

    def late_call(self: RaftHost, fn: Any) -> Future[Any]:
        fut = real_call(self, fn)
        fut.result(10)
        time.sleep(1.0)  # the driver thread ticks (and replays) meanwhile
        return fut

    monkeypatch.setattr(RaftHost, "call", late_call)
    node = Node(config_mod.load(cluster.specs[0].config_path))
    node.start(asyncio.new_event_loop())
    try:
        time.sleep(2.0)
        assert node.view.queue(QUEUE) is not None
    finally:
        monkeypatch.setattr(RaftHost, "call", real_call)
        node.stop()
