"""Health that tells the truth: gRPC health per service, /healthz and /readyz.

A node is *alive* (``/healthz``) while its event loop answers. It is *ready*
(``/readyz``, gRPC ``SERVING``) while all of these hold:

- ``metadata_quorum``: it reaches the metadata group's quorum. A voter: its
  metadata replica leads with quorum contact, or follows a leader heard from
  within ``health.quorum_timeout_s`` (replication/raft.py ``in_contact``). A
  non-voter: its last metadata poll reached a voter that knew a leader.
- ``metadata_caught_up``: since it started, its metadata view once held
  every change the metadata leader had committed (server/control/
  metadata_barrier.py ``vouch``: the leader's version, asked; a leader:
  its own term's first entry applied). After a restart a view is only the
  snapshot until a leader gives the commit index, and a node that served
  then would not know queues it knew before; so a node is not ready
  before its view caught up with everything it had applied before the
  restart (its journal), and stays ready once it has (later lags are
  covered per request by the same barrier).
- ``disk``: its data directory's file system is above the ``[storage]``
  watermark (server/control/disk.py: the same rule that refuses sends).
- ``not_stopping``: it has not begun shutting down.

``HealthMonitor.run_forever`` re-checks every ``health.check_period_s`` and
sets the gRPC health status of ``""`` and QueueService (ready) and
AdminService (alive and reaching the metadata quorum: admin calls are
metadata reads and writes; disk does not matter to them). So a node cut off
from its peers says NOT_SERVING within ``quorum_timeout_s`` plus a check
period, and SERVING again one check after they return.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raft_queue.config import HealthConfig

if TYPE_CHECKING:
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Verdict:
    metadata_quorum: bool
    disk: bool
    not_stopping: bool
    free_bytes: int
    metadata_caught_up: bool = True

    @property
    def ready(self) -> bool:
        return self.admin_ready and self.disk

    @property
    def admin_ready(self) -> bool:
        return self.metadata_quorum and self.metadata_caught_up and self.not_stopping

    def as_dict(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "checks": {
                "metadata_quorum": self.metadata_quorum,
                "metadata_caught_up": self.metadata_caught_up,
                "disk": self.disk,
                "not_stopping": self.not_stopping,
            },
            "disk_free_bytes": self.free_bytes,
        }


def judge(
    quorum: bool, disk_low: str, stopping: bool, free_bytes: int, caught_up: bool = True
) -> Verdict:
    """Pure: the verdict from what was observed (``disk_low``: why the disk
    is below the watermark, "" when it is not)."""
    return Verdict(quorum, not disk_low, not stopping, free_bytes, caught_up)


def metadata_quorum(node: Node, within_s: float) -> bool:
    """Whether ``node`` reaches the metadata quorum now (see the module doc)."""
    md = node.metadata
    if md is None or node.metadata_joining:
        return bool(node.metadata_leader_hint)
    return bool(md.in_contact(within_s))


def disk_free(path: str) -> int:
    try:
        return int(shutil.disk_usage(path).free)
    except OSError:
        return 0


class HealthMonitor:
    """Owns the node's readiness; the asyncio thread only."""

    def __init__(
        self,
        node: Node,
        config: HealthConfig,
        servicer: Any = None,
        services: tuple[str, str] = ("", ""),
        free: Callable[[str], int] = disk_free,
        disk_low: Callable[[], str] | None = None,
        vouch: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.node = node
        self.config = config
        self.servicer = servicer  # grpc_health's aio HealthServicer, or None
        self.queue_service, self.admin_service = services
        self.free = free
        # Why the disk is below the watermark ("" if not): the node's DiskHealth.
        self.disk_low = disk_low or node.disk.check
        self.stopping = False
        # Raises Unavailable until the metadata view caught up (None: no such check).
        self.vouch = vouch
        self.caught_up = vouch is None
        self.started = time.monotonic()
        self.verdict = judge(False, "", False, 0)  # not ready until checked
        self._published: tuple[bool, bool] | None = None

    def check(self) -> Verdict:
        quorum = metadata_quorum(self.node, self.config.quorum_timeout_s)
        free = self.free(self.node.config.data_dir)
        self.verdict = judge(quorum, self.disk_low(), self.stopping, free, self.caught_up)
        return self.verdict

    async def catch_up(self) -> None:
        """Once, after start: until the metadata view is vouched for (latched)."""
        if self.caught_up or self.vouch is None:
            return
        try:
            await self.vouch()
        except Exception as exc:  # Unavailable: not yet; the next round asks again
            log.debug("metadata not caught up yet: %s", exc)
            return
        self.caught_up = True
        took = time.monotonic() - self.started
        log.info("node %s metadata caught up %.2f s after start", self.node.id, took)

    async def publish(self) -> None:
        """Set the gRPC health statuses if the verdict changed."""
        v = self.verdict
        state = (v.ready, v.admin_ready)
        if state == self._published or self.servicer is None:
            return
        from grpc_health.v1 import health_pb2

        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        for name, ok in (("", v.ready), (self.queue_service, v.ready)):
            await self.servicer.set(name, serving if ok else not_serving)
        await self.servicer.set(self.admin_service, serving if v.admin_ready else not_serving)
        if self._published is not None:
            level = logging.INFO if v.ready else logging.WARNING
            word = "ready" if v.ready else "NOT ready"
            log.log(level, "node %s %s: %s", self.node.id, word, v.as_dict()["checks"])
        self._published = state

    async def run_forever(self) -> None:
        while True:
            try:
                await self.catch_up()
                self.check()
                await self.publish()
            except Exception:  # the next round retries
                log.exception("health check failed")
            await asyncio.sleep(self.config.check_period_s)

    async def shutting_down(self) -> None:
        self.stopping = True
        self.check()
        await self.publish()
