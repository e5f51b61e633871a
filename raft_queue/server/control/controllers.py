"""Changing the metadata group's voters online (``raftq controller add|remove``).

The metadata records the change first (``StartControllerChange``,
core/metadata_controllers.py), then the metadata leader changes the Raft
membership, one server at a time, and records ``FinishControllerChange``.
Every node runs ``ControllerRole.step`` on its own view:

- the node being **added** opens an empty metadata replica whose peers are
  the current voters; the leader adds it (``addNodeToCluster``), waits until
  it caught up, then finishes. Until its replica has caught up, the node
  keeps polling a voter's copy (metadata_follower.py), so its view never
  goes back.
- the node being **removed** closes its replica as soon as it sees the
  change and does not lead (if it leads, the leader first hands leadership
  to a caught-up voter); the leader then removes it. Closing first matters:
  a removed voter that kept running would time out and start elections with
  ever higher terms, unsettling the group. Until the removal commits, the
  group counts it as a voter that is down.

Each voter keeps ``<data_dir>/controllers.json`` (whether it is a voter,
and the voters it knows): at the next start it decides, instead of the
config's ``controller`` and ``controllers`` (which only bootstrap the
group), whether the node opens a metadata replica and with which peers; the
Raft journal then replays any later change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.replication import membership

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)

ROLE_FILE = "controllers.json"
CHANGE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Role:
    voter: bool
    peers: dict[str, str]  # every voter this node knows: node id -> metadata Raft address


def load_role(config: Any, bootstrap: dict[str, str]) -> Role:
    """This node's last recorded role, else the config's (first start)."""
    path = os.path.join(config.data_dir, ROLE_FILE)
    try:
        with open(path) as f:
            raw = json.load(f)
        return Role(bool(raw["voter"]), {str(k): str(v) for k, v in raw["peers"].items()})
    except FileNotFoundError:
        return Role(bool(config.controller), dict(bootstrap))
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise errors.Internal(f"{path} is unreadable: {exc}") from exc


def save_role(config: Any, role: Role) -> None:
    """Write the role durably (temporary file, fsync, rename, fsync the dir)."""
    os.makedirs(config.data_dir, mode=0o700, exist_ok=True)
    path = os.path.join(config.data_dir, ROLE_FILE)
    tmp = path + ".tmp"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump({"voter": role.voter, "peers": role.peers}, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(config.data_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ControllerRole:
    """Run by every node (``step`` every round of the mover loop)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self._saved: Role | None = None

    async def step(self) -> None:
        node = self.node
        view: meta.MetadataMachine = node.view
        change = view.controller_change()
        md = node.metadata
        if change is not None and change.node_id == node.id:
            if change.action == "add" and md is None:
                await self._join(view, change)
            elif change.action == "remove" and md is not None and not md.is_leader():
                await self._leave()
        elif md is not None and view.controllers() and node.id not in view.controllers():
            await self._leave()  # removed while it was down
        self._remember(view)
        if node.metadata is not None and node.metadata.is_leader() and change is not None:
            await self._drive(change)

    # ---- this node's own replica ------------------------------------------------------
    async def _join(self, view: meta.MetadataMachine, change: meta.ControllerChange) -> None:
        peers = {n: a for n, a in view.controllers().items() if n != self.node.id}
        log.info("joining the metadata group as %s (peers %s)", change.raft_address, peers)
        self._save(Role(True, {**peers, self.node.id: change.raft_address}))
        await self.node.join_metadata(change.raft_address, list(peers.values()))

    async def _leave(self) -> None:
        log.info("leaving the metadata group")
        self._save(Role(False, dict(self.node.view.controllers())))
        await self.node.leave_metadata()

    def _remember(self, view: meta.MetadataMachine) -> None:
        """Keep the voters this node knows on disk while it is one of them."""
        voters = view.controllers()
        if self.node.metadata is None or not voters or self.node.id not in voters:
            return
        self._save(Role(True, voters))

    def _save(self, role: Role) -> None:
        if role != self._saved:
            save_role(self.node.config, role)
            self._saved = role
            self.node.controllers = dict(role.peers)

    # ---- the metadata leader drives the change ------------------------------------------
    async def _drive(self, change: meta.ControllerChange) -> None:
        md = self.node.metadata
        if md is None:  # only the metadata leader drives, and it has a replica
            return
        others = await self._on_driver(lambda: membership.members(md))
        address = change.raft_address
        if change.action == "add":
            if address not in others:
                await _wait(membership.add_member(md, address))
                return
            progress = await self._on_driver(lambda: membership.progress(md, address))
            if not progress.caught_up:
                return
        elif change.node_id == self.node.id:
            await self._hand_over(others)
            return
        elif address in others:
            await _wait(membership.remove_member(md, address))
            return
        log.info("controller change %s done", change)
        await self.node.submit_metadata(meta.FinishControllerChange(change.node_id))

    async def _hand_over(self, others: list[str]) -> None:
        """The leader is the one leaving: pass leadership to a caught-up voter."""
        md = self.node.metadata
        if md is None:
            return

        def pick() -> str | None:
            for address in others:
                if membership.progress(md, address).caught_up:
                    return address
            return None

        target = await self._on_driver(pick)
        if target is not None:
            log.info("handing metadata leadership to %s before leaving", target)
            await self._on_driver(lambda: md.transferLeadership(target))
            await asyncio.sleep(1.0)

    async def _on_driver(self, fn: Any) -> Any:
        return await asyncio.wrap_future(self.node.host.call(fn))


async def _wait(fut: Any) -> None:
    await asyncio.wait_for(asyncio.wrap_future(fut), CHANGE_TIMEOUT_S)


def controllers_pb(node: Node) -> Any:
    """The voters as this node knows them, and the change in flight."""
    leader = node.metadata_leader_id() or ""
    known = node.view.controllers() or dict(node.controllers)
    change = node.view.controller_change()
    return admin_pb2.ControllersResponse(
        controllers=[
            admin_pb2.ControllerInfo(node=n, raft_address=a, leader=n == leader)
            for n, a in sorted(known.items())
        ],
        change=str(change) if change is not None else "",
    )


def check_majority(voters: dict[str, str], alive: set[str], action: str, node_id: str) -> None:
    """Refuse a change that would leave the group without a live majority
    (FailedPrecondition naming ``node``): after it, the voters that are alive
    must outnumber half of all voters, or nothing could be committed."""
    after = set(voters) | {node_id} if action == "add" else set(voters) - {node_id}
    live = len(after & alive)
    if live * 2 <= len(after):
        raise errors.FailedPrecondition(
            f"node: {action} {node_id} would leave {live} of {len(after)} controllers alive, "
            "no majority; bring controllers back first"
        )
