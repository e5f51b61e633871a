"""raftq against a real cluster: queue create/update with every delivery flag,
send/receive/ack/nack flags, dead letters redriven at a rate, tail."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from raft_queue.cli.main import main
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import module_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from module_cluster(tmp_path_factory, "cli")


@pytest.fixture
def raftq(cluster: LocalCluster):
    runner = CliRunner()

    def run(*args: str) -> dict | list | str:
        argv = ["--server", cluster.bootstrap, "--token", cluster.token, "--timeout", "20", *args]
        result = runner.invoke(main, argv)
        assert result.exit_code == 0, result.output
        return json.loads(result.output) if "--json" in args else result.output

    return run


def test_queue_flags_round_trip_through_create_and_update(raftq) -> None:
    raftq("queue", "create", "cli.dlq", "--replication", "3", "--json")
    info = raftq(
        "queue", "create", "cli", "--partitions", "2", "--replication", "3",
        "--visibility-timeout", "5", "--max-receives", "2", "--dead-letter-queue", "cli.dlq",
        "--ordering", "none", "--delay", "0", "--dedup-window", "60", "--durability", "quorum",
        "--retention", "3600", "--retention-bytes", "1000000", "--json",
    )  # fmt: skip
    config = info["config"]
    assert config["visibility_timeout_ms"] == 5000 and config["max_receives"] == 2
    assert config["dead_letter_queue"] == "cli.dlq" and config["durability"] == "quorum"
    assert config["dedup_window_ms"] == 60_000 and config["retention_ms"] == 3_600_000
    updated = raftq("queue", "update", "cli", "--visibility-timeout", "1", "--json")
    assert updated["config"]["visibility_timeout_ms"] == 1000
    assert updated["config"]["retention_bytes"] == 1_000_000


def test_send_receive_nack_and_redrive_dead_letters_at_a_rate(raftq) -> None:
    raftq("queue", "create", "rd.dlq", "--replication", "3")
    raftq(
        "queue", "create", "rd", "--replication", "3", "--max-receives", "1",
        "--dead-letter-queue", "rd.dlq", "--visibility-timeout", "1",
    )  # fmt: skip
    sent = raftq("send", "rd", "a", "--dedup-id", "x1", "--header", "k=v", "--json")
    assert sent[0]["durability"] == "fsync"
    dup = raftq("send", "rd", "a", "--dedup-id", "x1", "--json")
    assert dup[0]["duplicate"] and dup[0]["offset"] == sent[0]["offset"]
    for body in ("b", "c"):
        raftq("send", "rd", body, "--delay", "0")
    got = raftq("receive", "rd", "--max", "3", "--wait", "5", "--no-ack", "--visibility", "1",
                "--json")  # fmt: skip
    assert sorted(m["body"] for m in got) == ["a", "b", "c"]
    assert next(m for m in got if m["body"] == "a")["headers"] == {"k": "v"}
    raftq("nack", "rd", got[0]["receipt"])  # its one receive is used up: dead at once
    deadline = time.monotonic() + 15
    while raftq("queue", "describe", "rd.dlq", "--json")["messages"] < 3:
        assert time.monotonic() < deadline, "dead letters did not reach the DLQ"
        time.sleep(0.3)
    start = time.monotonic()
    moved = raftq("queue", "redrive", "rd.dlq", "--to", "rd", "--rate", "2/s", "--json")
    assert moved["moved"] == 3 and time.monotonic() - start >= 1.0  # 3 at 2/s
    back = raftq("receive", "rd", "--max", "3", "--wait", "5", "--json")
    assert sorted(m["body"] for m in back) == ["a", "b", "c"]
    assert all(not k.startswith("raftq-dlq-") for m in back for k in m["headers"])


def test_long_delays_round_trip_from_the_command_line(raftq, cluster: LocalCluster) -> None:
    """Delays past the old 32-bit limit (~49.7 days) in days: a queue's up to
    365 d, a message's up to 3653 d; over the limit, the error names it."""
    day_ms = 86_400_000
    info = raftq("queue", "create", "long.q", "--replication", "3", "--delay", "365d", "--json")
    assert info["config"]["delay_ms"] == 365 * day_ms
    raftq("queue", "create", "long", "--replication", "3")
    sent = raftq("send", "long", "later", "--delay", "400d", "--json")
    assert len(sent) == 1
    assert raftq("receive", "long", "--wait", "0.5", "--json") == []
    assert raftq("queue", "describe", "long", "--json")["delayed"] == 1
    runner = CliRunner()
    over = ["--server", cluster.bootstrap, "--token", cluster.token, "send", "long", "x"]
    over += ["--delay", "3654d"]
    result = runner.invoke(main, over)
    assert result.exit_code == 1 and "3653 days" in result.output, result.output
    bad = runner.invoke(main, ["--server", cluster.bootstrap, "send", "long", "x", "--delay", "1y"])
    assert bad.exit_code == 2 and "400d" in bad.output, bad.output


def test_tail_follows_new_messages(raftq, cluster: LocalCluster) -> None:
    raftq("queue", "create", "tl", "--replication", "3")
    raftq("send", "tl", "old")
    out = raftq("tail", "tl", "--from-beginning", "--max", "1")
    assert json.loads(out.splitlines()[0])["body"] == "old"
