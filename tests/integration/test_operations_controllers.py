"""Changing the metadata group's voters on real node processes: ``raftq
controller add`` makes a 4th node a voter, ``remove`` takes an original one
out, the group then survives a SIGKILL of another voter, and after every
process restarts the voters are still the new set (not the config's).
Each kill leaves a majority only if Raft's voter set really changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_operations import TUNING, cli, wait_for

pytestmark = pytest.mark.integration


def voters(client: Any) -> set[str]:
    return {c.node for c in client.list_controllers().controllers}


def create_works(client: Any, name: str) -> bool:
    try:
        client.create_queue(name, partitions=1, replication_factor=3)
        return True
    except Exception:
        return False


def test_controllers_are_added_and_removed_online_and_the_set_survives_restarts(
    tmp_path: Path,
) -> None:
    c = LocalCluster(tmp_path / "cluster", nodes=3, cluster_tuning=TUNING)
    c.start()
    try:
        c.wait_ready(60)
        c.start(c.add_node())
        c.wait_ready(60)
        client = c.client()
        assert voters(client) == {"n1", "n2", "n3"}

        refused = cli(c, "controller", "add", "n9")
        assert refused.exit_code == 1 and "node" in refused.output
        refused = cli(c, "controller", "remove", "n4")
        assert refused.exit_code == 1 and "n4 is not a controller" in refused.output

        added = cli(c, "controller", "add", "n4", "--json")
        assert added.exit_code == 0, added.output
        assert {v["node"] for v in json.loads(added.output)["controllers"]} == {
            "n1", "n2", "n3", "n4"
        }  # fmt: skip
        removed = cli(c, "controller", "remove", "n1")
        assert removed.exit_code == 0, removed.output
        assert voters(client) == {"n2", "n3", "n4"}
        status = cli(c, "cluster", "status")
        assert "controllers: " in status.output and "n4" in status.output
        wait_for(lambda: not (c.specs[0].dir / "data" / "metadata").exists(), 20, "n1 to leave")

        c.kill(1)  # n2: two of the three voters remain
        wait_for(lambda: create_works(client, "after-kill"), 30, "the group without n2")

        c.stop()
        c.start()
        c.wait_ready(60)
        client = c.client()
        wait_for(lambda: voters(client) == {"n2", "n3", "n4"}, 30, "the voters after restart")
        wait_for(lambda: create_works(client, "after-restart"), 30, "the group after restart")
        role = json.loads((c.specs[0].dir / "data" / "controllers.json").read_text())
        assert role["voter"] is False
        assert not (c.specs[0].dir / "data" / "metadata").exists()
        assert {q.name for q in client.list_queues()} >= {"after-kill", "after-restart"}
        c.kill(2)  # n3: the restarted group must be {n2, n3, n4}, not the config's
        wait_for(lambda: create_works(client, "after-restart-kill"), 30, "n2 and n4 alone")
    except BaseException:
        for i in range(c.nodes):
            print(f"--- n{i + 1} log tail ---")
            print("\n".join(c.log_path(i).read_text(errors="replace").splitlines()[-30:]))
        raise
    finally:
        c.stop()


def test_a_voter_removed_while_down_leaves_when_it_comes_back(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "cluster", nodes=3, cluster_tuning=TUNING)
    c.start()
    try:
        c.wait_ready(60)
        c.start(c.add_node())
        c.wait_ready(60)
        client = c.client()
        assert cli(c, "controller", "add", "n4").exit_code == 0
        c.kill(0)  # n1, with its metadata replica and data
        wait_for(lambda: create_works(client, "n1-down"), 30, "a leader without n1")
        removed = cli(c, "controller", "remove", "n1")
        assert removed.exit_code == 0, removed.output
        c.start(0)  # comes back believing it is a voter of the old group
        metadata_dir = c.specs[0].dir / "data" / "metadata"
        wait_for(lambda: not metadata_dir.exists(), 30, "n1 to leave the group")
        role = json.loads((c.specs[0].dir / "data" / "controllers.json").read_text())
        assert role["voter"] is False
        assert voters(client) == {"n2", "n3", "n4"}
        wait_for(lambda: create_works(client, "after-return"), 30, "the group")
        c.kill(1)  # n2: n3 and n4 are a majority only of the new voter set
        wait_for(lambda: create_works(client, "after-kill"), 30, "n3 and n4 alone")
    except BaseException:
        for i in range(c.nodes):
            print(f"--- n{i + 1} log tail ---")
            print("\n".join(c.log_path(i).read_text(errors="replace").splitlines()[-30:]))
        raise
    finally:
        c.stop()
