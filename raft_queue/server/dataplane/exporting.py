"""The cluster side of a queue move between clusters (manager/moves.py,
docs/operations.md "Moving a queue between clusters").

- ``fence``: FenceQueue on the metadata leader. From the entry on, each
  partition's leader applies a Configure with ``fenced`` (server/node.py):
  every later Append is refused (PartitionSealed, as a split parent) and
  every later Lease leases nothing, so what the partition still has to
  deliver can only shrink (acks of leases given before the fence, expiry).
  Nodes also refuse a Receive of a fenced queue at once (receiving.py), so a
  ManagedClient refetches the mapping. ``fenced = False`` undoes it (a
  cancelled move).
- ``export``: one partition's retained records from an offset (a page
  bounded as a Receive's, by count and ``limits.max_receive_bytes``), each with its
  delivery state (``queued``, ``in_flight``, ``delayed``, ``blocked``,
  ``dead``, ``done``), plus the consumer-group offsets and whether the
  partition had applied its fence when read (the same read transaction
  order: a fenced answer's records are final, no Append follows). Served by
  the partition's leader, as Read.

- ``export_dedup``: one partition's live dedup entries (record dedup ids and
  request ids, ``dedup.live_entries``), paged by key, on its leader; reads
  only. ``seed_dedup``: plant such entries in the target's partition (one
  ``SeedDedup`` Raft command; seeding twice changes nothing), so a re-send
  of an acked message's dedup id, or a retried Send, is still a duplicate
  after the cut-over.

- ``carry_leases``: lease the target's copies of records leased at the
  source until the source deadlines (one ``CarryLeases`` Raft command,
  core/lease_carry.py; carrying twice changes nothing); ``settle_carried``:
  ack, nack (visible again at ``until_ms``) or change the deadline of such a
  carried lease (epoch 1 on the target) as the source consumer did at the
  source. Export gives each record's receive count, epoch and deadline, so
  the mover knows which leases to carry and can follow their fate.

All are admin calls (core/access.py: methods it does not list need admin).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.core import metadata as meta
from raft_queue.core.commands import Ack, ChangeVisibility, Nack, ReceiptRef, receipt_runs
from raft_queue.core.dedup_carry import MAX_SEED_ENTRIES, DedupEntry, SeedDedup
from raft_queue.core.lease_carry import CARRIED_EPOCH, MAX_CARRIED, CarriedLease, CarryLeases
from raft_queue.core.validate import MAX_DELAY_MS
from raft_queue.server.api import convert
from raft_queue.server.cluster import Cluster
from raft_queue.server.dataplane import bounds

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

MAX_EXPORT_MESSAGES = 10_000
SETTLE_ACTIONS = ("ack", "nack", "visibility")
VISIBILITY_MAX_MS = 12 * 3600 * 1000  # a carried deadline lies within the source's limits
MAX_EXPORT_OFFSETS = 50_000  # request offsets per ExportDedup page (bounds its size)


class Exporter:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    async def fence(self, request: Any) -> Any:
        """Metadata leader: (un)fence every partition of ``request.queue``, or
        only ``request.partitions`` (a partial move)."""
        if not request.queue:
            raise errors.InvalidArgument("queue", "a queue name is required")
        q = self.cluster.node.queue_spec(request.queue)
        parts = tuple(int(p) for p in request.partitions)
        if len(set(parts)) != len(parts):
            raise errors.InvalidArgument("partitions", "names a partition twice")
        cmd = meta.FenceQueue(q.name, q.uid, bool(request.fenced), parts)
        record = await self.cluster.node.submit_metadata(cmd)
        return admin_pb2.FenceQueueResponse(
            fenced=record.fenced,
            partitions=record.spec.partitions,
            fenced_partitions=list(record.fenced_partitions),
        )

    async def export(self, request: Any, forwarded: bool) -> Any:
        q, part = self._partition(request)
        max_n = convert.check_range(
            request.max_messages or 1000, 1, MAX_EXPORT_MESSAGES, "max_messages"
        )
        replica = self.cluster.local_leader(q.name, part, forwarded, reads=True)
        if replica is None:
            return await self.cluster.forward_to_leader(q.name, part, "ExportPartition", request)
        # The fence first: records read after it was seen applied are final.
        fenced = bool(replica.stats(int(time.time() * 1000)).fenced)
        offset = request.offset
        res = replica.read(offset, max_n)
        if offset < res.earliest_offset:  # acked and compacted before offset: start there
            offset = res.earliest_offset
            res = replica.read(offset, max_n)
        records = self.cluster.crypto.open_read(q, part, replica, res.records)
        messages = [convert.message_pb(q.name, part, r) for r in records]
        keep = bounds.within_bytes(messages, self.cluster.node.config.limits.max_receive_bytes)
        next_offset = res.next_offset if res.records else offset
        if keep < len(messages):  # a partial page: the caller exports on from here
            messages, next_offset = messages[:keep], records[keep].offset
        out = []
        for m in messages:
            history = replica.history(m.offset)
            if history is None:
                out.append(queue_pb2.ExportedMessage(message=m, state="done"))
                continue
            out.append(queue_pb2.ExportedMessage(
                message=m, state=history.state, receive_count=history.receive_count,
                epoch=history.epoch, at_ms=history.at_ms,
            ))  # fmt: skip
        return queue_pb2.ExportPartitionResponse(
            messages=out,
            next_offset=next_offset,
            latest_offset=res.latest_offset,
            fenced=fenced,
            group_offsets=replica.offsets(),
        )

    async def export_dedup(self, request: Any, forwarded: bool) -> Any:
        q, part = self._partition(request)
        max_n = convert.check_range(request.max_entries or 1000, 1, MAX_SEED_ENTRIES, "max_entries")
        replica = self.cluster.local_leader(q.name, part, forwarded, reads=True)
        if replica is None:
            return await self.cluster.forward_to_leader(q.name, part, "ExportDedup", request)
        now = int(time.time() * 1000)
        fenced = bool(replica.stats(now).fenced)  # first: a fenced answer's entries are final
        page = replica.dedup_entries(bytes(request.after), max_n, MAX_EXPORT_OFFSETS, now)
        return queue_pb2.ExportDedupResponse(
            entries=[_entry_pb(e) for e in page.entries],
            next_key=page.next_key,
            done=page.done,
            fenced=fenced,
        )

    async def seed_dedup(self, request: Any, forwarded: bool) -> Any:
        q, part = self._partition(request)
        entries = tuple(
            DedupEntry(e.dedup_id, e.request_id, e.timestamp_ms, tuple(e.offsets))
            for e in request.entries
        )
        command = SeedDedup(entries, int(time.time() * 1000))  # InvalidArgument names the field
        return await self._command(
            q, part, forwarded, "SeedDedup", request, command,
            lambda seeded: queue_pb2.SeedDedupResponse(seeded=int(seeded)),
        )  # fmt: skip

    async def carry_leases(self, request: Any, forwarded: bool) -> Any:
        q, part = self._partition(request)
        leases = tuple(
            CarriedLease(x.offset, x.deadline_ms, x.receive_count) for x in request.leases
        )
        command = CarryLeases(leases, int(time.time() * 1000))  # InvalidArgument names the field
        return await self._command(
            q, part, forwarded, "CarryLeases", request, command,
            lambda carried: queue_pb2.CarryLeasesResponse(carried=int(carried)),
        )  # fmt: skip

    async def settle_carried(self, request: Any, forwarded: bool) -> Any:
        q, part = self._partition(request)
        if not 0 < len(request.offsets) <= MAX_CARRIED:
            raise errors.InvalidArgument("offsets", f"1..{MAX_CARRIED} offsets")
        if request.action not in SETTLE_ACTIONS:
            raise errors.InvalidArgument("action", f"must be one of {SETTLE_ACTIONS}")
        now = int(time.time() * 1000)
        refs = receipt_runs(tuple(ReceiptRef(int(o), CARRIED_EPOCH) for o in request.offsets))
        wait = max(0, request.until_ms - now)
        command: Any = Ack(refs, now)
        if request.action == "nack":
            command = Nack(refs, min(wait, MAX_DELAY_MS), now)
        elif request.action == "visibility":
            command = ChangeVisibility(refs, min(wait, VISIBILITY_MAX_MS), now)
        return await self._command(
            q, part, forwarded, "SettleCarried", request, command,
            lambda result: queue_pb2.SettleCarriedResponse(outcomes=list(result.outcomes)),
        )  # fmt: skip

    def _partition(self, request: Any) -> tuple[QueueRecord, int]:
        """The queue and the checked partition a request names."""
        q = self.cluster.node.queue_spec(request.queue)
        return q, convert.check_range(request.partition, 0, q.spec.partitions - 1, "partition")

    async def _command(
        self,
        q: QueueRecord,
        part: int,
        forwarded: bool,
        method: str,
        request: Any,
        command: Any,
        answer: Callable[[Any], Any],
    ) -> Any:
        """Commit ``command`` on the partition's leader here and answer its
        result, or forward ``request`` to the leader and pass its answer on."""
        replica = self.cluster.local_leader(q.name, part, forwarded)
        if replica is None:
            return await self.cluster.forward_to_leader(q.name, part, method, request)
        return answer(await self.cluster.submit(replica, command))


def _entry_pb(e: DedupEntry) -> Any:
    return queue_pb2.DedupEntry(
        dedup_id=e.dedup_id, request_id=e.request_id, timestamp_ms=e.timestamp_ms,
        offsets=e.offsets,
    )  # fmt: skip
