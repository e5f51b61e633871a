"""Periodic leader work: retention, dedup expiry and dead letters.

Every ``INTERVAL_S`` each partition this node leads gets an ``Expire``
(when there can be something to do), which trims the log by retention and
ack compaction, forgets old dedup ids, and lists the records that used up
their ``max_receives``. Those are sent to the queue's dead-letter queue with
a deterministic dedup id ``dlq:{queue uid}:{partition}:{offset}`` and then
forgotten (``ForgetDead``). If the leader dies between the two steps, the
next leader lists them again and re-sends them: the DLQ's dedup window
makes the move idempotent (at-least-once past that window).

A dead message keeps its body, key and headers, and gets ``raftq-dlq-*``
headers: source queue, partition and offset, the original append time, the
receive count and the delivery history (JSON list of ``{"time_ms",
"consumer", "deadline_ms"}``). A queue with ``max_receives`` but no
dead-letter queue drops its dead messages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import commands as cmd
from raft_queue.observability import metrics
from raft_queue.replication.partition import PartitionReplica
from raft_queue.server.cluster import Cluster
from raft_queue.server.dataplane.sending import Sender, now_ms
from raft_queue.server.node import ReplicaKey

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
IDLE_EXPIRE_S = 30.0  # an idle partition still expires dedup ids this often
DLQ_HEADER = "raftq-dlq-"


@dataclass
class _Seen:
    applied: int  # replica.applied_entries after our last Expire
    at: float  # monotonic time of that Expire
    changed: float  # monotonic time we last saw entries other than our Expires
    # applied_entries when stats last showed an empty log without dead records,
    # and its latest offset: until another entry applies, it is still so.
    empty_at: int = -1
    empty_latest: int = 0


class Housekeeper:
    def __init__(self, cluster: Cluster, sender: Sender) -> None:
        self.cluster = cluster
        self.sender = sender
        self._seen: dict[ReplicaKey, _Seen] = {}

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL_S)
            await self.tend_all()

    async def tend_all(self) -> None:
        for key, replica in list(self.cluster.node.replicas.items()):
            if not replica.is_leader():
                self._seen.pop(key, None)
                continue
            try:
                await self.tend(key, replica)
            except errors.QueueError as exc:
                log.info("housekeeping of %s: %s", key.name, exc)
            except Exception:
                log.exception("housekeeping of %s failed", key.name)

    async def tend(self, key: ReplicaKey, replica: PartitionReplica) -> None:
        q = self.cluster.node.view.queue(key.queue)
        if q is None or q.uid != key.uid or not self._due(key, replica, q.spec):
            return
        res = await self.cluster.submit(replica, cmd.Expire(now_ms()))
        if res.dead:
            await self.move_dead(q, key.partition, replica, res.dead)
        seen = self._seen[key]
        seen.applied, seen.at = replica.applied_entries, time.monotonic()

    def _due(self, key: ReplicaKey, replica: PartitionReplica, spec: Any) -> bool:
        """Whether an Expire can change anything: dead records; retained
        records and either new entries since the last Expire or time-based
        retention; else once every IDLE_EXPIRE_S while dedup ids may still
        age out: until a dedup window (plus two rounds) after the last entry
        that was not our own Expire. A partition that never held a record
        has nothing to expire (each Expire is a Raft entry: a journal sync
        on every replica). An empty log is not read again until an entry
        applies (an LMDB read per led partition per second otherwise)."""
        now = time.monotonic()
        seen = self._seen.setdefault(key, _Seen(-1, now, now))
        applied = replica.applied_entries
        if seen.applied != applied:
            seen.changed = now
        latest = seen.empty_latest
        if seen.empty_at != applied:
            stats = replica.stats(now_ms())
            if stats.dead:
                return True
            latest = stats.latest_offset
            if latest > stats.earliest_offset:
                if seen.applied != applied or spec.retention_ms:
                    return True
            else:
                seen.empty_at, seen.empty_latest = applied, latest
        if latest == 0:
            return False
        window_s = spec.dedup_window_ms / 1000 + 2 * IDLE_EXPIRE_S
        return now - seen.at >= IDLE_EXPIRE_S and now - seen.changed < window_s

    async def move_dead(
        self, q: QueueRecord, part: int, replica: PartitionReplica, offsets: tuple[int, ...]
    ) -> None:
        """Send dead records to the DLQ (idempotent), then forget them."""
        dlq_name = q.spec.dead_letter_queue
        if dlq_name:
            dlq = self.cluster.node.view.queue(dlq_name)
            if dlq is None:
                log.warning("%s: dead-letter queue %r does not exist", q.name, dlq_name)
                return
            entries = [
                dead_letter_entry(q, part, replica, off, self.cluster.crypto) for off in offsets
            ]
            found = [e for e in entries if e is not None]
            for entry in found:
                if dlq.spec.ordering == "fifo" and not entry.key:
                    entry.key = entry.dedup_id
            if found:
                await self.sender.send(dlq, found, forwarded=False)
        await self.cluster.submit(replica, cmd.ForgetDead(tuple(offsets)))
        metrics.count_dead_lettered(q.name, part, len(offsets))  # moved or, without a DLQ, dropped


def dead_letter_entry(
    q: QueueRecord, part: int, replica: PartitionReplica, offset: int, crypto: Any = None
) -> Any:
    """The SendEntry moving record ``offset`` to the DLQ (decrypted by
    ``crypto``, server/dataplane/encryption.py, and re-sealed by the DLQ's own key on
    its way in); None if it is gone."""
    page = replica.read(offset, 1).records
    if not page or page[0].offset != offset:
        return None
    if crypto is not None:
        page = crypto.open_read(q, part, replica, page)
    rec = page[0]
    history = replica.history(offset)
    deliveries = history.deliveries if history is not None else ()
    headers = {name: value for name, value in rec.headers if not name.startswith(DLQ_HEADER)}
    extra = {
        "queue": q.name,
        "partition": str(part),
        "offset": str(offset),
        "timestamp-ms": str(rec.timestamp_ms),
        "receive-count": str(history.receive_count if history is not None else 0),
        "history": json.dumps(
            [
                {"time_ms": d.time_ms, "consumer": d.consumer, "deadline_ms": d.deadline_ms}
                for d in deliveries
            ]
        ),
    }
    headers.update({DLQ_HEADER + k: v.encode() for k, v in extra.items()})
    return queue_pb2.SendEntry(
        body=rec.body,
        key=rec.key,
        headers=headers,
        dedup_id=f"dlq:{q.uid}:{part}:{offset}",
    )
