"""Receive (leases, long polls) and the receipt calls (Ack, Nack, ChangeVisibility).

Long polls never spin. A Receive that found nothing:

- waits on this node's leader partitions through ``Wakeups`` (woken by the
  apply of an Append, Nack, ... on the driver thread) and sleeps at most
  until the earliest lease deadline or delay of those partitions;
- and, when it came from a client (not forwarded), holds one forwarded
  long-poll Receive open on every other node leading a partition of the
  queue. The first non-empty answer wins; the others are withdrawn, never
  cancelled, and what they still bring is given back (withdrawals.py).

A Receive of a consumer that names itself may find its messages already
leased, by a lingering lease its previous Receive left (lingering.py).

A cancelled Receive never loses messages: a lease that completes after (or
while) its request is cancelled is undone at once (Release: visible again,
receive count and history as before), without waiting for its visibility
timeout. Leases taken by a round that returned more than ``max_messages``
(two nodes answered together) are undone the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2, queue_pb2
from raft_queue.core import commands as cmd
from raft_queue.observability import metrics
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.replication.partition import PartitionReplica
from raft_queue.server.api import convert, receipt_results
from raft_queue.server.cluster import Cluster
from raft_queue.server.dataplane import bounds
from raft_queue.server.dataplane import stands as standing
from raft_queue.server.dataplane.lingering import Linger, Lingering, Stand, is_taken
from raft_queue.server.dataplane.sending import now_ms
from raft_queue.server.dataplane.settling import Settler
from raft_queue.server.dataplane.wakeups import Settling, until_settled
from raft_queue.server.dataplane.withdrawals import POLL_ID_KEY, new_poll_id
from raft_queue.server.peers import RemoteError

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord

# The replicas this request's carried acks went to (ids; the request's own
# task context): its Leases there are proposed without the "nothing
# visible" check, so it lands in the Ack's Raft entry (_lease_local).
_ACKED_ON: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "raftq_acked_on", default=frozenset()
)

# A waiting Receive re-checks which partitions this node leads at least this
# often (leadership moves), even when nothing wakes it. In memory, no Raft
# entry and no store read: a re-check compares the plan (a few dict lookups).
RECHECK_S = 0.25

# A poll's standing lease is withdrawn well before this; the bound only
# stops a request that was never withdrawn from being claimed forever.
STAND_S = 30.0


class Receiver:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.limits = cluster.node.config.limits
        self.lingering = Lingering(self.limits.receive_linger_ms, standing.undo)
        self.settler = Settler(cluster)
        self._tasks: set[asyncio.Future[Any]] = set()  # give-backs and withdrawals under way

    # ---- Receive ---------------------------------------------------------------------
    async def receive(self, request: Any, forwarded: bool) -> list[Any]:
        """The messages leased (the acks a request carries are applied, their
        results dropped: ``receive_acking`` returns them)."""
        messages, _ = await self.receive_acking(request, forwarded)
        return messages

    async def receive_acking(self, request: Any, forwarded: bool) -> tuple[list[Any], Any]:
        """(messages leased, the ReceiptsResponse of the acks ``request``
        carries, failures only; None if it carries none)."""
        q = self.cluster.node.queue_spec(request.queue)
        if q.fenced and not request.ack:  # moving away (manager/moves.py): nothing to lease here
            raise errors.PartitionSealed(
                f"queue {q.name!r} is fenced: it is moving to another cluster; "
                "refresh the manager's mapping"
            )
        if request.max_messages > self.limits.max_receive_messages or (
            request.wait_ms > self.limits.max_wait_ms
        ):
            metrics.count_rejection("limits")  # check_range below raises InvalidArgument
        max_n = convert.check_range(
            request.max_messages or 1, 1, self.limits.max_receive_messages, "max_messages"
        )
        visibility = q.spec.visibility_timeout_ms
        if request.HasField("visibility_ms"):
            visibility = convert.check_range(
                request.visibility_ms, 0, convert.MAX_VISIBILITY_MS, "visibility_ms"
            )
        # 0 in a Lease command means "the queue's default"; an explicit 0 here
        # means "visible again at once", which 1 ms is.
        visibility = max(visibility, 1)
        wait_ms = convert.check_range(request.wait_ms, 0, self.limits.max_wait_ms, "wait_ms")
        args = (q, request.consumer, max_n, visibility)
        arrived = asyncio.get_running_loop().time()
        deadline = arrived + wait_ms / 1000
        key = (q.name, request.consumer)
        _stage("r.in_ack" if request.ack else "r.in")
        carried = self._start_acks(q, request, forwarded)  # before the lease: one entry
        lin = self.lingering.take(key, visibility) if request.consumer else None
        try:
            out = await self._taken_up(q, request.consumer, max_n, lin, visibility)
            taken_up = bool(out)
            if lin is not None:
                _stage("r.linger_got" if out else "r.linger_none")
            if not out:
                out = await self._receive_now(args, deadline, forwarded, lin)
            if lin is not None and lin.stands:
                # The linger's requests that no stand of this poll adopted
                # (its first round answered, it waited for a lease in flight,
                # or their partition was not led here when it stood) kept
                # standing while it ran: what they took and is applied is
                # this Receive's, leased after it arrived. Left to the
                # consumer's next Receive after a long wait here, such a lease
                # reached it with part of its visibility spent (the seeded
                # campaign's double lease). A lease still in flight stays in
                # the linger: the next Receive gives it back unless fresh.
                meanwhile, lin.stands = standing.take_meanwhile(lin.stands)
                out += standing.messages(q, meanwhile, self.cluster.receipts, self.cluster.crypto)
        except BaseException:
            if lin is not None:
                standing.undo(lin.stands)
            if carried is not None:
                carried[1].add_done_callback(_retrieved)
            raise
        # Over max_messages (two nodes answered together) or over the byte
        # cap: the leases of what is not returned are undone (visible again).
        keep = min(max_n, bounds.within_bytes(out, self.limits.max_receive_bytes))
        if len(out) > keep:
            asyncio.ensure_future(self.give_back(q, out[keep:]))
            out = out[:keep]
        if out and request.consumer and (wait_ms or taken_up):
            local, _ = self.cluster.split_receivable(q)
            self.lingering.returned(key, arrived, max_n, visibility, local, lin)
        elif lin is not None:
            standing.undo(lin.stands)
        _stage("r.out" if out else "r.out_empty")
        if carried is None:
            return out, None
        acks, pending = carried
        if request.ack_background:  # sent, not confirmed: the answer does not wait
            self._keep(pending)
            return out, None
        return out, receipt_results.receipts_response(acks, await pending)

    async def _receive_now(
        self, args: tuple[Any, str, int, int], deadline: float, forwarded: bool, lin: Linger | None
    ) -> list[Any]:
        if forwarded:
            return await self._local_until(*args, deadline, lin=lin, local_only=True)
        out = await self._round(*args)
        if out or deadline <= asyncio.get_running_loop().time():
            return out
        return await self._long_poll(*args, deadline, lin)

    async def _taken_up(
        self, q: QueueRecord, consumer: str, max_n: int, lin: Linger | None, visibility: int
    ) -> list[Any]:
        """The messages of ``lin``'s leases (proposed, so a commit away), []
        if none was taken. Those leases were taken at most the linger window
        before this Receive arrived (now): any ending earlier than that
        allows is given back (stands.fresh). Its requests not taken stay in
        ``lin``, standing.

        While this Receive waits for a lease in flight (one commit), its
        consumer has no request standing on that partition: an Append
        proposed meanwhile took nothing along, and its messages waited for
        the next Receive and a Raft round of its own (W4's slowest messages:
        docs/benchmarks.md). So the partition gets a new lingering request
        first; what it takes belongs to this Receive if applied by its
        answer, else to the consumer's next Receive (``take_meanwhile``)."""
        if lin is None or not lin.taken():
            return []
        earliest = now_ms() + visibility - self.lingering.window_ms - standing.FRESH_SLACK_MS
        taken: list[Stand] = []
        still: list[Stand] = []
        for st in lin.stands:  # one look each: the driver thread may claim it any time
            (taken if is_taken(st[2]) else still).append(st)
        lin.stands = still
        running = [st for st in taken if st[2].future.running()]
        try:
            if running:
                lin.stands += self.lingering.stand(
                    consumer, max_n, visibility, [(p, r) for p, r, _ in running]
                )
                await until_settled([s.future for _, _, s in running], standing.TAKEN_WAIT_S)
        except BaseException:
            standing.undo(taken)
            raise
        claimed = standing.fresh(standing.withdraw(taken, keep=True), earliest)
        return standing.messages(q, claimed, self.cluster.receipts, self.cluster.crypto)

    async def _round(self, q: QueueRecord, consumer: str, max_n: int, visibility: int) -> list[Any]:
        """One immediate attempt: local leaders, then the other leader nodes."""
        out: list[Any] = []
        await self._lease_local(q, consumer, max_n, visibility, out)
        _, remote = self.cluster.split_receivable(q)
        for address in remote:
            if len(out) >= max_n:
                break
            out.extend(await self._forward(address, q, consumer, max_n - len(out), visibility, 0))
        return out

    async def _long_poll(
        self,
        q: QueueRecord,
        consumer: str,
        max_n: int,
        visibility: int,
        deadline: float,
        lin: Linger | None = None,
    ) -> list[Any]:
        """Wait on local leaders and on one forwarded long poll per other
        leader node; plan again whenever leadership moves."""
        loop = asyncio.get_running_loop()
        while True:
            plan = self._plan(q)
            local = asyncio.ensure_future(
                self._local_until(q, consumer, max_n, visibility, deadline, plan, lin)
            )
            remote = [
                asyncio.ensure_future(
                    self._forward_until(address, q, consumer, max_n, visibility, deadline)
                )
                for address in plan[1]
            ]
            got = await _first_non_empty(local, remote)
            if local.done() and not local.cancelled() and local.exception() is not None:
                raise local.exception()  # type: ignore[misc]
            if got or loop.time() >= deadline:
                break
        if len(got) > max_n:
            await self.give_back(q, got[max_n:])
        return got[:max_n]

    def _plan(
        self, q: QueueRecord, local_only: bool = False
    ) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """(partitions led here, other leader nodes; () with ``local_only``),
        sorted: equal plans compare equal."""
        local, remote = self.cluster.split_receivable(q)
        return tuple(sorted(p for p, _ in local)), () if local_only else tuple(sorted(remote))

    async def _forward_until(
        self,
        address: str,
        q: QueueRecord,
        consumer: str,
        max_n: int,
        visibility: int,
        deadline: float,
    ) -> list[Any]:
        """A forwarded long poll on ``address`` until it brings messages or
        ``deadline`` (loop time) passes. One that ends early and empty (that
        node's leaders changed, it restarted, the call failed) is sent again,
        at most once per RECHECK_S: dropping it would leave that node's
        partitions unwatched for the rest of the poll (the first-election
        race, docs/internals.md)."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            wait_ms = int((deadline - started) * 1000)
            if wait_ms <= 0:
                return []
            got = await self._forward(address, q, consumer, max_n, visibility, wait_ms)
            if got:
                return got
            await asyncio.sleep(max(0.0, started + RECHECK_S - loop.time()))

    async def _forward(
        self, address: str, q: QueueRecord, consumer: str, max_n: int, visibility: int, wait_ms: int
    ) -> list[Any]:
        sub = queue_pb2.ReceiveRequest(
            queue=q.name,
            max_messages=max_n,
            visibility_ms=visibility,
            consumer=consumer,
            wait_ms=wait_ms,
        )
        timeout_s = self.cluster.timeout_s + wait_ms / 1000
        poll_id = new_poll_id()
        try:
            # Never cancelled (a cancel can lose what it leased): withdrawn,
            # and what it still brings is given back (dataplane/withdrawals.py).
            resp = await self.cluster.peers.forward(
                address,
                "Receive",
                sub,
                timeout_s,
                late=partial(self._unwanted, q),
                withdraw=partial(self._withdraw, address, poll_id),
                extra_metadata=((POLL_ID_KEY, poll_id),),
            )
        except RemoteError:
            return []  # that node's partitions are skipped this time
        return list(resp.messages)

    def _unwanted(self, q: QueueRecord, resp: Any) -> None:
        """A forwarded Receive answered after we stopped waiting for it
        (another partition answered first): its leases are given back, or
        its messages would stay invisible for the whole visibility timeout,
        and the log could not be trimmed past them (acked records stay on disk)."""
        if resp.messages:
            self._background(self.give_back(q, list(resp.messages)))

    def _withdraw(self, address: str, poll_id: str) -> None:
        """Ask ``address`` to end forwarded Receive ``poll_id`` now."""
        request = admin_pb2.WithdrawPollRequest(poll_id=poll_id)
        call = self.cluster.peers.node(address).WithdrawPoll(
            request, timeout=self.cluster.timeout_s
        )
        self._background(_quietly(call))

    def _background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` to its end (asyncio holds tasks weakly: keep them)."""
        self._keep(asyncio.ensure_future(work))

    def _keep(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_retrieved)

    async def _local_until(
        self,
        q: QueueRecord,
        consumer: str,
        max_n: int,
        visibility: int,
        deadline: float,
        plan: tuple[tuple[int, ...], tuple[str, ...]] | None = None,
        lin: Linger | None = None,
        local_only: bool = False,
    ) -> list[Any]:
        """Lease from local leaders; when there is nothing, sleep until woken,
        a local timer is due, or ``deadline`` (loop time). Returns [] early
        if leadership moved away from ``plan`` (the caller plans again);
        with ``local_only`` (a forwarded poll, which serves only this node's
        leaders) only a change of the partitions led here counts: this node
        learning another partition's leader must not end it.
        The first stand takes up ``lin``'s requests (lingering.py)."""
        loop = asyncio.get_running_loop()
        plan = plan or self._plan(q, local_only)
        try_now = True
        while True:
            local, _ = self.cluster.split_receivable(q)
            if self._plan(q, local_only) != plan:
                return []
            keys = [(q.name, part) for part, _ in local]
            seen = self.cluster.wakeups.seen(keys)
            out: list[Any] = []
            if try_now:
                await self._lease_local(q, consumer, max_n, visibility, out)
            remaining = deadline - loop.time()
            if out or remaining <= 0:
                return out
            replicas = [r for _, r in local]
            woken = self.cluster.wakeups.wait(keys, seen, _sleep_s(remaining, replicas))
            stand = (q, local, consumer, max_n, visibility, lin)
            lin = None

            def moved(plan: tuple[tuple[int, ...], tuple[str, ...]] = plan) -> bool:
                return self._plan(q, local_only) != plan

            out, try_now = await self._stand(*stand, woken, _recheck_s(replicas), moved)
            if out:
                return out

    async def _stand(
        self,
        q: QueueRecord,
        local: list[tuple[int, PartitionReplica]],
        consumer: str,
        max_n: int,
        visibility: int,
        lin: Linger | None,
        woken: Coroutine[Any, Any, bool],
        recheck_s: float,
        moved: Callable[[], bool],
    ) -> tuple[list[Any], bool]:
        """Leave a standing lease on every local leader (replication/standing.py)
        and sleep until one rides on a waking entry, ``woken`` ends (a
        wake-up, or the sleep's end) or, checked every ``recheck_s``, the
        partitions led here ``moved``. The check is all a re-check costs: no
        withdraw, stand or read of the store. Returns the messages leased and
        whether to try a Lease of our own next (not when a standing lease was
        just applied and found nothing: that was the try)."""
        stands: list[Stand] = []
        try:
            for p, r in local:
                s = lin.adopt(p, r, STAND_S) if lin is not None else None
                stands.append((p, r, s or r.standing.stand(consumer, max_n, visibility, STAND_S)))
            if lin is not None:  # the rest are on partitions not led here now: undone
                standing.undo(lin.stands)
                lin.stands = []
        except BaseException:  # over a standing-poll bound: nothing left standing
            standing.undo(stands)
            woken.close()
            raise
        _stage("r.stand")
        waker = asyncio.ensure_future(woken)
        watch = Settling([s.future for _, _, s in stands], also=waker)
        try:
            while True:
                await watch.wait(recheck_s, first=True)
                if watch.any or moved():
                    break
            # Taken and in flight (proposed right behind the entry whose apply
            # woke us): its result is a commit away; wait for it rather than
            # give it back and lease again.
            taken = [s.future for _, _, s in stands if s.future.running()]
            if taken:
                await until_settled(taken, standing.TAKEN_WAIT_S)
        except BaseException:  # cancelled: every lease taken for us goes back
            standing.undo(stands)
            raise
        finally:
            waker.cancel()
        claimed = standing.withdraw(stands, keep=True)
        _stage("r.stand_got" if claimed else "r.stand_none")
        return standing.messages(
            q, claimed, self.cluster.receipts, self.cluster.crypto
        ), not claimed

    async def _lease_local(
        self, q: QueueRecord, consumer: str, max_n: int, visibility: int, out: list[Any]
    ) -> None:
        """Append to ``out`` leases from the partitions this node leads. If
        cancelled, what ``out`` holds is given back before re-raising."""
        local, _ = self.cluster.split_receivable(q)
        try:
            for part, replica in local:
                if len(out) >= max_n:
                    return
                # (Not where this Receive's acks went: the check reads LMDB,
                # which lets the driver thread tick between the Ack and the
                # Lease; a Lease in the Ack's entry costs no round anyway.)
                if id(replica) not in _ACKED_ON.get() and self.cluster.nothing_visible(replica):
                    continue
                lease = cmd.Lease(consumer, max_n - len(out), visibility, now_ms())
                self.cluster.node.ensure_configured(replica)
                _stage("r.lease")
                try:
                    res = await _submit_lease(replica, lease, self.cluster.timeout_s)
                except errors.QueueError:
                    continue  # lost leadership or timed out: other partitions still serve
                _stage("r.lease_got" if res.spans else "r.lease_none")
                opener = self.cluster.crypto.opener(q.name, q.uid, part)
                out.extend(
                    convert.lease_messages(q.name, part, q.uid, res, self.cluster.receipts, opener)
                )
        except asyncio.CancelledError:
            if out:
                asyncio.ensure_future(self.give_back(q, list(out)))
            raise

    async def give_back(self, q: QueueRecord, messages: list[Any]) -> None:
        """Undo (Release) leases this node took but will not deliver."""
        receipts = [m.receipt for m in messages]
        request = queue_pb2.NackRequest(queue=q.name, receipts=receipts, release=True)
        with contextlib.suppress(errors.QueueError, RemoteError):
            await self.settle(request, False, cmd.Release, "Nack")

    # ---- receipts ----------------------------------------------------------------------
    async def settle(
        self, request: Any, forwarded: bool, make: Callable[..., Any], method: str
    ) -> list[Any]:
        """Ack, Nack, ChangeVisibility: settling.py."""
        return await self.settler.settle(request, forwarded, make, method)

    def _start_acks(self, q: QueueRecord, request: Any, forwarded: bool) -> Any:
        """The acks ``request`` carries (``ReceiveRequest.ack``): checked, and
        the local ones submitted now, ahead of this Receive's lease (same
        Raft entry, settling.py); (the AckRequest, a task giving one result
        per receipt), or None if it carries none."""
        if not request.ack:
            return None
        acks = queue_pb2.AckRequest(queue=q.name, receipts=request.ack, failures_only=True)
        by_part = self.cluster.receipts.parse(
            q.name, acks.receipts, q.uid, q.spec.partitions, "ack"
        )
        background = request.ack_background
        pending = self.settler.start(
            q, acks, by_part, forwarded, cmd.Ack, "Ack", carried=True, background=background
        )
        if not request.ack_background:
            # The answer waits for the Ack's commit anyway: a Lease in its
            # entry costs no round. Background acks are not waited for, so
            # a Lease that would find nothing must not hold the poll for a
            # round: the poll stands at once (lingering.py, standing.py).
            led = (self.cluster.node.replica(q.name, part) for part in by_part)
            _ACKED_ON.set(frozenset(id(r) for r in led if r is not None))
        return acks, asyncio.ensure_future(pending)


