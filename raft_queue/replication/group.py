"""A replicated state machine on a SafeSyncObj, with group commit and bounded waits.

``submit(cmd)`` (any thread) queues a command; on the driver thread, before
each tick, every queued command of the group is encoded into ONE Raft entry
(a batch), so concurrent requests share one journal write, one msync and one
round trip. Every waiter gets a result, an error, or OutcomeUnknown when its
deadline passes (hazard 4: no wait without a bound).

Subclasses provide the state machine: ``encode_batch``, ``apply_bytes``,
``split_results``, and the snapshot hooks; optionally ``predict``.

Durability levels: ``submit(cmd, level=mode)`` resolves to ``(result,
level reached)`` instead of the bare result. With ``level="leader"`` it
resolves to ``(result, "leader")`` as soon as the leader proposes the entry,
if the subclass can ``predict`` the result (the group must have nothing in
flight, so the prediction runs on exactly the state the entry will be
applied to); otherwise to ``(result, "quorum")`` once committed and applied.
An early-acked entry can still be lost if the leader fails before
replicating it: that is what "leader" durability means (as Kafka's acks=1).
The level is put on the result by the driver thread, in the one future the
caller waits on (no second future to translate it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from pysyncobj.syncobj import _RAFT_STATE, FAIL_REASON

from raft_queue import errors
from raft_queue.observability import metrics
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.replication import snapshot
from raft_queue.replication.diskfiles import drop_page_cache
from raft_queue.replication.host import RaftHost
from raft_queue.replication.journal import SyncJob
from raft_queue.replication.raft import ProxiedNode, SafeSyncObj, fail_reason_error

log = logging.getLogger(__name__)

# One Raft entry carries at most this many submitted commands, and at most
# this many bytes unless a single command is larger (a Send is bounded by
# Limits.max_request_bytes): big entries cost an encoding and a seal per
# follower in one piece, and every other group on the node waits meanwhile.
MAX_COMMANDS_PER_ENTRY = 512
MAX_ENTRY_BYTES = 4 << 20  # raft.append_entries_batch_bytes sets max_entry_bytes
# Commands submitted and not yet proposed (raft.commands_queue_size sets
# max_pending): one more is refused at once with ResourceExhausted.
MAX_PENDING = 100_000


class Waiter(Protocol):
    """What the driver resolves for a submitted command: a concurrent Future
    (``submit``) or a LoopWaiter (``submit_awaitable``)."""

    def done(self) -> bool: ...

    def set_result(self, result: Any) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


class LoopWaiter:
    """A command's waiter for a caller on an asyncio loop: resolving it settles
    the loop's own future with one ``call_soon_threadsafe``, without a
    concurrent Future (its lock, condition and callbacks) and the
    ``asyncio.wrap_future`` chain on top (a thread's hand-off to the loop cost
    97-114 us of CPU that way, 56-65 us this way: docs/benchmarks.md).

    Resolved by one thread at a time: the caller's before the command is
    queued, the driver's after. The first result counts, as
    ``_resolve``/``_fail`` expect; a future its caller cancelled stays so."""

    __slots__ = ("_loop", "_set", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._set = False
        self.future: asyncio.Future[Any] = loop.create_future()

    def done(self) -> bool:
        return self._set

    def set_result(self, result: Any) -> None:
        self._settle(result, None)

    def set_exception(self, exception: BaseException) -> None:
        self._settle(None, exception)

    def _settle(self, result: Any, exc: BaseException | None) -> None:
        if self._set:
            return
        self._set = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(_settle_future, self.future, result, exc)


def _settle_future(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():  # cancelled by its caller
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


# A submitted command waiting to be proposed: (command, its waiter, deadline
# on the monotonic clock, durability level to report: "" for the bare result).
Pending = tuple[Any, Waiter, float, str]


class ReplicaFailed(Exception):
    """Raised out of pysyncobj's apply loop by a replica that failed (fail-stop):
    the entry is not counted as applied, and nothing after it is applied."""


class ReplicatedGroup(SafeSyncObj):
    """Fail-stop: an apply that raises anything but a deterministic command
    error (``DETERMINISTIC``: every replica computes it the same way from the
    same entry, so it is the entry's result) or a failed journal sync stops
    this replica for good (``fail_stop``): it closes its Raft transport and
    journal (no acks, no votes, no leadership), fails every waiter, answers
    no reads, and is reported ``failed`` with the reason (``status``). It never
    skips an entry: a restart re-reads journal and store from disk (the page
    cache of its files is dropped first, ``drop_page_cache``: after a failed
    fsync the cached pages may be ones the disk never got)."""

    # Errors a command itself causes: the same on every replica.
    # PartitionSealed: an Append reaching a split partition (core/placement_keys.py).
    DETERMINISTIC: tuple[type[BaseException], ...] = (
        errors.InvalidArgument,
        errors.PartitionSealed,
    )
    max_pending = MAX_PENDING
    max_entry_bytes = MAX_ENTRY_BYTES

    def __init__(
        self,
        key: str,
        host: RaftHost,
        self_address: str,
        peers: Sequence[str],
        conf: Any,
        dial: Callable[[str], str | None] = lambda a: None,
        fsync: bool = True,
        lease_quorum_s: float = 1.0,
        link_key: bytes | None = None,
    ) -> None:
        self.key = key
        self._host = host
        self._lock = threading.Lock()
        self._pending: list[Pending] = []
        # Held commands (``submit(hold_s=...)``) wait in _pending for the
        # next entry another command makes, until _hold_due at the latest;
        # _plain counts the pending commands that are not held.
        self._plain = 0
        self._hold_due = 0.0
        self._inflight: dict[int, tuple[list[Waiter], float]] = {}
        self._seq = 0
        self.lease_quorum_s = lease_quorum_s
        self._dial = dial
        self.failed = ""  # the reason, once this replica stopped (fail-stop)
        self.on_failed: Callable[[str, str], None] | None = None  # (key, reason), driver thread
        self.snapshot_failures = 0  # snapshots that failed since open (status)
        if conf.journalFile:
            drop_page_cache(os.path.dirname(conf.journalFile))
        if conf.serializer is not None:
            conf.serializer = self._guard_snapshot(conf.serializer)
        # Every node pysyncobj creates (peers, membership changes, snapshots)
        # dials through the same mapping (fault-injection proxies in tests).
        super().__init__(
            self_address,
            list(peers),
            conf,
            host.poller,
            fsync=fsync,
            on_activity=lambda: host.mark_active(key),
            on_flush=lambda: host.mark_flush(key),
            node_factory=lambda addr: ProxiedNode(addr, dial(addr)),
            link_key=link_key,
        )
        self._SyncObj__raftLog.on_failure = lambda: host.mark_active(key)

    # ---- the state machine (subclasses) ------------------------------------------
    def encode_batch(self, commands: list[Any]) -> bytes:
        raise NotImplementedError

    def split_results(self, result: Any, count: int) -> list[Any]:
        raise NotImplementedError

    def apply_bytes(self, index: int, data: bytes) -> Any:
        raise NotImplementedError

    def riders(self, pending: list[Pending]) -> list[Pending]:
        """Commands to propose in the same entries as ``pending`` (driver
        thread, leader only, just before proposing): e.g. the leases of long
        polls waiting for what ``pending`` will make visible. Default: none."""
        return []

    def predict(self, data: bytes) -> Any:
        """The result applying ``data`` now would give, without keeping its
        effects (driver thread); None if it cannot tell."""
        return None

    def apply_regular(self, data: bytes) -> Any:
        """A committed regular entry (raft.py; entries.py encodes it)."""
        index = self.raftLastApplied + 1
        if self.failed:
            raise ReplicaFailed(self.failed)
        try:
            return self.apply_bytes(index, data)
        except self.DETERMINISTIC as exc:
            return exc
        except Exception as exc:  # storage error or bug: stop, never skip the entry
            log.exception("apply of entry %d failed in %s", index, self.key)
            self.fail_stop(f"apply of entry {index} failed: {_describe(exc)}")
            raise ReplicaFailed(self.failed) from exc

    # ---- fail-stop ---------------------------------------------------------------------
    def fail_stop(self, reason: str) -> None:
        """Stop this replica for good (driver thread): see the class doc."""
        if self.failed:
            return
        self.failed = reason
        log.critical("%s: replica FAILED and stopped: %s", self.key, reason)
        self._SyncObj__raftState = _RAFT_STATE.FOLLOWER
        self._SyncObj__raftLeader = None
        self.fail_all(errors.Unavailable(f"{self.key}: replica failed: {reason}"))
        try:
            self._destroy_now()
        except Exception:
            log.exception("closing failed replica %s", self.key)
        # Off the host: no ticks, and no coalesced heartbeat is answered for it.
        host, key = self._host, self.key
        host.post(lambda: host.remove(key) if host.get(key) is self else None)
        hook = self.on_failed
        if hook is not None:
            try:
                hook(self.key, reason)
            except Exception:
                log.exception("on_failed hook of %s", self.key)

    def flush_durable(self, inline: bool = False) -> None:
        if self._closed:
            return
        try:
            super().flush_durable(inline)
        except OSError as exc:  # an inline journal sync failed (no sync threads)
            self.fail_stop(f"journal sync failed: {_describe(exc)}")

    def on_sync_done(self, job: SyncJob) -> None:
        if self._closed:
            return
        if job.error is not None:  # fsyncgate: never retried, never counted
            self._SyncObj__raftLog.end_sync(job)
            self.fail_stop(f"journal sync failed: {_describe(job.error)}")
            return
        super().on_sync_done(job)

    def tick(self) -> None:
        """SafeSyncObj.tick, except that a storage error stops the replica."""
        if self._closed:
            return
        self._last_tick = time.monotonic()
        try:
            self._onTick(0.0)
        except ReplicaFailed:
            pass
        except OSError as exc:  # journal write, compaction, meta store
            self.fail_stop(f"storage error: {_describe(exc)}")
        except Exception:
            log.exception("tick failed for %s", self.key)
        failure = "" if self._closed else self._SyncObj__raftLog.failure
        if failure:
            self.fail_stop(failure)

    def _guard_snapshot(self, write: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
        """pysyncobj swallows a failed snapshot write: log it at ERROR and
        count it (``snapshot_failures`` in status), then let pysyncobj retry
        later as it does."""

        def guarded(path: str, data: Any) -> None:
            try:
                write(path, data)
            except Exception as exc:
                self.snapshot_failures += 1
                log.error("%s: snapshot to %s failed: %s", self.key, path, _describe(exc))
                raise

        return guarded

    # ---- submission ------------------------------------------------------------------
    def submit(
        self,
        command: Any,
        timeout_s: float = 10.0,
        level: str = "",
        wake: bool = True,
        hold_s: float = 0.0,
    ) -> Future[Any]:
        """Queue ``command`` for this group (any thread). The future resolves to
        the state machine's result (``(result, level reached)`` with a
        ``level``, see the module doc) or raises a QueueError. ``wake=False``:
        the driver is not woken (waking it lets it tick at once, before a
        command submitted right after could join the same entry); call ``wake``.
        ``hold_s``: the command is not proposed on its own before ``hold_s``
        passed; a command submitted meanwhile without it takes it along in its
        entry (a background ack rides the next Append: no Raft round of its
        own). The driver is not woken: call ``wake`` after ``hold_s``."""
        fut: Future[Any] = Future()
        self._enqueue(command, fut, timeout_s, level, wake, hold_s)
        return fut

    def submit_awaitable(
        self, command: Any, timeout_s: float = 10.0, level: str = ""
    ) -> asyncio.Future[Any]:
        """``submit`` for a caller on an asyncio loop, from that loop's thread:
        the future is the loop's own (``LoopWaiter``)."""
        waiter = LoopWaiter(asyncio.get_running_loop())
        self._enqueue(command, waiter, timeout_s, level, True, 0.0)
        return waiter.future

    def _enqueue(
        self, command: Any, fut: Waiter, timeout_s: float, level: str, wake: bool, hold_s: float
    ) -> None:
        """Queue ``command`` with its waiter (``submit``), or fail the waiter now."""
        if self._closed:
            reason = f"failed: {self.failed}" if self.failed else "stopped"
            fut.set_exception(errors.Unavailable(f"{self.key}: replica {reason}"))
            return
        with self._lock:
            full = len(self._pending) >= self.max_pending
            if not full:
                now = time.monotonic()
                self._pending.append((command, fut, now + timeout_s, level))
                if hold_s > 0:
                    due = now + hold_s
                    self._hold_due = min(self._hold_due, due) if self._hold_due else due
                    wake = False
                else:
                    self._plain += 1
        if full:  # backpressure: the caller retries later, nothing was queued
            metrics.count_rejection("limits")
            fut.set_exception(
                errors.ResourceExhausted(
                    f"{self.key}: {self.max_pending} commands wait to be proposed "
                    f"(raft.commands_queue_size)"
                )
            )
            return
        if wake:
            self._host.mark_active(self.key)

    def wake(self) -> None:
        """Tick this group on the driver's next loop (any thread)."""
        self._host.mark_active(self.key)

    def before_tick(self) -> None:
        """Driver thread: expire late waiters, turn queued commands into Raft
        entries."""
        if self._inflight or self._pending:
            self.reap(time.monotonic())
        if not self._pending or self._holding(time.monotonic()):
            return
        with self._lock:
            pending, self._pending = self._pending, []
            self._plain, self._hold_due = 0, 0.0
        _stage("s.driver")
        if not self._isLeader():
            err = errors.NotLeader(f"{self.key}: not the leader", self.leader_address())
            for _, fut, _, _ in pending:
                _fail(fut, err)
            return
        own = len(pending)
        pending.extend(self.riders(pending))
        for start in range(0, len(pending), MAX_COMMANDS_PER_ENTRY):
            self._propose(pending[start : start + MAX_COMMANDS_PER_ENTRY], max(0, own - start))

    def _holding(self, now: float) -> bool:
        """Only held commands are pending, and their time has not come."""
        return self._plain == 0 and now < self._hold_due

    def _propose(self, chunk: list[Pending], own: int | None = None) -> None:
        """Propose ``chunk`` as one entry (halves if too big). Its commands
        from ``own`` on are riders (``riders``): their waiters are resolved
        first at the apply. A rider is a poll's lease that delivers what the
        commands before it stored, on its way to a consumer; a Send's answer
        only tells its producer. Resolved the other way round, the Send ran
        its answer on the loop before the Receive got it (W4)."""
        own = len(chunk) if own is None else min(own, len(chunk))
        commands = [c for c, _, _, _ in chunk]
        payload = self.encode_batch(commands)
        if len(payload) > self.max_entry_bytes and len(chunk) > 1:
            half = len(chunk) // 2
            self._propose(chunk[:half], own)
            self._propose(chunk[half:], max(0, own - half))
            return
        order = [*range(own, len(chunk)), *range(own)]  # riders first
        futures = [f for _, f, _, _ in chunk]
        levels = [lv for _, _, _, lv in chunk]
        deadline = max(d for _, _, d, _ in chunk)
        if "leader" in levels and self._idle():
            self._ack_early(payload, futures, levels)
        self._seq += 1
        seq = self._seq
        self._inflight[seq] = (futures, deadline)
        proposed = time.monotonic()

        def done(result: Any, err: int) -> None:
            self._inflight.pop(seq, None)
            if err != FAIL_REASON.SUCCESS:
                exc = fail_reason_error(err, self.leader_address())
                for fut in futures:
                    _fail(fut, exc)
                return
            _stage("s.applied")
            self.probe.committed(time.monotonic() - proposed)
            results = self.split_results(result, len(futures))
            for i in order:
                res, level = results[i], levels[i]
                res = _with_level(res, _COMMITTED.get(level, level)) if level else res
                _resolve(futures[i], res)

        self.propose(payload, callback=done)

    def _idle(self) -> bool:
        """Leader with every log entry applied and nothing of ours in flight."""
        last = self._SyncObj__raftLog[-1][1] if len(self._SyncObj__raftLog) else 0
        return not self._inflight and self.raftLastApplied >= last and self._isLeader()

    def _ack_early(self, payload: bytes, futures: list[Waiter], levels: list[str]) -> None:
        predicted = self.predict(payload)
        if predicted is None:
            return
        results = self.split_results(predicted, len(futures))
        for fut, res, level in zip(futures, results, levels, strict=True):
            if level == "leader" and not isinstance(res, BaseException):
                _resolve(fut, (res, "leader"))

    def _next_deadline(self, now: float) -> float:
        """SafeSyncObj's deadline, or earlier when a waiter's deadline passes."""
        due = super().next_deadline(now)
        if self._inflight:
            due = min(due, min(d for _, d in self._inflight.values()))
        if self._pending:
            due = min(due, self._hold_due) if self._holding(now) else now
        return due

    def reap(self, now: float) -> None:
        """Fail waiters past their deadline with OutcomeUnknown (driver thread)."""
        expired = [s for s, (_, d) in self._inflight.items() if d < now]
        for seq in expired:
            futures, _ = self._inflight.pop(seq)
            for fut in futures:
                _fail(fut, errors.OutcomeUnknown("timed out waiting for commit; may apply later"))
        if self._pending:
            with self._lock:
                keep = [p for p in self._pending if p[2] >= now]
                late = [p[1] for p in self._pending if p[2] < now]
                self._pending = keep
            for fut in late:
                _fail(fut, errors.Unavailable("timed out before the command was proposed"))

    def fail_all(self, exc: errors.QueueError) -> None:
        """Fail every waiter: those not yet proposed with ``exc``; those proposed
        with OutcomeUnknown (the entry may still commit through the other
        replicas: a chaos campaign saw such sends, failed as Unavailable, appear)."""
        unknown = errors.OutcomeUnknown(f"{exc.message}; the command may still be applied")
        for futures, _ in self._inflight.values():
            for fut in futures:
                _fail(fut, unknown)
        self._inflight.clear()
        with self._lock:
            pending, self._pending = self._pending, []
            self._plain, self._hold_due = 0, 0.0
        for _, fut, _, _ in pending:
            _fail(fut, exc)

    def snapshot_meta(self, path: str) -> tuple[Any, int]:
        """pysyncobj's tuple from snapshot ``path`` with the cluster as Node
        objects (it compares them with its own node), and the image length."""
        (last, prev, cluster), image_len = snapshot.read_meta(path)
        nodes = {self._SyncObj__nodeClass(addr) for addr in cluster}
        return (last, prev, nodes), image_len

    # ---- status -------------------------------------------------------------------------
    def is_leader(self) -> bool:
        return not self.failed and bool(self._isLeader())

    def can_serve_leader_reads(self) -> bool:
        """Leader that has applied its own term's first entry (Raft §8: before that
        its state may lack entries committed under earlier leaders, as after a
        restart that replays the log), with quorum contact within one election
        timeout (hazard 5)."""
        noop = self._SyncObj__noopIDx
        if noop is None or self.raftLastApplied < noop:
            return False
        return self.has_quorum_contact(self.lease_quorum_s)

    def status(self) -> dict[str, Any]:
        if self.failed:
            return {
                "role": "failed",
                "failure": self.failed,
                "leader": "",
                "term": 0,
                "commit_index": 0,
                "last_applied": self.raftLastApplied,
                "log_len": 0,
                "has_quorum": False,
            }
        st = self.getStatus()
        leader = st.get("leader")
        return {
            "failure": "",
            "role": {0: "follower", 1: "candidate", 2: "leader"}.get(st.get("state"), "unknown"),
            "leader": leader.address if leader is not None else "",
            "term": st.get("raft_term", 0),
            "commit_index": st.get("commit_idx", 0),
            "last_applied": st.get("last_applied", 0),
            "log_len": st.get("log_len", 0),
            "has_quorum": bool(st.get("has_quorum", False)),
        }

    def close(self) -> None:
        self.fail_all(errors.Unavailable(f"{self.key}: replica stopped"))
        self.probe.close()
        if not self._closed:
            self._destroy_now()

    def next_deadline(self, now: float) -> float:
        if self._closed:
            return now + 3600.0
        return self._next_deadline(now)

    def _destroy_now(self) -> None:
        """Close sockets and the journal (driver thread; no tick thread exists)."""
        self._closed = True  # a sync ending later is ignored (on_sync_done)
        self._SyncObj__transport.destroy()
        self._SyncObj__raftLog._destroy()


def _describe(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


# The level a committed entry reached, by the level asked for: "leader"
# asked for an early ack; committed instead, it reached a quorum.
_COMMITTED = {"leader": "quorum"}


def _with_level(result: Any, level: str) -> Any:
    return result if isinstance(result, BaseException) else (result, level)


def _resolve(fut: Waiter, result: Any) -> None:
    if fut.done():
        return
    if isinstance(result, BaseException):
        fut.set_exception(result)
    else:
        fut.set_result(result)


def _fail(fut: Waiter, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
