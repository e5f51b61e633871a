"""RaftHost: one driver thread runs every Raft group of this process.

pysyncobj gives each SyncObj a tick thread and a poller; with hundreds of
partition replicas per node that is hundreds of threads. Here all groups share
one poller and one thread (as hashicorp/raft shares a transport): the driver
polls every socket once, then ticks the groups that saw activity (a message, a
submitted command), and every group every ``idle_tick_s`` for election and
heartbeat timers.

Thread contract: groups are created, ticked and destroyed on the driver thread
only (``call()`` runs a function there). Other threads may only submit
commands (``Group.submit``), which wakes the driver through a pipe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from pysyncobj.poller import POLL_EVENT_TYPE, createPoller

log = logging.getLogger(__name__)

T = TypeVar("T")


class Tickable(Protocol):
    key: str

    def tick(self) -> None: ...

    def flush_durable(self) -> None: ...

    def before_tick(self) -> None: ...

    def reap(self, now: float) -> None: ...

    def close(self) -> None: ...


class RaftHost:
    def __init__(self, idle_tick_s: float = 0.05, name: str = "raft-driver") -> None:
        self.poller = createPoller("poll")
        self.idle_tick_s = idle_tick_s
        self._groups: dict[str, Tickable] = {}
        self._active: set[str] = set()
        self._flush: set[str] = set()  # only pending acks to sync and send
        self._active_lock = threading.Lock()
        self._calls: list[tuple[Callable[[], Any], Future[Any]]] = []
        self._calls_lock = threading.Lock()
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

    def wake(self) -> None:
        # A full pipe means the driver is already due to wake.
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

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
        self._active.add(group.key)

    def remove(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        group = self._groups.pop(key, None)
        if group is not None:
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
        next_all = time.monotonic()
        while not self._stop.is_set():
            timeout = max(0.0, next_all - time.monotonic())
            if self._active:
                timeout = 0.0
            try:
                self.poller.poll(timeout)
            except Exception:
                log.exception("poll failed")
                time.sleep(0.01)
            self._run_calls()
            self._flush_only()
            now = time.monotonic()
            if now >= next_all:
                keys = list(self._groups)
                next_all = now + self.idle_tick_s
                for group in self._groups.values():
                    group.reap(now)
            else:
                with self._active_lock:
                    keys, self._active = list(self._active), set()
            self._tick(keys)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _flush_only(self) -> None:
        if not self._flush:
            return
        keys, self._flush = self._flush, set()
        for key in keys:
            group = self._groups.get(key)
            if group is not None:
                try:
                    group.flush_durable()
                except Exception:
                    log.exception("flush failed for %s", key)

    def _tick(self, keys: list[str]) -> None:
        with self._active_lock:
            for key in keys:
                self._active.discard(key)
        for key in keys:
            group = self._groups.get(key)
            if group is None:
                continue
            try:
                group.before_tick()
            except Exception:
                log.exception("before_tick failed for %s", key)
            group.tick()
            self.ticks += 1

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