async def _first_non_empty(
    local: asyncio.Future[list[Any]], remote: Sequence[asyncio.Future[list[Any]]]
) -> list[Any]:
    """Messages of the first task to return some (with any others done by
    then); [] once ``local`` ends empty (deadline, or leadership moved).
    Cancels the rest: a cancelled local poll gives its leases back, a
    cancelled forwarded one is withdrawn (``_forward``)."""
    tasks = {local, *remote}
    got: list[Any] = []
    try:
        while tasks and not got and not local.done():
            done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is None:
                    got.extend(task.result())
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return got


async def _submit_lease(replica: PartitionReplica, lease: cmd.Lease, timeout_s: float) -> Any:
    """Submit ``lease``; if the caller is cancelled, the leases it still
    takes are given back (Nack, delay 0) from the driver thread."""
    fut = replica.submit(lease, timeout_s)
    try:
        return await asyncio.shield(asyncio.wrap_future(fut))
    except asyncio.CancelledError:
        fut.add_done_callback(partial(standing.nack_unwanted, replica))
        raise


async def _quietly(call: Any) -> None:
    """Await a best-effort call (a withdrawal): a failure only means the
    poll ends at its own deadline."""
    with contextlib.suppress(grpc.RpcError, errors.QueueError, OSError):
        await call


