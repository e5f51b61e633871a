"""Observability of one node process, wired in one call from server/main.py.

``NodeObservability`` owns the health monitor, the scrape-time collector
and the HTTP listener; ``interceptors()`` gives the gRPC interceptors to
add to the server's list. With ``[metrics] enabled = false`` no
instrumentation runs (no interceptor, no per-group probes, no counters);
health checks and the HTTP listener (if an address is set) still do.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from raft_queue.config import NodeConfig, parse_host_port
from raft_queue.observability import metrics
from raft_queue.observability.collector import NodeCollector
from raft_queue.observability.health import HealthMonitor
from raft_queue.observability.http import Authorize, HttpServer
from raft_queue.observability.status import StatusSource, counters_pb, fill_node_status

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster

log = logging.getLogger(__name__)


class NodeObservability:
    def __init__(self, config: NodeConfig, authorize: Authorize | None = None) -> None:
        self.config = config
        self.authorize = authorize
        metrics.configure(config.metrics.enabled)
        self.health: HealthMonitor | None = None
        self.http: HttpServer | None = None
        self.address = ""  # the HTTP listener's host:port once started
        self._tasks: list[asyncio.Task[Any]] = []

    def interceptors(self) -> list[Any]:
        if not self.config.metrics.enabled:
            return []
        from raft_queue.server.api.metrics import MetricsInterceptor

        return [MetricsInterceptor()]

    async def start(
        self, cluster: Cluster, liveness: Any, admin: Any, servicer: Any, services: tuple[str, str]
    ) -> None:
        """After the gRPC server started: health (sets the gRPC statuses at
        once), the collector, NodeStatus's extras, the HTTP listener."""
        node = cluster.node
        self.health = HealthMonitor(
            node, self.config.health, servicer, services, vouch=cluster.barrier.vouch
        )
        self.health.check()
        await self.health.publish()
        self._tasks.append(asyncio.create_task(self.health.run_forever()))
        health = self.health
        if self.config.metrics.enabled:
            metrics.REGISTRY.register(NodeCollector(cluster, health))
        admin.node_status_extras = lambda resp: fill_node_status(
            resp, health.verdict.ready, self.address
        )
        cluster.local_counters = counters_pb
        if not self.config.metrics.address:
            return
        host, port = parse_host_port("metrics.address", self.config.metrics.address)
        source = StatusSource(cluster, health, liveness, "")
        self.http = HttpServer(
            source.document,
            lambda: health.check().as_dict(),
            self.authorize,
            self.config.metrics.open_probes,
        )
        bound = await self.http.start(host, port)
        self.address = f"{host}:{bound}"
        source.metrics_address = self.address
        log.info("node %s serving metrics and the status page on http://%s/", node.id, self.address)

    async def stop(self) -> None:
        """First thing at shutdown: NOT_SERVING, so balancers drain the node."""
        if self.health is not None:
            await self.health.shutting_down()
        for t in self._tasks:
            t.cancel()

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()
