"""MoveWatch: the manager leader drives each queue move between clusters
(state in manager/move_state.py; docs/operations.md "Moving a queue between
clusters").

Every ``WATCH_S`` the leader looks at the active move and runs the step its
phase calls for. Each step is idempotent and ends by committing the next
phase, so a leader that dies mid-step leaves the phase where it was and the
next leader's watch runs the step again:

- ``starting``: create the queue on the target with the source's effective
  config (partitions, ordering, DLQ setting, dedup window, ...: CreateQueue
  is idempotent), fence the source (FenceQueue), commit ``fenced``.
- ``fenced``: wait until every source partition's leader applied the fence
  (ExportPartition says so), make sure the target's copy is empty (a step
  run before, cut short, is dropped: the target's queue is deleted and
  created again; no client reaches it before the cut-over), copy each
  partition's unfinished records in offset order to the same partition of
  the target (body, key, headers, dedup id), translate the consumer-group
  offsets, carry the live dedup entries (``_carry_dedup``: dedup ids of
  records acked before the fence, and Send request ids, with their original
  timestamps), lease the copies of records leased at the source until the
  source deadlines (``carried_leases.carry``), then commit the cut-over
  (FinishMove: the mapping names the target, ``mapping_version`` moves on;
  the carried leases are kept in the move, phase ``leases``, or ``done`` if
  none).
- ``leases``: follow each carried lease at the source and do what its
  consumer did there to the copy (``carried_leases.follow``: ack, nack,
  visibility), committing what was settled (SettleLeases), until none is
  left (the last is at most ``LATE_ACK_MARGIN_MS`` past its deadline): ``done``.
- ``cancelling``: unfence the source, delete the target's copy, commit
  ``cancelled``.

A step that fails (a cluster unreachable, a leader change there) is retried
on the next round; its error is kept for ``raftq queue move Q status``. A
step stops between chunks once this manager is no longer the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client.models import OutgoingMessage
from raft_queue.core.dedup_carry import MOVED_OFFSET
from raft_queue.manager import carried_leases, move_state
from raft_queue.manager.health import cluster_client
from raft_queue.manager.node import ManagerNode
from raft_queue.manager.sealing import TokenSeal

log = logging.getLogger(__name__)

WATCH_S = 0.5  # how often the leader looks at the active move
CALL_TIMEOUT_S = 20.0  # one cluster call, its retries included
EXPORT_CHUNK = 1000  # records per ExportPartition (and dedup entries per ExportDedup)
FENCE_WAIT_S = 20.0  # for every source partition's leader to apply the fence
SKIP_STATES = ("done", "dead")  # acked (or dead-lettered at the source): not copied


class NotLeaderAnyMore(Exception):
    """This manager lost the lead mid-step: stop, the next leader redoes it."""


class MoveWatch:
    def __init__(
        self, node: ManagerNode, seal: TokenSeal, wall_ms: Callable[[], int] | None = None
    ) -> None:
        self._node = node
        self._seal = seal
        self._wall_ms = wall_ms or (lambda: int(time.time() * 1000))
        self.errors: dict[str, str] = {}  # queue -> the last step's failure
        # The lease tail's clients, kept across its 0.5 s rounds (a client per
        # round made two channels and a leader lookup every time).
        self._kept: dict[str, tuple[tuple[Any, ...], Any]] = {}

    async def run_forever(self) -> None:
        while True:
            try:
                if self._node.can_serve():
                    await self.step_once()
            except Exception:
                log.exception("move watch failed")
            await asyncio.sleep(WATCH_S)

    async def step_once(self) -> None:
        for move in self._node.view.active_moves():
            try:
                await self._step(move)
                self.errors.pop(move.queue, None)
            except NotLeaderAnyMore:
                return
            except Exception as exc:  # retried next round
                self.errors[move.queue] = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("move of %s (%s): %s", move.queue, move.phase, exc)

    async def _step(self, move: move_state.QueueMove) -> None:
        loop = asyncio.get_running_loop()
        if move.phase == "starting":
            await loop.run_in_executor(None, self._start, move)
            await self._commit(move_state.SetMovePhase(move.queue, "starting", "fenced", 0))
        elif move.phase == "fenced":
            copied, leases = await loop.run_in_executor(None, self._copy, move)
            await self._commit(move_state.FinishMove(move.queue, copied, 0, tuple(sorted(leases))))
            log.info("queue %s moved %s -> %s: %d copied, %d leases carried", move.queue,
                     move.source, move.target, copied, len(leases))  # fmt: skip
        elif move.phase == "leases":
            settled, changed = await loop.run_in_executor(None, self._follow, move)
            if settled or changed:
                cmd = move_state.SettleLeases(move.queue, tuple(settled), tuple(changed), 0)
                await self._commit(cmd)
        elif move.phase == "cancelling":
            await loop.run_in_executor(None, self._roll_back, move)
            await self._commit(move_state.SetMovePhase(move.queue, "cancelling", "cancelled", 0))

    async def _commit(self, cmd: Any) -> None:
        await self._node.submit(dataclasses.replace(cmd, now_ms=self._wall_ms()))

    # ---- steps (executor threads) ------------------------------------------------------------
    def client(self, cluster: str) -> Any:
        record = self._node.view.cluster(cluster)
        if record is None:
            raise errors.NotFound(f"cluster {cluster!r} is not registered")
        token = self._seal.open(record.token, cluster)
        return cluster_client(record.bootstrap, token, CALL_TIMEOUT_S, retries=4)

    def kept_client(self, cluster: str) -> Any:
        """``client(cluster)``, kept for later rounds while the cluster's
        record (addresses, token) stays the same; never closed by the caller."""
        record = self._node.view.cluster(cluster)
        if record is None:
            raise errors.NotFound(f"cluster {cluster!r} is not registered")
        key = (record.bootstrap, record.token)
        kept = self._kept.get(cluster)
        if kept is not None and kept[0] == key:
            return kept[1]
        if kept is not None:
            kept[1].close()
        client = self.client(cluster)
        self._kept[cluster] = (key, client)
        return client

    def _check_leader(self) -> None:
        if not self._node.is_leader():
            raise NotLeaderAnyMore()

    def _start(self, move: move_state.QueueMove) -> None:
        with self.client(move.source) as src, self.client(move.target) as dst:
            config = _target_config(move, src.get_queue(move.queue).config)
            self._check_leader()
            if config.get("dead_letter_queue"):
                self._ensure_dlq(src, dst, str(config["dead_letter_queue"]))
            dst.create_queue(move.queue, **config)
            src.fence_queue(move.queue, True, move.source_locals)

    def _ensure_dlq(self, src: Any, dst: Any, dlq: str) -> None:
        """The target needs the queue's dead-letter queue (a queue names an
        existing one): created empty with the source DLQ's config if it has
        none of that name. The source DLQ's messages stay at the source."""
        try:
            dst.get_queue(dlq)
            return
        except errors.NotFound:
            pass
        config = dataclasses.asdict(src.get_queue(dlq).config)
        config["dead_letter_queue"] = ""  # a chain of DLQs is not followed
        dst.create_queue(dlq, **config)

    def _roll_back(self, move: move_state.QueueMove) -> None:
        with self.client(move.source) as src, self.client(move.target) as dst:
            self._check_leader()
            with contextlib.suppress(errors.NotFound):  # deleted meanwhile: nothing to unfence
                src.fence_queue(move.queue, False, move.source_locals)
            with contextlib.suppress(errors.NotFound):
                dst.delete_queue(move.queue)

    def _copy(self, move: move_state.QueueMove) -> tuple[int, list[move_state.Carried]]:
        """(records copied, leases carried)."""
        with self.client(move.source) as src, self.client(move.target) as dst:
            config = _target_config(move, src.get_queue(move.queue).config)
            self._fresh_target(dst, move.queue, config)
            pairs = _pairs(move, int(config["partitions"]))
            copied, leases = 0, list[move_state.Carried]()
            for s, t in pairs:
                n, carried = self._copy_partition(src, dst, move.queue, s, t)
                copied, leases = copied + n, leases + carried
            return copied, leases

    def _follow(self, move: move_state.QueueMove) -> Any:
        src, dst = self.kept_client(move.source), self.kept_client(move.target)
        self._check_leader()
        return carried_leases.follow(src, dst, move.queue, move.leases, self._wall_ms())

    def _fresh_target(self, dst: Any, queue: str, config: dict[str, Any]) -> None:
        """An empty target queue: a copy cut short before (this leader's or a
        previous one's) is dropped and the queue created again."""
        try:
            if all(p.latest_offset == 0 for p in dst.partitions(queue)):
                return
            self._check_leader()
            log.info("queue %s: dropping a partial copy on the target", queue)
            dst.delete_queue(queue)
        except errors.NotFound:  # deleted on the target behind our back: create it again
            pass
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while True:
            try:
                dst.create_queue(queue, **config)
                return
            except (errors.AlreadyExists, errors.Unavailable):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _wait_fenced(self, src: Any, queue: str, partition: int) -> Any:
        deadline = time.monotonic() + FENCE_WAIT_S
        while True:
            first = src.export_partition(queue, partition, 0, EXPORT_CHUNK)
            if first.fenced:
                return first
            if time.monotonic() > deadline:
                raise errors.Unavailable(f"{queue}[{partition}] has not applied its fence yet")
            time.sleep(0.1)

    def _copy_partition(
        self, src: Any, dst: Any, queue: str, partition: int, to: int
    ) -> tuple[int, list[move_state.Carried]]:
        """Copy source ``partition``'s unfinished records in offset order to
        the target's partition ``to``; carry the leases still running at the
        source; translate its consumer groups' offsets. (How many were
        copied, the leases carried.)"""
        page = self._wait_fenced(src, queue, partition)
        at: list[tuple[int, int]] = []  # (source offset, target offset) of each copy
        leased: list[Any] = []  # ExportedMessages in flight at the source
        groups = dict(page.group_offsets)
        while True:
            now = self._wall_ms()
            leased += [e for e in page.messages if e.state == "in_flight" and e.at_ms > now]
            wanted = [e for e in page.messages if e.state not in SKIP_STATES]
            if wanted:
                self._check_leader()
                at += self._send(dst, queue, to, wanted, now)
            if not page.messages or page.next_offset >= page.latest_offset:
                break
            page = src.export_partition(queue, partition, page.next_offset, EXPORT_CHUNK)
        self._check_leader()
        carried = carried_leases.carry(dst, queue, partition, to, leased, at)
        self._carry_offsets(dst, queue, to, groups, at)
        self._carry_dedup(src, dst, queue, partition, to, dict(at))
        return len(at), carried

    def _carry_dedup(
        self, src: Any, dst: Any, queue: str, partition: int, to: int, copied: dict[int, int]
    ) -> int:
        """Seed the target's partition ``to`` with source ``partition``'s live
        dedup entries (after the copy: a copied record's own entry, made by
        its copy, is kept). A record entry whose record was copied is left
        out; a request entry's offsets become their copies' (MOVED_OFFSET:
        not copied). How many were planted (0 on a re-run: seeding is
        idempotent)."""
        after, planted = b"", 0
        while True:
            page = src.export_dedup(queue, partition, after, EXPORT_CHUNK)
            entries = [_seed_entry(e, copied) for e in page.entries]
            wanted = [e for e in entries if e is not None]
            if wanted:
                self._check_leader()
                planted += dst.seed_dedup(queue, to, wanted).seeded
            if page.done:
                log.info("queue %s[%d] -> [%d]: %d dedup entries carried", queue, partition,
                         to, planted)  # fmt: skip
                return planted
            after = page.next_key

    def _send(
        self, dst: Any, queue: str, partition: int, exported: list[Any], now_ms: int
    ) -> list[Any]:
        """Copy ``exported`` records (ExportedMessages) in order; a delay
        still pending at the source (a send's or a nack's) goes on for what
        is left of it. (source offset, target offset) of each."""
        out = [_outgoing(e, partition, True, now_ms) for e in exported]
        results = dst.send_batch(queue, out)
        pairs = []
        for e, r in zip(exported, results, strict=True):
            if r.duplicate:  # a dedup id reused after its window at the source: keep both
                r = dst.send_batch(queue, [_outgoing(e, partition, False, now_ms)])[0]
            pairs.append((e.message.offset, r.offset))
        return pairs

    def _carry_offsets(
        self, dst: Any, queue: str, partition: int, groups: dict[str, int], at: list[Any]
    ) -> None:
        """A group's next source offset ``o`` becomes the target offset of the
        first copy of a record at or after ``o`` (the target's end if none)."""
        end = at[-1][1] + 1 if at else 0
        for group, offset in groups.items():
            target = next((t for s, t in at if s >= offset), end)
            dst.commit_offsets(queue, group, {partition: target}, reset=True)


