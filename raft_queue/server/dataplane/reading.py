"""Read (replay by offset or by timestamp, as a Kafka fetch) and consumer-group offsets.

Reads are served by the partition leader from its LMDB, outside Raft (with
quorum contact, hazard 5). A Read with ``wait_ms`` at the end of the log
sleeps until an Append is applied (``Wakeups``), not in a polling loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import commands as cmd
from raft_queue.replication.partition import PartitionReplica
from raft_queue.server.api import convert
from raft_queue.server.cluster import Cluster
from raft_queue.server.dataplane import bounds

MAX_READ_MESSAGES = 10_000


class Reader:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.limits = cluster.node.config.limits

    async def read(self, request: Any, forwarded: bool) -> Any:
        q = self.cluster.node.queue_spec(request.queue)
        part = convert.check_range(request.partition, 0, q.spec.partitions - 1, "partition")
        max_n = convert.check_range(
            request.max_messages or 100, 1, MAX_READ_MESSAGES, "max_messages"
        )
        wait_ms = convert.check_range(request.wait_ms, 0, self.limits.max_wait_ms, "wait_ms")
        replica = self.cluster.local_leader(q.name, part, forwarded, reads=True)
        if replica is None:
            return await self.cluster.forward_to_leader(q.name, part, "Read", request)
        offset = request.offset
        if request.HasField("timestamp_ms"):
            offset = offset_for_time(replica, request.timestamp_ms)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        keys = [(q.name, part)]
        while True:
            seen = self.cluster.wakeups.seen(keys)
            res = replica.read(offset, max_n)
            if offset < res.earliest_offset:
                raise errors.OutOfRange(
                    f"offset {offset} is below the earliest retained offset "
                    f"{res.earliest_offset} of partition {part}"
                )
            remaining = deadline - loop.time()
            if res.records or remaining <= 0:
                break
            await self.cluster.wakeups.wait(keys, seen, remaining)
        records = self.cluster.crypto.open_read(q, part, replica, res.records)
        messages = [convert.message_pb(q.name, part, r) for r in records]
        keep = bounds.within_bytes(messages, self.limits.max_receive_bytes)
        next_offset = res.next_offset if res.records else offset
        if keep < len(messages):  # a partial batch: the caller reads on from here
            messages, next_offset = messages[:keep], records[keep].offset
        return queue_pb2.ReadResponse(
            messages=messages,
            next_offset=next_offset,
            earliest_offset=res.earliest_offset,
            latest_offset=res.latest_offset,
        )

    async def commit_offsets(self, request: Any, forwarded: bool) -> dict[int, int]:
        """The stored offset per partition after the commit (never lower than
        before unless ``reset``, as the machine keeps it)."""
        q = self.cluster.node.queue_spec(request.queue)
        if not request.group:
            raise errors.InvalidArgument("group", "a consumer group name is required")
        for part in request.offsets:
            convert.check_range(part, 0, q.spec.partitions - 1, f"offsets[{part}]")
        commits = {
            part: cmd.CommitOffset(request.group, offset, request.reset)
            for part, offset in request.offsets.items()
        }  # built first: a bad group name fails before anything is written

        async def one(part: int) -> tuple[int, int]:
            replica = self.cluster.local_leader(q.name, part, forwarded)
            if replica is not None:
                return part, int(await self.cluster.submit(replica, commits[part]))
            sub = queue_pb2.CommitOffsetsRequest(
                queue=q.name,
                group=request.group,
                offsets={part: request.offsets[part]},
                reset=request.reset,
            )
            resp = await self.cluster.forward_to_leader(q.name, part, "CommitOffsets", sub)
            return part, int(resp.offsets.get(part, request.offsets[part]))

        return dict(await asyncio.gather(*(one(p) for p in commits)))

    async def get_offsets(self, request: Any, forwarded: bool) -> dict[int, int]:
        q = self.cluster.node.queue_spec(request.queue)
        out: dict[int, int] = {}
        local, remote = self.cluster.split_partitions(q.name, q.spec.partitions)
        for part, replica in local:
            if not replica.can_serve_leader_reads():
                raise errors.Unavailable(f"{q.name}[{part}]: leader not yet caught up")
            got = replica.offsets().get(request.group)
            if got is not None:
                out[part] = got
        if not forwarded:
            for address in remote:
                resp = await self.cluster.peers.forward(
                    address, "GetOffsets", request, self.cluster.timeout_s
                )
                out.update(resp.offsets)
        return out


def offset_for_time(replica: PartitionReplica, timestamp_ms: int) -> int:
    """The first retained offset whose record was appended at or after
    ``timestamp_ms`` (the latest offset if none): a binary search, as record
    timestamps never decrease along the log."""
    edges = replica.read(0, 0)
    lo, hi = int(edges.earliest_offset), int(edges.latest_offset)
    while lo < hi:
        mid = (lo + hi) // 2
        got = replica.read(mid, 1).records
        if not got or got[0].timestamp_ms < timestamp_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo
