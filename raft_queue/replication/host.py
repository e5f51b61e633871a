"""RaftHost: one driver thread runs every Raft group of this process.

pysyncobj gives each SyncObj a tick thread and a poller; with hundreds of
partition replicas per node that is hundreds of threads. Here all groups share
one poller and one thread (as hashicorp/raft shares a transport): the driver
polls every socket once, then ticks the groups that saw activity (a message, a
submitted command) and the groups whose own timer is due. After each tick a
group says when it next needs one (``next_deadline``: a leader's heartbeat, a
follower's election deadline, a retry); the driver keeps those in a heap, so
an idle follower costs nothing between its leader's heartbeats (answered from
the message handler without a tick) and the driver's work per loop does not
grow with the number of groups.

A timer that pops is first asked again (``next_deadline``): a follower's
election deadline that heartbeats pushed back, or a quiet leader, costs a heap
operation instead of a tick.

With ``heartbeat_s``, the driver also runs the node's coalesced heartbeat
round every ``heartbeat_s`` (heartbeats.py): quiet leaders are heartbeated in
one message per other node instead of one per group per follower.

Journal syncs run on the host's I/O threads (syncs.py, ``sync_threads`` of
them; 0 syncs inline on the driver thread): the driver begins a sync, an I/O
thread runs the fdatasync and ``post``s its end back to the driver, which
then sends the acks it allows.

Thread contract: groups are created, ticked and destroyed on the driver thread
only (``call()`` and ``post()`` run a function there). Other threads may only
submit commands (``Group.submit``), which wakes the driver through a pipe.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from pysyncobj.poller import POLL_EVENT_TYPE, Poller, createPoller

from raft_queue.observability.stagetrace import TRACING, round_done
from raft_queue.replication.heartbeats import Heartbeats
from raft_queue.replication.syncs import SyncThreads

log = logging.getLogger(__name__)

T = TypeVar("T")


class Tickable(Protocol):
    key: str
    syncer: SyncThreads | None

    def tick(self) -> None: ...

    def flush_durable(self) -> None: ...

    def before_tick(self) -> None: ...

    def next_deadline(self, now: float) -> float: ...

    def close(self) -> None: ...


class EpollPoller(Poller):
    """pysyncobj's PollPoller on epoll. poll(2) costs the kernel a visit to
    every registered descriptor per call: with 256 replicas a node has ~800
    (a listening socket per replica, a connection per peer), and the idle
    profile spent 40 % of the driver thread in sock_poll/tcp_poll/fdget.
    epoll's cost follows the ready descriptors only. Level-triggered and
    with the same event bits, so pysyncobj's connections see what they saw."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._callbacks: dict[int, Callable[[int, int], None]] = {}
        self._registered: set[int] = set()
        # monotonic time the driver left its last epoll wait (0.0 while it
        # waits): observability/stallwatch.py reads it to see a busy driver.
        self.busy_since = 0.0

    def subscribe(self, descr: int, callback: Callable[[int, int], None], eventMask: int) -> None:  # noqa: N803
        mask = 0
        if eventMask & POLL_EVENT_TYPE.READ:
            mask |= select.EPOLLIN
        if eventMask & POLL_EVENT_TYPE.WRITE:
            mask |= select.EPOLLOUT
        if eventMask & POLL_EVENT_TYPE.ERROR:
            mask |= select.EPOLLERR
        self._callbacks[descr] = callback
        # Always a syscall (pysyncobj re-subscribes rarely: on connect and
        # after a write event): a number closed without an unsubscribe left
        # the epoll set, and may now be another socket's.
        try:
            self._epoll.modify(descr, mask)
        except FileNotFoundError:
            self._epoll.register(descr, mask)
        self._registered.add(descr)

    def unsubscribe(self, descr: int) -> None:
        # pysyncobj closes a socket before unsubscribing it; closing already
        # removed it from the epoll set (hence the ignored errors).
        self._callbacks.pop(descr, None)
        if descr in self._registered:
            self._registered.discard(descr)
            with contextlib.suppress(OSError):
                self._epoll.unregister(descr)

    def poll(self, timeout: float) -> None:
        self.busy_since = 0.0
        events = self._epoll.poll(timeout, 1024)
        self.busy_since = time.monotonic()
        for descr, event in events:
            mask = 0
            if event & select.EPOLLIN:
                mask |= POLL_EVENT_TYPE.READ
            if event & select.EPOLLOUT:
                mask |= POLL_EVENT_TYPE.WRITE
            if event & (select.EPOLLERR | select.EPOLLHUP):
                mask |= POLL_EVENT_TYPE.ERROR
            callback = self._callbacks.get(descr)
            if callback is not None:  # (PollPoller keeps stale ones; ours may be gone)
                callback(descr, mask)

    def close(self) -> None:
        self._epoll.close()