def _target_config(move: move_state.QueueMove, source: Any) -> dict[str, Any]:
    """The target queue's config: the source's, with as many partitions as
    are moved (a partial move)."""
    config = dataclasses.asdict(source)
    if move.partitions:
        config["partitions"] = len(move.partitions)
    return config


def _pairs(move: move_state.QueueMove, count: int) -> list[tuple[int, int]]:
    """(source local partition, target partition) to copy, in order."""
    if move.source_locals:
        return list(zip(move.source_locals, range(len(move.source_locals)), strict=True))
    return [(p, p) for p in range(count)]


def _seed_entry(e: Any, copied: dict[int, int]) -> Any:
    """The target's entry for exported ``e``; None for a record entry whose
    record was copied (its copy made the target's entry)."""
    if e.dedup_id:
        if e.offsets and e.offsets[0] in copied:
            return None
        return queue_pb2.DedupEntry(dedup_id=e.dedup_id, timestamp_ms=e.timestamp_ms)
    offsets = [copied.get(o, MOVED_OFFSET) for o in e.offsets]
    return queue_pb2.DedupEntry(
        request_id=e.request_id, timestamp_ms=e.timestamp_ms, offsets=offsets
    )


def _outgoing(e: Any, partition: int, keep_dedup: bool, now_ms: int) -> OutgoingMessage:
    """The copy of exported record ``e``: its delay is what is left of the
    source's (``at_ms``, source clock), if it is still delayed."""
    m = e.message
    return OutgoingMessage(
        m.body,
        m.key,
        dict(m.headers) or None,
        (m.dedup_id or None) if keep_dedup else None,
        max(0, e.at_ms - now_ms) if e.state in ("delayed", "queued") else 0,
        partition,
    )
