"""Raft membership changes of one group: the mechanism under replica moves.

A move of a replica from X to Y is: start Y's replica with the current
members as peers (it has an empty journal), ``add_member(Y)`` on the leader
(pysyncobj appends the change; Y catches up from a snapshot plus the log
tail), wait until ``progress(Y)`` shows it caught up, then
``remove_member(X)``. One change at a time (pysyncobj refuses a second while
one is uncommitted), and the group never drops below its replica count
because the add is committed before the remove starts.

All functions run pysyncobj calls on the host's driver thread and return
futures; a result is the pysyncobj outcome mapped to our errors.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from pysyncobj.syncobj import FAIL_REASON

from raft_queue import errors
from raft_queue.replication.group import ReplicatedGroup
from raft_queue.replication.raft import fail_reason_error


@dataclass(frozen=True, slots=True)
class MemberProgress:
    """Replication progress of one member, as the leader sees it."""

    address: str
    match_index: int  # last log index known to be on the member
    leader_index: int  # the leader's last log index
    connected: bool

    @property
    def caught_up(self) -> bool:
        return self.connected and self.match_index >= self.leader_index


def add_member(group: ReplicatedGroup, address: str) -> Future[None]:
    """Add ``address`` as a voter (on the leader). Resolves once committed."""
    return _change(group, "addNodeToCluster", address)


def remove_member(group: ReplicatedGroup, address: str) -> Future[None]:
    """Remove ``address`` (on the leader). Resolves once committed."""
    return _change(group, "removeNodeFromCluster", address)


def _change(group: ReplicatedGroup, method: str, address: str) -> Future[None]:
    result: Future[None] = Future()

    def done(_res: Any, err: int) -> None:
        if result.done():
            return
        if err == FAIL_REASON.SUCCESS:
            result.set_result(None)
        else:
            result.set_exception(fail_reason_error(err, group.leader_address()))

    def start() -> None:
        if not group.is_leader():
            raise errors.NotLeader(
                f"{group.key}: membership changes start on the leader", group.leader_address()
            )
        getattr(group, method)(address, callback=done)

    def on_started(f: Future[None]) -> None:
        exc = f.exception()
        if exc is not None and not result.done():
            result.set_exception(exc)

    group._host.call(start).add_done_callback(on_started)
    return result


def members(group: ReplicatedGroup) -> list[str]:
    """Current voters other than this replica (driver-thread state; a copy)."""
    return sorted(n.address for n in group.otherNodes)


def progress(group: ReplicatedGroup, address: str) -> MemberProgress:
    """How far ``address`` has caught up (call on the leader)."""
    st = group.getStatus()
    return MemberProgress(
        address=address,
        match_index=int(st.get(f"match_idx_server_{address}", 0)),
        leader_index=int(group._SyncObj__raftLog[-1][1]),
        connected=st.get(f"partner_node_status_server_{address}", 0) == 2,
    )