class RaftHost:
    """``idle_tick_s``: timer slack. A timer wake-up also ticks every group due
    within this much after the first, so timers cost at most about
    1 / idle_tick_s wake-ups a second however many groups there are; a group
    is ticked up to this late, never early. ``heartbeat_s``: period of the
    coalesced heartbeat round (None: every group heartbeats on its own).
    ``sync_threads``: I/O threads for journal syncs (0: inline)."""

    def __init__(
        self,
        idle_tick_s: float = 0.05,
        name: str = "raft-driver",
        heartbeat_s: float | None = None,
        sync_threads: int = 2,
    ) -> None:
        self.poller = EpollPoller() if hasattr(select, "epoll") else createPoller("poll")
        self.idle_tick_s = idle_tick_s
        self._groups: dict[str, Tickable] = {}
        self._by_address: dict[str, Tickable] = {}  # Raft address -> group
        self.heartbeats = Heartbeats(self._by_address, heartbeat_s) if heartbeat_s else None
        self._due: dict[str, float] = {}  # key -> the deadline its heap entry holds
        self._heap: list[tuple[float, str]] = []
        self._active: set[str] = set()
        self._flush: set[str] = set()  # only pending acks to sync and send
        self._active_lock = threading.Lock()
        self._calls: list[tuple[Callable[[], Any], Future[Any]]] = []
        self._calls_lock = threading.Lock()
        self._posted: collections.deque[Callable[[], None]] = collections.deque()
        self._flushing = 0  # groups of the running flush/tick pass still to come
        self.syncer = (
            SyncThreads(self.post, sync_threads, quiet=self._quiet) if sync_threads else None
        )
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.poller.subscribe(self._wake_r, self._drain_wake, POLL_EVENT_TYPE.READ)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._driver_ident: int | None = None
        self.ticks = 0

    # ---- lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Close every group on the driver thread, then stop it."""
        if not self._thread.is_alive():
            return
        try:
            self.call(self._close_all).result(timeout_s)
        except Exception:
            log.exception("closing groups failed")
        self._stop.set()
        self.wake()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            # Closed here, not by the driver: a wake() racing its exit would
            # write to a closed (or reused) descriptor.
            wake_w, self._wake_w = self._wake_w, -1  # later wake()s do nothing
            os.close(wake_w)
            os.close(self._wake_r)
            if isinstance(self.poller, EpollPoller):
                self.poller.close()
        if self.syncer is not None:
            self.syncer.stop(timeout_s)

    def _close_all(self) -> None:
        for key in list(self._groups):
            self._remove(key)

    # ---- cross-thread entry points -----------------------------------------------
    def call(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` on the driver thread; the future holds its result."""
        fut: Future[T] = Future()
        if threading.get_ident() == self._driver_ident:
            _run_into(fn, fut)
            return fut
        with self._calls_lock:
            self._calls.append((fn, fut))
        self.wake()
        return fut

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the driver thread soon (any thread; no result, errors
        logged): the end of a journal sync."""
        self._posted.append(fn)
        if threading.get_ident() != self._driver_ident:
            self.wake()

    def wake(self) -> None:
        # A full pipe means the driver is already due to wake.
        fd = self._wake_w
        if fd >= 0:
            with contextlib.suppress(BlockingIOError):
                os.write(fd, b"x")

    def mark_active(self, key: str) -> None:
        """Tick ``key`` on the next loop (any thread)."""
        with self._active_lock:
            self._active.add(key)
        if threading.get_ident() != self._driver_ident:
            self.wake()

    def mark_flush(self, key: str) -> None:
        """Driver thread (message handlers): sync and send ``key``'s pending
        acks after this poll round, without a full tick."""
        self._flush.add(key)

    # ---- driver-thread only ----------------------------------------------------------
    def add(self, group: Tickable) -> None:
        self._groups[group.key] = group
        group.syncer = self.syncer
        self._active.add(group.key)
        address = _raft_address(group)
        if address:
            self._by_address[address] = group
            if self.heartbeats is not None:
                group.heartbeat_mux = self.heartbeats  # type: ignore[attr-defined]

    def remove(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        self._due.pop(key, None)  # its heap entries are skipped from now on
        group = self._groups.pop(key, None)
        if group is not None:
            address = _raft_address(group)
            if address and self._by_address.get(address) is group:
                del self._by_address[address]
            try:
                group.close()
            except Exception:
                log.exception("closing group %s failed", key)

    def get(self, key: str) -> Tickable | None:
        return self._groups.get(key)

    def keys(self) -> list[str]:
        return list(self._groups)

    def _drain_wake(self, descr: int, event: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _run(self) -> None:
        self._driver_ident = threading.get_ident()
        while not self._stop.is_set():
            try:
                self.poller.poll(self._poll_timeout())
            except Exception:
                log.exception("poll failed")
                time.sleep(0.01)
            if TRACING:  # stage traces only (a long round is marked below)
                t0, calls, posted = time.monotonic_ns(), len(self._calls), len(self._posted)
                inlined = self.syncer.inlined if self.syncer is not None else 0
            self._run_calls()
            self._run_posted()
            self._flush_only()
            beat = self._heartbeat_round()
            with self._active_lock:
                active, self._active = self._active, set()
            active |= beat
            due = self._pop_due(time.monotonic())
            keys = active | self._still_due(due - active)
            self._tick(keys)
            if TRACING:
                synced = (self.syncer.inlined if self.syncer is not None else 0) - inlined
                round_done(t0, f"driver.c{calls}.p{posted}.t{len(keys)}.b{len(beat)}.i{synced}")

    def _poll_timeout(self) -> float:
        if self._active or self._calls or self._flush or self._posted:
            return 0.0
        now = time.monotonic()
        until = 1.0
        if self._heap:
            # Late by up to the slack, never early: everything due by then is
            # ticked in one wake-up.
            until = self._heap[0][0] + self.idle_tick_s - now
        if self.heartbeats is not None:
            until = min(until, self.heartbeats.next_round - now)
        return max(0.0, until)

    def _heartbeat_round(self) -> set[str]:
        """The coalesced heartbeats, when due; the groups to tick (their own
        heartbeat is due, or a quiet leader lost quorum contact)."""
        hb = self.heartbeats
        now = time.monotonic()
        marked: set[str] = set()
        if hb is None or now < hb.next_round:
            return marked
        hb.next_round = now + hb.period_s
        try:
            hb.round(list(self._groups.values()), marked.add)
        except Exception:
            log.exception("heartbeat round failed")
        return marked

    def _still_due(self, keys: set[str]) -> set[str]:
        """Of the groups whose timer popped, those that still need a tick now;
        the others are put back at their new deadline."""
        now = time.monotonic()
        due: set[str] = set()
        for key in keys:
            group = self._groups.get(key)
            if group is None:
                continue
            try:
                at = group.next_deadline(now)
            except Exception:
                log.exception("next_deadline failed for %s", key)
                at = now
            if at > now + self.idle_tick_s:  # not within the slack: not due
                self._push(key, at)
            else:
                due.add(key)
        return due

    def _pop_due(self, now: float) -> set[str]:
        """Keys whose timer is due (within the slack), removed from the heap."""
        due: set[str] = set()
        heap, limit = self._heap, now
        if heap and heap[0][0] <= now:
            limit = now + self.idle_tick_s
        while heap and heap[0][0] <= limit:
            at, key = heapq.heappop(heap)
            if self._due.get(key) == at:
                del self._due[key]
                due.add(key)
        return due

    def _schedule(self, key: str, group: Tickable) -> None:
        try:
            at = group.next_deadline(time.monotonic())
        except Exception:
            log.exception("next_deadline failed for %s", key)
            at = time.monotonic() + self.idle_tick_s
        self._push(key, at)

    def _push(self, key: str, at: float) -> None:
        if self._due.get(key) == at:
            return
        self._due[key] = at
        heapq.heappush(self._heap, (at, key))
        if len(self._heap) > 4 * len(self._due) + 1024:  # drop stale entries
            self._heap = [(d, k) for k, d in self._due.items()]
            heapq.heapify(self._heap)

    def _flush_only(self) -> None:
        if not self._flush:
            return
        keys, self._flush = self._flush, set()
        self._flushing = len(keys)
        for key in keys:
            self._flushing -= 1
            group = self._groups.get(key)
            if group is not None:
                try:
                    group.flush_durable()
                except Exception:
                    log.exception("flush failed for %s", key)

    def _quiet(self) -> bool:
        """Driver thread: nothing queued for another group, so a follower's
        sync may run here (syncs.SyncThreads.run_inline). The group being
        flushed is itself marked active (its tick follows); one more is not."""
        return (
            self._flushing == 0
            and not self._flush
            and not self._posted
            and not self._calls
            and len(self._active) <= 1
        )

    def _tick(self, keys: set[str]) -> None:
        self._flushing = len(keys)  # a tick flushes too: the others wait behind it
        for key in keys:
            self._flushing -= 1
            group = self._groups.get(key)
            if group is None:
                continue
            try:
                group.before_tick()
            except Exception:
                log.exception("before_tick failed for %s", key)
            group.tick()
            self.ticks += 1
            self._schedule(key, group)

    def _run_posted(self) -> None:
        posted = self._posted
        while posted:
            fn = posted.popleft()
            try:
                fn()
            except Exception:
                log.exception("posted call failed")

    def _run_calls(self) -> None:
        if not self._calls:
            return
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for fn, fut in calls:
            _run_into(fn, fut)


def _run_into(fn: Callable[[], T], fut: Future[T]) -> None:
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as exc:  # handed to the caller through the future
        fut.set_exception(exc)


def _raft_address(group: Any) -> str:
    node = getattr(group, "selfNode", None)
    return str(getattr(node, "address", "") or "")
