"""``raftq`` through click's CliRunner against the fake cluster of test_client.py.

Checks what operators and scripts rely on: tables name the values, ``--json``
is one parseable document, failures are one line on stderr with exit 1 (2
for usage errors) and never a traceback.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from test_client import FakeCluster

from raft_queue.cli.main import main


@pytest.fixture(scope="module")
def fake_servers():
    with FakeCluster(nodes=2) as servers:
        yield servers


@pytest.fixture
def cluster(fake_servers):
    return fake_servers.reset()


@pytest.fixture
def raftq(cluster):
    """Run ``raftq --server <node 0> ARGS``; returns click's Result."""
    runner = CliRunner()

    def run(*args, input=None, env=None):
        argv = ["--server", cluster.addresses[0], "--timeout", "2", *args]
        return runner.invoke(main, argv, input=input, env=env, prog_name="raftq")

    return run


def ok(result):
    assert result.exit_code == 0, result.output
    return result


def failed(result, code=1):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


# ---- queue -------------------------------------------------------------------------


def test_queue_create_prints_effective_config_in_milliseconds(raftq, cluster):
    out = ok(
        raftq(
            "queue",
            "create",
            "orders",
            "--partitions",
            "3",
            "--durability",
            "quorum",
            "--visibility-timeout",
            "12.5",
            "--ordering",
            "fifo",
        )
    ).stdout
    assert "visibility_timeout_ms" in out and "12500" in out
    assert "quorum" in out and "fifo" in out
    config = cluster.calls_of("CreateQueue")[0][1].config
    assert (config.partitions, config.visibility_timeout_ms) == (3, 12500)
    assert not config.HasField("max_receives")  # not given: server default


def test_queue_create_json(raftq):
    info = json.loads(ok(raftq("queue", "create", "q", "--max-receives", "4", "--json")).stdout)
    assert info["name"] == "q"
    assert info["config"]["max_receives"] == 4
    assert info["config"]["durability"] == "fsync"


def test_server_rejection_names_the_field_on_one_stderr_line(raftq):
    result = failed(raftq("queue", "create", "bad name!"))
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == ["Error: name: must match [A-Za-z0-9._-]{1,100}"]


@pytest.mark.parametrize(
    "args",
    [
        ("queue", "create", "q", "--partitions", "0"),
        ("queue", "create", "q", "--durability", "disk"),
        ("queue", "create", "q", "--visibility-timeout", "-1"),
        ("receive", "q", "--max", "0"),
        ("read", "q", "--partition", "0"),
    ],
)
def test_usage_errors_exit_2(raftq, args):
    failed(raftq(*args), code=2)


def test_queue_list_and_describe(raftq, cluster):
    cluster.add_queue("alpha", partitions=2)
    cluster.add_queue("beta")
    table = ok(raftq("queue", "list")).stdout
    assert "alpha" in table and "beta" in table and "partitions" in table
    listed = json.loads(ok(raftq("queue", "list", "--json")).stdout)
    assert [(q["name"], q["config"]["partitions"]) for q in listed] == [("alpha", 2), ("beta", 1)]
    described = ok(raftq("queue", "describe", "alpha")).stdout
    assert "dedup_window_ms" in described and "300000" in described


def test_describe_missing_queue_fails_with_not_found(raftq):
    result = failed(raftq("queue", "describe", "ghost"))
    assert "ghost" in result.stderr and "does not exist" in result.stderr


def test_queue_delete_asks_unless_yes(raftq, cluster):
    cluster.add_queue("q")
    failed(raftq("queue", "delete", "q", input="n\n"))
    assert "q" in cluster.queues
    assert json.loads(ok(raftq("queue", "delete", "q", "--yes", "--json")).stdout) == {
        "deleted": "q"
    }
    assert "q" not in cluster.queues


# ---- send ------------------------------------------------------------------------------


def test_send_prints_partition_and_offset_of_each(raftq, cluster):
    cluster.add_queue("q")
    out = ok(raftq("send", "q", "one", "two", "--key", "k", "--header", "trace=7")).stdout
    assert "partition" in out and "offset" in out
    entries = cluster.calls_of("Send")[0][1].entries
    assert [e.body for e in entries] == [b"one", b"two"]
    assert entries[0].key == "k" and entries[0].headers["trace"] == b"7"


def test_send_file_from_stdin_one_message_per_line(raftq, cluster):
    cluster.add_queue("q")
    out = ok(raftq("send", "q", "--file", "-", "--json", input="a\r\nb\n\nc\n")).stdout
    assert [r["offset"] for r in json.loads(out)] == [0, 1, 2]
    assert [m.body for m in cluster.queues["q"].logs[0]] == [b"a", b"b", b"c"]


def test_send_with_dedup_id_twice_reports_duplicate(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "x", "--dedup-id", "once"))
    (again,) = json.loads(ok(raftq("send", "q", "x", "--dedup-id", "once", "--json")).stdout)
    assert again["duplicate"] is True and again["offset"] == 0


@pytest.mark.parametrize(
    "args",
    [
        ("send", "q"),
        ("send", "q", "a", "b", "--dedup-id", "d"),
        ("send", "q", "a", "--header", "novalue"),
    ],
)
def test_send_usage_errors(raftq, cluster, args):
    cluster.add_queue("q")
    failed(raftq(*args), code=2)
    assert cluster.calls_of("Send") == []