def _retrieved(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # seen: asyncio must not log it as never retrieved


def _recheck_s(replicas: list[PartitionReplica]) -> float:
    """RECHECK_S, longer while many polls stand here: each re-check costs the
    event loop a timer and a plan comparison, and 2,000 polls re-checking
    every RECHECK_S would be 8,000 a second. Wake-ups (an apply) and due
    timers still end the sleep at once; only noticing a leadership move waits
    longer (at most RECHECK_MAX_S)."""
    standing = max((len(r.standing) for r in replicas), default=0)
    return min(RECHECK_MAX_S, RECHECK_S * max(1, standing // RECHECK_SHARE))


# Polls standing on one partition per RECHECK_S of re-check interval.
RECHECK_SHARE = 128
RECHECK_MAX_S = 5.0


def _sleep_s(remaining: float, replicas: list[PartitionReplica]) -> float:
    """How long a poll that found nothing stands unless woken: until its
    deadline or the first due timer (a lease ends, a delay passes), and at
    most WAKE_MAX_S, well within its standing lease's STAND_S. Leadership is
    re-checked meanwhile (``_recheck_s``, in memory); with nothing due an idle
    poll makes no store read or stand of its own more often than this."""
    return min(remaining, _until_due_s(replicas), WAKE_MAX_S)


# An idle poll stands again (withdraw, a "nothing visible" read, stand) this often.
WAKE_MAX_S = STAND_S / 2


def _until_due_s(replicas: list[PartitionReplica]) -> float:
    """Seconds until the earliest lease deadline or delay of ``replicas``
    (a little after, so the timer is surely due); infinity if none."""
    dues = [d for d in (r.next_due_ms() for r in replicas) if d is not None]
    if not dues:
        return math.inf
    return max(0.0, (min(dues) - now_ms()) / 1000) + 0.002
