"""Metrics and health of real node processes (observability/)."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a node's /metrics, parsed by prometheus-client's parser."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **want: str) -> float:
    return sum(
        v for labels, v in samples.get(name, []) if all(labels.get(k) == x for k, x in want.items())
    )


def cluster_total(c: LocalCluster, name: str, **want: str) -> float:
    return sum(total(scrape(u), name, **want) for u in c.metrics_urls)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # Snapshots every 50 entries, so the snapshot metrics have something to count.
    c = LocalCluster(tmp_path / "cluster", nodes=3, raft={"log_compaction_min_entries": 50})
    c.start()
    try:
        c.wait_ready(60)
        yield c
    finally:
        c.stop()


def test_a_thousand_sends_add_a_thousand_to_the_sent_counter(cluster: LocalCluster) -> None:
    client = cluster.client()
    client.create_queue("metered", partitions=3)
    before = cluster_total(cluster, "raftq_messages_sent_total", queue="metered")
    for k in range(10):
        client.send_batch("metered", [b"m-%d-%d" % (k, i) for i in range(100)])
    after = cluster_total(cluster, "raftq_messages_sent_total", queue="metered")
    assert after - before == 1000
    # Depth, exported by each partition's leader only: summed over nodes, exact.
    assert cluster_total(cluster, "raftq_queue_messages", queue="metered") == 1000
    got = client.receive("metered", max_messages=50)
    client.ack("metered", [m.receipt for m in got])
    assert cluster_total(cluster, "raftq_messages_received_total", queue="metered") == len(got)
    assert cluster_total(cluster, "raftq_messages_acked_total", queue="metered") == len(got)


def test_histograms_have_samples_and_names_follow_prometheus(cluster: LocalCluster) -> None:
    client = cluster.client()
    client.create_queue("timed", partitions=1)
    client.send_batch("timed", [b"x"] * 20)
    for i in range(60):  # one Raft entry each: past log_compaction_min_entries
        client.send("timed", b"one %d" % i)
    with pytest.raises(Exception):  # noqa: B017 (any error: we count its code)
        client.get_queue("no-such-queue")
    with pytest.raises(Exception):  # noqa: B017 (refused by the node's [limits])
        client.receive("timed", max_messages=5000)
    merged: dict[str, list[tuple[dict[str, str], float]]] = {}
    for url in cluster.metrics_urls:
        for name, rows in scrape(url).items():
            merged.setdefault(name, []).extend(rows)
    for name in (
        "raftq_rpc_duration_seconds_count",
        "raftq_raft_commit_duration_seconds_count",
        "raftq_raft_fsync_duration_seconds_count",
    ):
        assert total(merged, name) > 0, name
    assert total(merged, "raftq_rpc_requests_total", method="QueueService/Send", code="OK") > 0
    assert total(merged, "raftq_rpc_requests_total", code="NOT_FOUND") >= 1
    assert total(merged, "raftq_rejections_total", reason="limits") >= 1
    assert total(merged, "raftq_rpc_requests_total", code="INVALID_ARGUMENT") >= 1
    assert total(merged, "raftq_raft_entries_appended_total", queue="timed") > 0
    assert total(merged, "raftq_raft_appended_bytes_total", queue="timed") > 0
    wait_for("a snapshot", lambda: cluster_total(
        cluster, "raftq_raft_snapshots_total", queue="timed", kind="create") > 0, 10.0)  # fmt: skip
    assert cluster_total(cluster, "raftq_raft_snapshot_duration_seconds_count", queue="timed") > 0
    for name in ("raftq_disk_free_bytes", "process_resident_memory_bytes", "raftq_node_ready"):
        assert total(merged, name) > 0, name
    ours = [n for n in merged if n.startswith("raftq_")]
    assert len(ours) > 30
    for name in ours:  # counters end in _total, durations in _seconds (base units)
        assert "_ms" not in name and "millis" not in name, name
    # Every name the alert rules and the dashboard use is one the nodes export.
    from tests.unit.test_monitoring_configs import referenced_metrics

    families = set()
    for url in cluster.metrics_urls:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        families |= {f.name for f in text_string_to_metric_families(text)}
    for name in referenced_metrics():
        base = re.sub(r"_(total|bucket|count|sum)$", "", name)
        assert name in families or base in families, name
    # Bounded labels: no receipt, message or consumer ids anywhere.
    keys = {k for rows in merged.values() for labels, _ in rows for k in labels}
    assert keys <= {"method", "code", "queue", "partition", "follower", "reason", "kind", "le"}


def health_status(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2.0)
        except grpc.RpcError:
            return -1
        return int(resp.status)


def readyz(url: str) -> int:
    try:
        return int(urllib.request.urlopen(url + "/readyz", timeout=3).status)
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
        assert body["checks"]["metadata_quorum"] is False
        return int(exc.code)
    except OSError:
        return -1


def wait_for(what: str, check: object, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"not {what} within {timeout_s} s")


@pytest.mark.slow
def test_a_node_cut_off_by_sigstop_says_not_serving_then_recovers(cluster: LocalCluster) -> None:
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    me, url = cluster.specs[0].address, cluster.metrics_urls[0]
    queue_service = "raft_queue.v1.QueueService"
    # The monitor re-checks every 0.5 s: ready may lag wait_ready by that much.
    wait_for("SERVING at start", lambda: health_status(me) == serving, 5.0)
    assert health_status(me, queue_service) == serving
    assert readyz(url) == 200
    cluster.pause(1)
    cluster.pause(2)
    try:
        took = wait_for(
            "NOT_SERVING", lambda: health_status(me) == not_serving and readyz(url) == 503, 10.0
        )
        assert health_status(me, queue_service) == not_serving
        assert readyz(url) == 503
        print(f"NOT_SERVING after {took:.1f} s")
    finally:
        cluster.resume(1)
        cluster.resume(2)
    took = wait_for("SERVING again", lambda: health_status(me) == serving, 20.0)
    assert readyz(url) == 200
    print(f"SERVING again after {took:.1f} s")


def test_health_says_not_serving_below_the_disk_watermark(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "c", nodes=1, storage={"min_free_bytes": 2**62})
    c.start()
    try:
        c.wait_ready(60)
        assert health_status(c.specs[0].address) == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(c.metrics_urls[0] + "/readyz", timeout=3)
        assert err.value.code == 503
        body = json.loads(err.value.read())
        assert body["checks"] == {
            "metadata_quorum": True,
            "metadata_caught_up": True,
            "disk": False,
            "not_stopping": True,
        }
        assert urllib.request.urlopen(c.metrics_urls[0] + "/healthz", timeout=3).status == 200
    finally:
        c.stop()


def test_raftq_top_renders_a_frame_from_real_status(cluster: LocalCluster) -> None:
    from click.testing import CliRunner

    from raft_queue.cli.main import main

    client = cluster.client()
    client.create_queue("watched", partitions=2)
    client.send_batch("watched", [b"w"] * 7)
    result = CliRunner().invoke(
        main, ["top", "--once", "--interval", "0.2", "--url", cluster.metrics_urls[1]],
        env={"COLUMNS": "160", "RAFTQ_TOKEN": cluster.token},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.output
    assert "3/3 nodes up" in out and "from n2" in out
    for node_id in ("n1", "n2", "n3"):
        assert node_id in out
    row = next(line for line in out.splitlines() if "watched " in line and "│ 2 " in line)
    assert " 7 " in row  # depth
    assert "watched[0]" in out and "watched[1]" in out
