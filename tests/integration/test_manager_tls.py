"""The external manager with [tls] (docs/operations.md, "Two levels of manager"):
its gRPC port serves TLS only, the SDK and CLI reach it over TLS with the
fleet's CA, and it dials its (TLS) clusters over TLS for health and creates.
One TLS node and one manager: the smallest fleet that shows all three."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from raft_queue import errors
from raft_queue.cli.main import main
from raft_queue.client.managed import ManagedClient
from raft_queue.client.manager_admin import ManagerAdmin
from raft_queue.testing.cluster import LocalCluster, _private_write
from raft_queue.testing.managers import ManagerCluster

pytestmark = pytest.mark.integration

HEALTH = {"poll_period_s": 0.5, "call_timeout_s": 2.0, "down_after_s": 3.0}


@dataclass
class TlsFleet:
    cluster: LocalCluster
    managers: ManagerCluster


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsFleet]:
    base = Path(tmp_path_factory.mktemp("manager-tls"))
    cluster = LocalCluster(base / "c1", nodes=1, tls=True)
    # the managers' certificates come from the cluster's dev CA: one CA for the fleet
    managers = ManagerCluster(base / "mgr", managers=1, health=HEALTH, tls_dir=cluster.tls_dir)
    cluster.base_dir.mkdir(parents=True)
    _private_write(cluster.base_dir / "admin.token", managers.token + "\n")
    try:
        cluster.start()
        managers.start()
        cluster.wait_ready(60)
        managers.wait_ready(60)
        with managers.admin() as admin:
            admin.add_cluster("c1", cluster.bootstrap.split(","), cluster.token)
        yield TlsFleet(cluster, managers)
    finally:
        managers.stop()
        cluster.stop()


def test_the_manager_reaches_its_tls_cluster_and_routes_over_tls(fleet: TlsFleet) -> None:
    managers = fleet.managers
    deadline = time.monotonic() + 30
    health = ""
    while time.monotonic() < deadline and health != "healthy":
        with managers.admin() as admin:  # over TLS, checked against the fleet's CA
            health = {c.name: c.health for c in admin.list_clusters().clusters}["c1"]
        time.sleep(0.2)
    assert health == "healthy"  # its polls reached the TLS-only node
    with ManagedClient(managers.bootstrap, managers.token, **managers.client_tls) as client:
        client.create_queue("tls-q", 2)  # the manager's CreateQueue on the cluster, over TLS
        client.send("tls-q", b"over tls", key="k")
        got = client.receive("tls-q", 10, wait_ms=5000)
        assert [m.body for m in got] == [b"over tls"]
        assert [r.ok for r in client.ack("tls-q", [got[0].receipt])] == [True]
    with fleet.cluster.client() as direct:
        assert direct.get_queue("tls-q").config.partitions == 2


def test_a_plaintext_client_is_refused_by_a_tls_manager(fleet: TlsFleet) -> None:
    managers = fleet.managers
    plain = ManagerAdmin(managers.bootstrap, managers.token, timeout_s=2.0, attempts=2)
    with plain, pytest.raises(errors.Unavailable):
        plain.list_clusters()


def test_the_cli_reaches_a_tls_manager_with_the_fleets_ca(fleet: TlsFleet) -> None:
    managers = fleet.managers
    ca = managers.client_tls["ca_file"]
    env = {"RAFTQ_TOKEN": managers.token}
    base = ["--manager", managers.bootstrap]
    ok = CliRunner().invoke(main, [*base, "--ca", ca, "clusters", "list"], env=env)
    assert ok.exit_code == 0, ok.output
    assert "c1" in ok.output
    bad = CliRunner().invoke(main, [*base, "--timeout", "2", "clusters", "list"], env=env)
    assert bad.exit_code != 0


def test_server_on_the_command_line_goes_to_that_cluster_despite_raftq_manager(
    fleet: TlsFleet,
) -> None:
    """After `raftq dev up --clusters`'s exports ($RAFTQ_MANAGER set), the printed
    `raftq --server <node> cluster status` asks that cluster, not the manager."""
    managers, cluster = fleet.managers, fleet.cluster
    env = {"RAFTQ_TOKEN": managers.token, "RAFTQ_MANAGER": managers.bootstrap,
           "RAFTQ_CA_FILE": managers.client_tls["ca_file"]}  # fmt: skip
    direct = CliRunner().invoke(main, ["--server", cluster.bootstrap, "cluster", "status"], env=env)
    assert direct.exit_code == 0, direct.output
    assert "metadata version" in direct.output
    routed = CliRunner().invoke(main, ["cluster", "status"], env=env)
    assert routed.exit_code != 0 and "not routed" in routed.output


def test_a_redirect_reaches_the_tls_manager_with_the_clients_tls_arguments(
    fleet: TlsFleet,
) -> None:
    """The ManagedClient a redirect builds dials the TLS manager with the
    Client's own TLS arguments: the manager's answer (the queue is mapped
    nowhere) comes back, not a failed TLS handshake (Unavailable)."""
    deadline = time.monotonic() + 30
    with fleet.cluster.client() as client:
        while time.monotonic() < deadline and not client.cluster_status().cluster_name:
            time.sleep(0.2)  # the manager's poller claims the cluster
        assert client.cluster_status().cluster_name == "c1"
        with pytest.raises(errors.NotFound) as nowhere:
            client.send("tls-nowhere", b"x")
    assert "not in cluster 'c1'" in nowhere.value.message
    assert "not mapped by the manager" in nowhere.value.message
