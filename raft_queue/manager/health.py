"""Health and load of each cluster, as the manager leader sees them.

Every ``poll_period_s`` the leader asks each registered cluster for its
ClusterStatus (AdminService, with that cluster's admin token) and judges it
(``judge``, pure):

- healthy: a node answered, the cluster's metadata group has a leader, every
  node is alive (or draining) and answered, no replica stopped on a failure;
- degraded: a node answered but one of the above does not hold, or no node
  answered for less than ``down_after_s`` (one lost poll is not an outage);
- down: no node answered for ``down_after_s``.

Load is the number of partition replicas the cluster hosts per node (from
the same ClusterStatus; the cluster's /metrics are not read yet). A changed
judgement is committed (ReportHealth); an unchanged one writes nothing, so an
idle manager's log does not grow. Only the leader polls: a new leader starts
from the recorded health.

The same poll keeps each cluster's record of its manager current (the claim,
``SetManagedBy``: the cluster's name here and this manager group's gRPC
addresses), which its nodes use to redirect a request for a queue they do
not hold (server/control/redirects.py). It is set whenever the cluster's
ClusterStatus says otherwise, so it needs no step at ``clusters add`` and
survives a cluster's restore and the manager group's re-addressing;
``release`` clears it when the cluster is removed (best effort).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from raft_queue.client import Client
from raft_queue.client.models import ClusterStatus
from raft_queue.config import TlsConfig
from raft_queue.manager import state
from raft_queue.manager.config import HealthPolling
from raft_queue.manager.heat import HeatMeter, totals
from raft_queue.manager.node import ManagerNode
from raft_queue.manager.sealing import TokenSeal

log = logging.getLogger(__name__)

Judgement = tuple[str, int, str]  # (health, load, reason)


def judge(
    status: ClusterStatus | None, error: str, silent_s: float, down_after_s: float
) -> Judgement | None:
    """The health of one cluster from one poll; None = keep the recorded one
    (the poll failed, but not for long enough to say anything)."""
    if status is None:
        if silent_s >= down_after_s:
            return ("down", 0, f"no node answered for {silent_s:.1f} s: {error}"[:200])
        return None
    nodes = [n for n in status.nodes if n.state != "removed"]
    load = len(status.replicas) // max(1, len(nodes))
    problems = []
    if not status.metadata_leader:
        problems.append("metadata group has no leader")
    sick = sorted(n.id for n in nodes if n.state not in ("alive", "draining"))
    if sick:
        problems.append("nodes not alive: " + ",".join(sick))
    if status.unreachable:
        problems.append("unreachable: " + ",".join(sorted(status.unreachable)))
    failed = sorted({r.node for r in status.replicas if r.role == "failed"})
    if failed:
        problems.append("failed replicas on: " + ",".join(failed))
    if problems:
        return ("degraded", load, "; ".join(problems)[:200])
    return ("healthy", load, "")


class HealthPoller:
    def __init__(
        self,
        node: ManagerNode,
        seal: TokenSeal,
        settings: HealthPolling,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._node = node
        self._seal = seal
        self._settings = settings
        self._clock = clock
        self._wall_ms = wall_ms
        self._clients: dict[str, tuple[tuple[str, ...], str, Client]] = {}
        self._last_ok: dict[str, float] = {}
        self.meter = HeatMeter()  # message rates per cluster and queue (leader memory only)

    async def run_forever(self) -> None:
        while True:
            started = self._clock()
            try:
                if self._node.can_serve():
                    await self.poll_once()
            except Exception:
                log.exception("health poll failed")
            delay = self._settings.poll_period_s - (self._clock() - started)
            await asyncio.sleep(max(0.05, delay))

    async def poll_once(self) -> None:
        clusters = list(self._node.view.clusters().values())
        for gone in set(self.meter.heat) - {c.name for c in clusters}:
            self.meter.forget(gone)
        await asyncio.gather(*(self._poll(c) for c in clusters))

    def heat_per_node(self, cluster: str) -> float | None:
        heat = self.meter.heat.get(cluster)
        return None if heat is None else round(heat.per_node, 1)

    async def _poll(self, record: state.ClusterRecord) -> None:
        loop = asyncio.get_running_loop()
        now = self._clock()
        last_ok = self._last_ok.setdefault(record.name, now)
        try:
            client = self._client(record)
            status = await loop.run_in_executor(None, _status_with_counters, client)
            error = ""
            self._last_ok[record.name] = self._clock()
            nodes = sum(1 for n in status.nodes if n.state != "removed")
            self.meter.sample(record.name, self._clock(), nodes, totals(status.counters))
        except Exception as exc:  # any failure to hear from it counts as silence
            status, error = None, f"{type(exc).__name__}: {exc}"
        if status is not None:
            await self._claim(record, client, status)
        verdict = judge(status, error, self._clock() - last_ok, self._settings.down_after_s)
        if verdict is None or verdict == (record.health, record.load, record.reason):
            return
        health, load, reason = verdict
        if health != record.health:
            log.info("cluster %s: %s -> %s %s", record.name, record.health, health, reason)
        cmd = state.ReportHealth(record.name, health, load, reason, self._wall_ms())
        await self._node.submit(cmd)

    async def _claim(self, record: state.ClusterRecord, client: Client, status: Any) -> None:
        """Tell the cluster it is ``record.name`` under this manager group when
        its ClusterStatus says otherwise; a failure waits for the next poll."""
        managers = manager_addresses(self._node.config)
        if (status.cluster_name, tuple(status.managers)) == (record.name, managers):
            return
        loop = asyncio.get_running_loop()
        try:
            if self._node.view.cluster(record.name) is None:
                return  # removed meanwhile
            await loop.run_in_executor(None, client.set_managed_by, record.name, managers)
            log.info("cluster %s: managed by %s (was %r)", record.name, managers,
                     status.cluster_name)  # fmt: skip
            if self._node.view.cluster(record.name) is None:  # removed while we set it
                await loop.run_in_executor(None, client.set_managed_by, "", ())
        except Exception as exc:
            log.warning("cluster %s: could not record its manager: %s", record.name, exc)

    def _client(self, record: state.ClusterRecord) -> Client:
        cached = self._clients.get(record.name)
        if cached is not None and cached[:2] == (record.bootstrap, record.token):
            return cached[2]
        if cached is not None:
            cached[2].close()
        token = self._seal.open(record.token, record.name)
        client = cluster_client(record.bootstrap, token, self._settings.call_timeout_s)
        self._clients[record.name] = (record.bootstrap, record.token, client)
        return client

    def close(self) -> None:
        for _, _, client in self._clients.values():
            client.close()
        self._clients.clear()


def manager_addresses(config: Any) -> tuple[str, ...]:
    """This manager group's gRPC addresses (``addresses``, in id order; this
    manager's own when it runs alone): what a cluster's nodes name in a redirect."""
    table = config.peer_table("addresses")
    table.setdefault(config.manager_id, config.address)
    return tuple(table[nid] for nid in sorted(table))


async def release(record: state.ClusterRecord | None, seal: TokenSeal, timeout_s: float) -> None:
    """Clear a removed cluster's record of its manager (best effort: a cluster
    that does not answer keeps it, and its nodes keep redirecting to a manager
    that no longer maps it; the SDK then ends in NotFound)."""
    if record is None:
        return

    def clear() -> None:
        token = seal.open(record.token, record.name)
        with cluster_client(record.bootstrap, token, timeout_s) as client:  # follows NotLeader
            client.set_managed_by("", ())

    try:
        await asyncio.get_running_loop().run_in_executor(None, clear)
    except Exception as exc:
        log.warning("cluster %s removed; could not clear its manager record: %s", record.name, exc)


# How this manager process dials its clusters (Client's TLS keyword arguments);
# set once at start by ``dial_clusters_with`` from the manager's [tls], so every
# call to a cluster (health polls, creates, moves) uses the same rule.
_CLUSTER_TLS: dict[str, Any] = {}


def dial_clusters_with(tls: TlsConfig) -> None:
    """Dial clusters over TLS when the manager's own [tls] is on: the fleet's
    CA (``ca_file``) checks the clusters' nodes, and the manager presents its
    certificate to clusters that require one (``require_client_cert``)."""
    _CLUSTER_TLS.clear()
    if not tls.enabled:
        return
    _CLUSTER_TLS.update(tls=True, ca_file=tls.ca_file or None)
    if tls.require_client_cert:
        _CLUSTER_TLS.update(cert_file=tls.cert_file, key_file=tls.key_file)


def _status_with_counters(client: Client) -> ClusterStatus:
    return client.cluster_status(include_counters=True)


def cluster_client(bootstrap: tuple[str, ...], token: str, timeout_s: float, **kw: Any) -> Client:
    """An SDK client of one cluster, as the manager calls it (its admin token)."""
    return Client(
        list(bootstrap),
        timeout_s=timeout_s,
        retries=kw.pop("retries", 2),
        token=token,
        follow_redirects=False,  # the manager asks a cluster about itself, never onward
        **{**_CLUSTER_TLS, **kw},
    )
