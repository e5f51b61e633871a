"""The metadata group's voters, as the metadata state records them (pure).

The config's ``controllers`` list only bootstraps the group; from the first
``raftq controller add/remove`` on, the recorded set is the truth (every
node reads it from the metadata, and each voter keeps a copy in its data
dir to know its peers at the next start). A change is recorded before the
Raft membership change is made (``StartControllerChange``) and finished
after it is committed (``FinishControllerChange``), so a new metadata
leader resumes it, and the node concerned learns it from the log: a joining
node opens its metadata replica, a leaving one closes its own.

Rules (checked on apply, identically on every replica): one change at a
time; ``add`` of a registered, alive node that is not a voter and reported
its metadata Raft port; ``remove`` of a voter, never the last one.
"""

from __future__ import annotations

from raft_queue import errors
from raft_queue.core.metadata_commands import StartControllerChange
from raft_queue.core.metadata_records import CONTROLLER_ACTIONS, ControllerChange, NodeInfo


def start_change(
    voters: dict[str, str],
    change: ControllerChange | None,
    nodes: dict[str, NodeInfo],
    cmd: StartControllerChange,
) -> tuple[dict[str, str], ControllerChange]:
    """The voter set to record (``voters``, or the command's when none is
    recorded yet) and the change; raises (nothing changes) when refused."""
    if cmd.action not in CONTROLLER_ACTIONS:
        raise errors.InvalidArgument("action", f"{cmd.action!r} not one of {CONTROLLER_ACTIONS}")
    if change is not None:
        if (change.action, change.node_id) == (cmd.action, cmd.node_id):
            return voters, change  # a retry of the same request
        raise errors.FailedPrecondition(
            f"node: a controller change ({change}) is in flight; wait for it to finish"
        )
    current = dict(voters) or dict(cmd.voters)
    if not current:
        raise errors.Internal("the metadata group's voters are unknown")
    if cmd.action == "add":
        node = nodes.get(cmd.node_id)
        if node is None:
            raise errors.NotFound(f"node: {cmd.node_id!r} is not registered")
        if cmd.node_id in current:
            raise errors.InvalidArgument("node", f"{cmd.node_id} is already a controller")
        if node.state != "alive":
            raise errors.FailedPrecondition(f"node: {cmd.node_id} is {node.state}, not alive")
        if not cmd.raft_address:
            raise errors.FailedPrecondition(
                f"node: {cmd.node_id} has not reported its metadata_raft_port (upgrade it)"
            )
        if cmd.raft_address in current.values():
            raise errors.InvalidArgument("node", f"{cmd.raft_address} is a voter's address")
        return current, ControllerChange("add", cmd.node_id, cmd.raft_address)
    if cmd.node_id not in current:
        raise errors.InvalidArgument("node", f"{cmd.node_id} is not a controller")
    if len(current) == 1:
        raise errors.FailedPrecondition(
            f"node: {cmd.node_id} is the last controller; add another one first"
        )
    return current, ControllerChange("remove", cmd.node_id, current[cmd.node_id])


def finish_change(
    voters: dict[str, str], change: ControllerChange | None, node_id: str
) -> dict[str, str]:
    """The voters once ``change`` (of ``node_id``) is committed in Raft."""
    if change is None or change.node_id != node_id:
        raise errors.FailedPrecondition(f"node: no controller change of {node_id} in flight")
    out = dict(voters)
    if change.action == "add":
        out[change.node_id] = change.raft_address
    else:
        out.pop(change.node_id, None)
    return out


def check_drop(change: ControllerChange | None, node_id: str) -> None:
    if change is None or change.node_id != node_id:
        raise errors.FailedPrecondition(f"node: no controller change of {node_id} in flight")
    if change.action != "add":
        raise errors.FailedPrecondition(f"node: the removal of {node_id} cannot be dropped")
