"""Quotas where requests enter (the API door, after authentication), and
AdminService's quota calls (``raftq quota``).

``QuotaGate.check`` runs for every Send a node takes from a client (a Send
forwarded by another node was checked there): it charges the principal's
bucket and its bucket for the queue, if either quota exists, and raises
OverQuota (RESOURCE_EXHAUSTED, ``retry-after-ms``) before anything is
proposed. Per-node share: a message costs ``k`` tokens, ``k`` the number of
distinct preferred leaders of the queue's partitions (core/quotas.py).

Buckets live in this process only: a restarted node starts with full
buckets (one burst more, once).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.core import quotas as q

if TYPE_CHECKING:
    from raft_queue.server.node import Node


class QuotaGate:
    def __init__(self, view: Callable[[], Any], clock: Callable[[], float] = time.monotonic):
        self._view = view
        self._clock = clock
        self._version = -1
        self._limiters: dict[tuple[str, str], q.Limiter] = {}
        self._shares: dict[str, int] = {}

    def _refresh(self, view: Any) -> None:
        """New view: keep the buckets of unchanged quotas, drop the rest."""
        old = self._limiters
        self._limiters = {}
        for quota in view.quotas():
            kept = old.get(quota.key)
            self._limiters[quota.key] = kept if kept and kept.quota == quota else q.Limiter(quota)
        self._shares = {}
        self._version = view.version

    def _share(self, view: Any, queue: str) -> int:
        k = self._shares.get(queue)
        if k is None:
            leaders = {a.replicas[0].node_id for a in view.assignments(queue) if a.replicas}
            k = self._shares[queue] = max(1, len(leaders))
        return k

    def check(self, principal: str, queue: str, messages: int, nbytes: int) -> None:
        """Charge one request, or raise OverQuota and charge nothing."""
        view = self._view()
        if view.version != self._version:
            self._refresh(view)
        if not self._limiters:
            return
        found = [lim for key in ((principal, ""), (principal, queue))
                 if (lim := self._limiters.get(key)) is not None]  # fmt: skip
        if not found:
            return
        k = self._share(view, queue)
        wait_s = q.admit(found, messages * k, nbytes * k, self._clock())
        if wait_s > 0:
            ms = max(1, math.ceil(wait_s * 1000))
            raise errors.OverQuota(
                f"over quota for principal {principal!r} on queue {queue!r}; retry after {ms} ms",
                ms,
            )


def quota_pb(x: q.Quota) -> Any:
    return admin_pb2.QuotaInfo(principal=x.principal, queue=x.queue,
                               messages_per_s=x.messages_per_s, bytes_per_s=x.bytes_per_s,
                               burst_s=x.burst_s)  # fmt: skip


class Quotas:
    """AdminService's SetQuota / RemoveQuota (metadata leader) and ListQuotas."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def _require_leader(self) -> None:
        md = self.node.metadata
        if md is None or not md.is_leader():
            raise errors.NotLeader("not the metadata leader", self.node.metadata_leader_address())

    async def set(self, req: Any) -> Any:
        self._require_leader()
        quota = q.check_quota(q.Quota(req.principal, req.queue, req.messages_per_s,
                                      req.bytes_per_s, req.burst_s or 1.0))  # fmt: skip
        cmd = meta.SetQuota(quota.principal, quota.queue, quota.messages_per_s,
                            quota.bytes_per_s, quota.burst_s)  # fmt: skip
        return quota_pb(await self.node.submit_metadata(cmd))

    async def remove(self, req: Any) -> Any:
        self._require_leader()
        return quota_pb(await self.node.submit_metadata(meta.RemoveQuota(req.principal, req.queue)))

    def list(self, req: Any) -> Any:
        # Served by the metadata leader, as set/remove are: a list right after a
        # change (another process, another node) sees it.
        self._require_leader()
        found = [
            x for x in self.node.view.quotas() if not req.principal or x.principal == req.principal
        ]
        return admin_pb2.ListQuotasResponse(quotas=[quota_pb(x) for x in found])
