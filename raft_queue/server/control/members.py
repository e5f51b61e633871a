"""MemberChange: one membership step of a replica move, run on the node
whose replica of the partition leads (node to node, from the mover).

Actions: ``members`` and ``progress`` are answered by any replica (the
mover asks every replica to find the leader); ``add``, ``remove`` and
``transfer`` need the local replica to lead, else NotLeader. ``add`` and
``remove`` answer once the change is committed (membership.py).
``add`` and ``progress`` also (re)set the catch-up limit on the member
(``throttle_bytes_per_s``, 0 lifts it; replication/throttle.py): the mover
renews it with every poll, so it expires soon after the move stops polling
and a new partition leader gets it on the next poll.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.replication import membership, throttle
from raft_queue.replication.partition import PartitionReplica

if TYPE_CHECKING:
    from raft_queue.server.node import Node

CHANGE_TIMEOUT_S = 10.0


async def member_change(node: Node, request: Any) -> Any:
    replica = node.replica(request.queue, request.partition)
    if replica is None:
        raise errors.NotFound(f"{node.id} hosts no replica of {request.queue}/{request.partition}")
    action, address = request.action, request.address
    if action not in ("members", "progress", "add", "remove", "transfer"):
        raise errors.InvalidArgument("action", f"unknown action {action!r}")
    if action != "members":
        if not address:
            raise errors.InvalidArgument("address", "needed for " + action)
        if not replica.is_leader():
            raise errors.NotLeader("not the partition leader", "")
    if action in ("add", "progress"):
        rate = int(request.throttle_bytes_per_s)
        await _on_driver(node, lambda: throttle.set_limit(replica, address, rate))
    if action == "add":
        await _wait(membership.add_member(replica, address))
    elif action == "remove":
        await _wait(membership.remove_member(replica, address))
    elif action == "transfer":
        await _on_driver(node, lambda: replica.transferLeadership(address))
    return await _describe(node, replica, address if action == "progress" else "")


async def _describe(node: Node, replica: PartitionReplica, address: str) -> Any:
    def read() -> Any:
        me = replica.selfNode.address
        out = admin_pb2.MemberChangeResponse(
            is_leader=replica.is_leader(),
            members=sorted([me, *membership.members(replica)]),
            leader=replica.leader_address() or "",
        )
        if address and out.is_leader:
            p = membership.progress(replica, address)
            out.match_index, out.leader_index = p.match_index, p.leader_index
            out.connected, out.caught_up = p.connected, p.caught_up
            limit = throttle.limit_of(replica, address)
            out.bytes_sent = limit.bytes_sent if limit is not None else 0
            out.snapshot_bytes = throttle.snapshot_bytes(replica)
        return out

    return await _on_driver(node, read)


async def _on_driver(node: Node, fn: Any) -> Any:
    """pysyncobj state is the driver thread's: read and change it there."""
    return await asyncio.wrap_future(node.host.call(fn))


async def _wait(fut: Any) -> None:
    await asyncio.wait_for(asyncio.wrap_future(fut), CHANGE_TIMEOUT_S)
