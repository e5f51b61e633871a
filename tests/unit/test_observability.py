"""observability/: HTTP access rules, health verdicts, JSON logs (no cluster)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from raft_queue import errors
from raft_queue.config import HealthConfig
from raft_queue.observability import logs, metrics
from raft_queue.observability.health import HealthMonitor, judge
from raft_queue.observability.http import HttpServer, Request

GOOD = "s3cret-admin-token"


def fake_authorize(token: str) -> bool:
    return token == GOOD


async def fake_status() -> dict[str, Any]:
    return {"node": "n1", "nodes": []}


def server(authorize: Any = fake_authorize, open_probes: bool = True) -> HttpServer:
    return HttpServer(fake_status, lambda: {"ready": True, "checks": {}}, authorize, open_probes)


def get(srv: HttpServer, path: str, method: str = "GET", body: bytes = b"", **headers: str) -> Any:
    req = Request(method, path, {k.replace("_", "-"): v for k, v in headers.items()}, body)
    return asyncio.run(srv.handle(req))


def test_without_authorize_everything_is_open() -> None:
    srv = server(authorize=None)
    assert get(srv, "/api/status").status == 200
    assert get(srv, "/").status == 200
    assert get(srv, "/metrics").status == 200


def test_status_api_and_page_need_a_token_once_authorize_is_set() -> None:
    srv = server()
    assert get(srv, "/api/status").status == 401
    assert get(srv, "/api/status", authorization="Bearer wrong").status == 401
    assert get(srv, "/api/status", authorization=f"Bearer {GOOD}").status == 200
    page = get(srv, "/")
    assert page.status == 303 and ("Location", "/login") in page.headers
    assert get(srv, "/", authorization=f"Bearer {GOOD}").status == 200
    assert get(srv, "/static/style.css").status == 200  # no data in it; the login page uses it


def test_login_sets_an_httponly_session_cookie_that_grants_access() -> None:
    srv = server()
    bad = get(srv, "/login", "POST", b"token=nope")
    assert bad.status == 401 and not any(k == "Set-Cookie" for k, _ in bad.headers)
    ok = get(srv, "/login", "POST", f"token={GOOD}".encode())
    assert ok.status == 303
    cookie = dict(ok.headers)["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and GOOD not in cookie
    session = cookie.split(";")[0]
    assert get(srv, "/api/status", cookie=session).status == 200
    assert get(srv, "/api/status", cookie="raftq_session=forged").status == 401
    get(srv, "/logout", "POST", cookie=session)
    assert get(srv, "/api/status", cookie=session).status == 401


def test_probes_stay_open_unless_configured_closed() -> None:
    srv = server()
    for path in ("/metrics", "/healthz", "/readyz"):
        assert get(srv, path).status == 200, path
    closed = server(open_probes=False)
    for path in ("/metrics", "/healthz", "/readyz"):
        assert get(closed, path).status == 401, path
        assert get(closed, path, authorization=f"Bearer {GOOD}").status == 200, path


def test_ready_needs_quorum_disk_and_not_stopping() -> None:
    assert judge(True, "", False, 100).ready
    assert not judge(False, "", False, 100).ready
    assert not judge(True, "below [storage] min_free_bytes", False, 99).ready
    assert not judge(True, "", True, 100).ready
    assert judge(True, "low", False, 0).admin_ready  # admin calls do not need disk


class FakeReplica:
    def __init__(self) -> None:
        self.contact = True

    def in_contact(self, within_s: float) -> bool:
        return self.contact


class FakeNode:
    def __init__(self) -> None:
        self.id = "n1"
        self.metadata: Any = FakeReplica()
        self.metadata_joining = False
        self.metadata_leader_hint = ""
        self.config = type("C", (), {"data_dir": "/"})()


class FakeServicer:
    def __init__(self) -> None:
        self.status: dict[str, int] = {}

    async def set(self, name: str, status: int) -> None:
        self.status[name] = status


def test_monitor_flips_grpc_health_with_quorum_and_disk() -> None:
    from grpc_health.v1 import health_pb2

    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    node, servicer, free = FakeNode(), FakeServicer(), [10**12]
    mon = HealthMonitor(node, HealthConfig(), servicer, ("Q", "A"), free=lambda path: free[0],
                        disk_low=lambda: "" if free[0] >= 1000 else "low")  # fmt: skip

    def step() -> dict[str, int]:
        mon.check()
        asyncio.run(mon.publish())
        return dict(servicer.status)

    assert step() == {"": serving, "Q": serving, "A": serving}
    node.metadata.contact = False
    assert step() == {"": not_serving, "Q": not_serving, "A": not_serving}
    node.metadata.contact = True
    free[0] = 10
    assert step() == {"": not_serving, "Q": not_serving, "A": serving}
    free[0] = 10**12
    assert step() == {"": serving, "Q": serving, "A": serving}
    node.metadata = None  # a non-voter: its metadata poll decides
    assert step()[""] == not_serving
    node.metadata_leader_hint = "127.0.0.1:1"
    assert step()[""] == serving
    asyncio.run(mon.shutting_down())
    assert servicer.status == {"": not_serving, "Q": not_serving, "A": not_serving}


def test_not_ready_until_the_metadata_view_was_vouched_for_once() -> None:
    """After a restart the view is only the snapshot until a leader gives the
    commit index: not ready until the barrier vouched for it, then latched."""
    from grpc_health.v1 import health_pb2

    node, servicer = FakeNode(), FakeServicer()
    answers: list[BaseException | None] = [errors.Unavailable("no leader yet"), None]
    calls: list[int] = []

    async def vouch() -> None:
        calls.append(1)
        answer = answers.pop(0) if answers else errors.Unavailable("would not matter now")
        if answer is not None:
            raise answer

    mon = HealthMonitor(node, HealthConfig(), servicer, ("Q", "A"), free=lambda path: 10**12,
                        disk_low=lambda: "", vouch=vouch)  # fmt: skip

    def step() -> tuple[bool, bool, int]:
        asyncio.run(mon.catch_up())
        verdict = mon.check()
        asyncio.run(mon.publish())
        return verdict.ready, verdict.admin_ready, servicer.status[""]

    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    assert step() == (False, False, not_serving)
    assert mon.verdict.as_dict()["checks"]["metadata_caught_up"] is False
    assert step() == (True, True, health_pb2.HealthCheckResponse.SERVING)
    assert step()[0] and len(calls) == 2  # latched: asked no more


def test_json_logs_carry_node_request_queue_and_partition() -> None:
    fmt = logs.JsonFormatter("n7")
    record = logging.LogRecord("raft_queue.x", logging.INFO, __file__, 1, "sent %d", (3,), None)
    plain = json.loads(fmt.format(record))
    assert plain["node"] == "n7" and plain["msg"] == "sent 3" and "request_id" not in plain
    tokens = (logs.request_id.set("r-1"), logs.queue.set("orders"), logs.partition.set(2))
    try:
        line = json.loads(fmt.format(record))
    finally:
        logs.request_id.reset(tokens[0])
        logs.queue.reset(tokens[1])
        logs.partition.reset(tokens[2])
    assert (line["request_id"], line["queue"], line["partition"]) == ("r-1", "orders", 2)
    assert line["level"] == "INFO" and line["ts"].endswith("Z")


def test_rejections_are_counted_by_reason() -> None:
    before = metrics.REJECTIONS.labels("quota")._value.get()
    metrics.count_rejection("quota")
    assert metrics.REJECTIONS.labels("quota")._value.get() == before + 1


@pytest.mark.parametrize("enabled", [True, False])
def test_metrics_switch_turns_counting_off(enabled: bool) -> None:
    metrics.configure(enabled)
    try:
        before = metrics.SENT.labels("switch", "0")._value.get()
        metrics.count_sent("switch", 0, 5)
        assert metrics.SENT.labels("switch", "0")._value.get() == before + (5 if enabled else 0)
        assert isinstance(metrics.probe_for("switch", 0), metrics.RaftProbe) is enabled
    finally:
        metrics.configure(True)


def test_config_rejects_bad_monitoring_settings() -> None:
    from raft_queue.config import MetricsConfig, NodeConfig
    from raft_queue.errors import ConfigError

    with pytest.raises(ConfigError, match="metrics.address"):
        MetricsConfig(address="no-port")
    with pytest.raises(ConfigError, match="health.check_period_s"):
        HealthConfig(check_period_s=-1)
    with pytest.raises(ConfigError, match="log_format"):
        NodeConfig(node_id="n1", data_dir="/tmp/x", log_format="xml")
    assert NodeConfig(node_id="n1", data_dir="/tmp/x").metrics.address == ""  # off by default