def test_send_delay_takes_units_up_to_years(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "x", "--delay", "400d"))
    ok(raftq("send", "q", "x", "--delay", "90m"))
    (msg,) = json.loads(ok(raftq("receive", "q", "--no-ack", "--json")).stdout)
    ok(raftq("nack", "q", msg["receipt"], "--delay", "12h"))
    sends = [call[1].entries[0].delay_ms for call in cluster.calls_of("Send")]
    assert sends == [400 * 86_400_000, 90 * 60_000]
    assert cluster.calls_of("Nack")[0][1].delay_ms == 12 * 3_600_000
    assert "not a duration" in failed(raftq("send", "q", "x", "--delay", "1y"), 2).output


def test_send_delay_is_sent_in_milliseconds(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "x", "--delay", "1.5"))
    assert cluster.calls_of("Send")[0][1].entries[0].delay_ms == 1500


# ---- receive, ack, nack, read -----------------------------------------------------------------


def test_receive_prints_then_acks(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "[red]hello"))
    out = ok(raftq("receive", "q", "--max", "5", "--wait", "0.5")).stdout
    assert "[red]hello" in out  # shown literally, not as markup
    assert cluster.queues["q"].acked == {(0, 0)}
    assert cluster.calls_of("Receive")[0][1].wait_ms == 500


def test_receive_no_ack_shows_receipts_for_a_later_ack(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "job"))
    (msg,) = json.loads(ok(raftq("receive", "q", "--no-ack", "--json")).stdout)
    assert msg["body"] == "job" and msg["receipt"]
    assert cluster.calls_of("Ack") == []
    assert "yes" in ok(raftq("ack", "q", msg["receipt"])).stdout
    result = failed(raftq("ack", "q", msg["receipt"]))
    assert "ack failed for 1 of 1 receipts: not found" in result.stderr


def test_receive_on_empty_queue(raftq, cluster):
    cluster.add_queue("q")
    assert "no messages" in ok(raftq("receive", "q")).stdout
    assert json.loads(ok(raftq("receive", "q", "--json")).stdout) == []


def test_nack_with_delay(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "job"))
    (msg,) = json.loads(ok(raftq("receive", "q", "--no-ack", "--json")).stdout)
    results = json.loads(ok(raftq("nack", "q", msg["receipt"], "--delay", "2", "--json")).stdout)
    assert results == [{"receipt": msg["receipt"], "ok": True, "error": ""}]
    assert cluster.calls_of("Nack")[0][1].delay_ms == 2000


def test_read_from_an_offset(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "a", "b", "c"))
    out = ok(raftq("read", "q", "--partition", "0", "--offset", "1")).stdout
    assert "next offset 3; partition holds [0, 3)" in out
    result = json.loads(
        ok(raftq("read", "q", "--partition", "0", "--offset", "1", "--json")).stdout
    )
    assert [m["body"] for m in result["messages"]] == ["b", "c"]
    assert result["next_offset"] == 3


def test_binary_bodies_are_base64_in_json(raftq, cluster):
    cluster.add_queue("q")
    ok(raftq("send", "q", "--file", "-", input=b"\xff\xfe\n"))
    result = json.loads(
        ok(raftq("read", "q", "--partition", "0", "--offset", "0", "--json")).stdout
    )
    assert result["messages"][0]["body"] == {"base64": "//4="}


# ---- partitions, cluster, connection --------------------------------------------------------


def test_partitions_describe(raftq, cluster):
    cluster.add_queue("q", partitions=2, leaders=[0, 1])
    out = ok(raftq("partitions", "describe", "q")).stdout
    assert cluster.addresses[1] in out and "n0,n1" in out
    infos = json.loads(ok(raftq("partitions", "describe", "q", "--json")).stdout)
    assert [p["leader"] for p in infos] == ["n0", "n1"]
    assert infos[1]["replicas"] == ["n0", "n1"]


def test_cluster_status(raftq, cluster):
    cluster.add_queue("q")
    out = ok(raftq("cluster", "status")).stdout
    assert "metadata version 3" in out and cluster.addresses[0] in out and "leader" in out
    status = json.loads(ok(raftq("cluster", "status", "--digests", "--json")).stdout)
    assert [n["id"] for n in status["nodes"]] == ["n0", "n1"]
    assert status["replicas"][0]["digest"] == "ab"


def test_server_from_environment(cluster):
    result = CliRunner().invoke(
        main, ["queue", "list", "--json"], env={"RAFTQ_SERVER": cluster.addresses[1]}
    )
    assert result.exit_code == 0, result.output
    assert [node for node, _ in cluster.calls_of("ListQueues")] == [1]


def test_unreachable_server_is_one_line_exit_1():
    result = CliRunner().invoke(
        main, ["--server", "127.0.0.1:1", "--timeout", "1", "queue", "list"]
    )
    failed(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: unavailable")


@pytest.mark.parametrize(
    ("text", "rate"),
    [(None, 0), ("0", 0), ("5000000", 5_000_000), ("5MB/s", 5_000_000), ("512KiB", 524_288),
     ("1.5 mb/s", 1_500_000), ("2g", 2_000_000_000)],
)  # fmt: skip
def test_throttle_rates_parse_with_units(text, rate):
    from raft_queue.cli.operations import parse_rate

    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["fast", "5XB/s", "-1", "MB"])
def test_a_bad_throttle_is_a_usage_error_naming_the_option(raftq, text):
    result = raftq("partitions", "rebalance", "--execute", "--throttle", text)
    assert result.exit_code == 2
    assert "--throttle" in result.output
