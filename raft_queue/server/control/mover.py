"""The move executor: runs on the metadata leader and drives every replica
move recorded in the metadata (``Move``), one task per partition.

A move of ``(q, p)`` from X to Y (docs/operations.md, "How a move is
executed"): Y's reconciler starts an empty replica as soon as the move is
recorded; the executor waits until Y reports it open, has the partition's
Raft leader add Y, waits until Y is caught up, records ``removing`` (the
point of no return), moves Raft leadership off X if X leads, removes X, and
commits ``FinishMove`` (Y replaces X in place, epoch + 1). A ``cancelling``
move removes Y again and commits ``DropMove``. Every step is re-checked
against the group (``members``) before it is taken, so a new metadata leader
that finds a move half done resumes it from where the group stands.

Losing metadata leadership stops every task; the next leader starts its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.core import planner
from raft_queue.server.control.controllers import ControllerRole
from raft_queue.server.control.members import member_change
from raft_queue.server.control.operations import assignments, start_step

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster

log = logging.getLogger(__name__)

POLL_S = 0.2
RPC_TIMEOUT_S = 15.0


def leader_imbalance(view: meta.MetadataMachine) -> int:
    """Max minus min preferred (first) replicas over alive nodes."""
    alive = [n for n, info in view.nodes().items() if info.state == "alive"]
    counts = dict.fromkeys(alive, 0)
    for a in view.all_assignments():
        if a.replicas and a.replicas[0].node_id in counts:
            counts[a.replicas[0].node_id] += 1
    return max(counts.values()) - min(counts.values()) if counts else 0


class LostLeadership(Exception):
    """This node no longer leads the metadata group: stop, the next leader resumes."""


class Mover:
    def __init__(self, cluster: Cluster, tuning: Any) -> None:
        self.cluster = cluster
        self.tuning = tuning
        self.node = cluster.node
        self.tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        # The last MemberChange "progress" answer per move (match/leader index, bytes).
        self.progress: dict[tuple[str, int], Any] = {}
        self._repair: asyncio.Task[None] | None = None
        self.controllers = ControllerRole(cluster)  # every node: its metadata role

    def leading(self) -> bool:
        md = self.node.metadata
        return md is not None and md.is_leader()

    async def run_forever(self) -> None:
        while True:
            try:
                self.step()
            except Exception:
                log.exception("move executor round failed")
            try:
                await self.controllers.step()
            except Exception as exc:  # retried next round
                log.warning("controller change round failed: %r", exc)
            await asyncio.sleep(POLL_S)

    def step(self) -> None:
        """Start a task for every recorded move without one; stop all when not leading."""
        if not self.leading():
            for task in self.tasks.values():
                task.cancel()
            self.tasks.clear()
            return
        for move in self.node.view.moves():
            running = self.tasks.get(move.key)
            if running is None or running.done():
                self.tasks[move.key] = asyncio.create_task(self._run(move.key))
        if not self.node.view.moves() and (self._repair is None or self._repair.done()):
            self._repair = asyncio.create_task(self.background_step())

    async def background_step(self) -> None:
        await self.repair_step()
        await self.leader_balance_step()

    # ---- automatic leader balance -----------------------------------------------------------
    async def leader_balance_step(self) -> None:
        """When preferred-leader counts of alive nodes differ by more than
        ``cluster.leader_imbalance_max`` (0: off), take the first step of
        ``plan_leaders``; the next round plans again."""
        limit = self.tuning.leader_imbalance_max
        view = self.node.view
        if not limit or leader_imbalance(view) <= limit:
            return
        plan = planner.plan_leaders(view.nodes().values(), assignments(view))
        if plan.steps:
            log.info("leader balance: %s", plan.steps[0])
            try:
                await start_step(self.node, plan.steps[0])
            except errors.QueueError as exc:
                log.warning("leader balance step refused: %s", exc)
                await asyncio.sleep(1.0)

    # ---- automatic repair -----------------------------------------------------------------
    async def repair_step(self) -> None:
        """Start the first step of ``plan_repair`` for the nodes dead longer than
        ``repair_after_s``; the next round (after the move) plans again, so
        repair runs one move at a time. Unplaced replicas are logged."""
        view = self.node.view
        now_ms = int(time.time() * 1000)
        due = planner.nodes_due_for_repair(
            view.nodes().values(), now_ms, int(self.tuning.repair_after_s * 1000)
        )
        if not due:
            return
        plan = planner.plan_repair(due, view.nodes().values(), assignments(view))
        for u in plan.unplaced:
            log.warning("repair: no alive node can take %s/%d from %s", u.queue, u.partition,
                        u.node_id)  # fmt: skip
        if plan.steps:
            log.info("repair of %s: %s", ",".join(due), plan.steps[0])
            try:
                await start_step(self.node, plan.steps[0])
            except errors.QueueError as exc:
                log.warning("repair step refused: %s", exc)
                await asyncio.sleep(1.0)

    async def _run(self, key: tuple[str, int]) -> None:
        started = time.monotonic()
        try:
            await self.drive(key)
            log.info("move of %s/%d done in %.1f s", *key, time.monotonic() - started)
        except (LostLeadership, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("move of %s/%d failed; retrying", *key)
            await asyncio.sleep(1.0)
        finally:
            self.progress.pop(key, None)

    # ---- one move -----------------------------------------------------------------------
    async def drive(self, key: tuple[str, int]) -> None:
        move = self._current(key)
        if move is None:
            return
        to_addr = self._raft_address(move.to.node_id, move.to.raft_port)
        if move.phase == "adding":
            await self._wait_open(move)
            if not await self._add_and_catch_up(move, to_addr):
                move = self._current(key)
        move = self._current(key)
        if move is not None and move.phase == "cancelling":
            await self._leave(move, to_addr, away_to="")
            await self._submit(meta.DropMove(*key))
        elif move is not None and move.phase == "removing":
            from_addr = self._raft_address(move.from_node, self._port_of(move))
            await self._leave(move, from_addr, away_to=to_addr)
            await self._submit(meta.FinishMove(*key))

    def throttle_of(self, move: meta.Move) -> int:
        """The move's catch-up limit in bytes/s: its own, else the cluster's (0: none)."""
        return int(move.throttle_bytes_per_s or self.tuning.move_throttle_bytes_per_s)

    async def _add_and_catch_up(self, move: meta.Move, to_addr: str) -> bool:
        """Add Y and wait until it is caught up, then record ``removing``.
        False if the move was cancelled meanwhile. Every poll renews Y's
        catch-up limit on the partition leader (members.py)."""
        rate = self.throttle_of(move)
        while True:
            if self._cancelled(move):
                return False
            group = await self._members(move)
            if to_addr not in group.members:
                await self._on_leader(move, "add", to_addr, rate)
                continue
            p = await self._on_leader(move, "progress", to_addr, rate)
            if p is None:
                continue
            self.progress[move.key] = p
            if p.caught_up:
                break
            await asyncio.sleep(POLL_S)
        if rate:
            await self._on_leader(move, "progress", to_addr, 0)  # lift it (it expires anyway)
        try:
            await self._submit(meta.SetMovePhase(move.queue, move.partition, "removing"))
        except errors.FailedPrecondition:
            return False  # cancelled in between
        return True

    async def _leave(self, move: meta.Move, address: str, away_to: str) -> None:
        """Remove ``address`` from the group, moving leadership off it first."""
        while True:
            group = await self._members(move)
            if address not in group.members:
                return
            if group.leader == address:
                target = away_to or next(m for m in group.members if m != address)
                await self._on_leader(move, "transfer", target)
                await asyncio.sleep(POLL_S)
                continue
            await self._on_leader(move, "remove", address)

    def _cancelled(self, move: meta.Move) -> bool:
        current = self._current(move.key)
        return current is None or current.phase == "cancelling"

    # ---- talking to the group ------------------------------------------------------------
    async def _wait_open(self, move: meta.Move) -> None:
        """Until Y's node reports the new replica (its reconciler opened it)."""
        while not self._cancelled(move):
            address = self.node.node_address(move.to.node_id)
            try:
                if address is None:
                    raise errors.Unavailable(f"node {move.to.node_id} has no address yet")
                st = await self.cluster.peers.node(address).NodeStatus(
                    admin_pb2.NodeStatusRequest(), timeout=3.0
                )
                if any(r.queue == move.queue and r.partition == move.partition
                       for r in st.replicas):  # fmt: skip
                    return
            except Exception as exc:
                log.debug("waiting for %s: %s", move.to.node_id, exc)
            await asyncio.sleep(POLL_S)

    async def _members(self, move: meta.Move) -> Any:
        """The group as its leader sees it (asks every replica until one leads)."""
        while True:
            for node_id in self._replica_nodes(move):
                try:
                    ans = await self._ask(node_id, move, "members", "")
                except LostLeadership:
                    raise
                except Exception:
                    continue
                if ans.is_leader:
                    return ans
            await asyncio.sleep(POLL_S)

    async def _on_leader(self, move: meta.Move, action: str, address: str, rate: int = 0) -> Any:
        """Run ``action`` on whichever replica accepts it (the leader); None
        after a round where none did (callers re-check the group and retry:
        an add whose answer was lost must not be added twice)."""
        for node_id in self._replica_nodes(move):
            try:
                return await self._ask(node_id, move, action, address, rate)
            except LostLeadership:
                raise
            except Exception as exc:
                log.debug("%s %s on %s: %s", action, address, node_id, exc)
        await asyncio.sleep(POLL_S)
        return None

    async def _ask(
        self, node_id: str, move: meta.Move, action: str, address: str, rate: int = 0
    ) -> Any:
        if not self.leading():
            raise LostLeadership
        req = admin_pb2.MemberChangeRequest(
            queue=move.queue, partition=move.partition, action=action, address=address,
            throttle_bytes_per_s=rate,
        )  # fmt: skip
        if node_id == self.node.id:
            return await member_change(self.node, req)
        node_address = self.node.node_address(node_id)
        if node_address is None:
            raise errors.Unavailable(f"node {node_id} has no address")
        stub = self.cluster.peers.node(node_address)
        return await stub.MemberChange(req, timeout=RPC_TIMEOUT_S)

    async def _submit(self, cmd: Any) -> Any:
        if not self.leading():
            raise LostLeadership
        return await self.node.submit_metadata(cmd)

    # ---- metadata lookups -----------------------------------------------------------------
    def _current(self, key: tuple[str, int]) -> meta.Move | None:
        view: meta.MetadataMachine = self.node.view
        return view.move(*key)

    def _replica_nodes(self, move: meta.Move) -> list[str]:
        for a in self.node.view.assignments(move.queue):
            if a.partition == move.partition:
                return [*a.node_ids, move.to.node_id]
        return [move.to.node_id]

    def _port_of(self, move: meta.Move) -> int:
        for a in self.node.view.assignments(move.queue):
            if a.partition == move.partition:
                for r in a.replicas:
                    if r.node_id == move.from_node:
                        return int(r.raft_port)
        raise errors.Internal(f"{move.from_node} holds no replica of {move.queue}/{move.partition}")

    def _raft_address(self, node_id: str, port: int) -> str:
        node = self.node.view.nodes().get(node_id)
        if node is None:
            raise errors.Internal(f"node {node_id} is not registered")
        return f"{node.raft_host}:{port}"
