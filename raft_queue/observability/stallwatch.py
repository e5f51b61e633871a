"""A stall debug switch: ``RAFTQ_STALL_WATCH=<ms>`` in a node's environment.

Off (and free) unless the variable is set. When set, the node logs at
WARNING, on its own log:

- ``stallwatch gc``: every garbage collection that took over ``<ms>`` (its
  generation, duration, objects collected; gc.callbacks). A collection holds
  the GIL: every thread of the node, the Raft driver included, waits;
- ``stallwatch driver``: the Raft driver thread busy (out of its epoll wait)
  for over ``<ms>``, with its stack when first seen, and how long it lasted;
- ``stallwatch gap``: the watcher's own 5 ms sleep took over ``<ms>``: the
  whole process did not run (the GIL held by C code, or the machine).

It found issue 17's W4 stall (docs/benchmarks.md, "W4's producer stall").
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

log = logging.getLogger("raft_queue.stallwatch")

SLEEP_S = 0.005


class _GcTimer:
    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
            return
        took = time.perf_counter() - self.started
        if took >= self.limit_s:
            log.warning(
                "stallwatch gc gen=%s took %.1f ms collected=%s",
                info.get("generation"), took * 1e3, info.get("collected"),
            )  # fmt: skip


def _watch(host: Any, limit_s: float, timer: _GcTimer) -> None:
    """Until the host stops (its ``_stop`` event)."""
    try:
        _watch_loop(host, limit_s)
    finally:
        gc.callbacks.remove(timer)


def _watch_loop(host: Any, limit_s: float) -> None:
    poller = host.poller
    reported = 0.0  # the busy_since already reported
    last = time.monotonic()
    while not host._stop.is_set():
        time.sleep(SLEEP_S)
        now = time.monotonic()
        if now - last - SLEEP_S >= limit_s:
            log.warning("stallwatch gap %.1f ms", (now - last) * 1e3)
        last = now
        since = getattr(poller, "busy_since", 0.0)
        if since and since != reported and now - since >= limit_s:
            reported = since
            frame = sys._current_frames().get(host._driver_ident or 0)
            stack = "".join(traceback.format_stack(frame, limit=14)) if frame else "?"
            log.warning("stallwatch driver busy %.1f ms so far:\n%s", (now - since) * 1e3, stack)
            _until_idle(poller, since)


def _until_idle(poller: Any, since: float) -> None:
    deadline = time.monotonic() + 30.0
    while poller.busy_since == since and time.monotonic() < deadline:
        time.sleep(SLEEP_S)
    log.warning("stallwatch driver busy %.1f ms in all", (time.monotonic() - since) * 1e3)


def start_from_env(host: Any) -> None:
    raw = os.environ.get("RAFTQ_STALL_WATCH", "")
    if not raw:
        return
    limit_s = float(raw) / 1e3
    timer = _GcTimer(limit_s)
    gc.callbacks.append(timer)
    args = (host, limit_s, timer)
    threading.Thread(target=_watch, args=args, name="stallwatch", daemon=True).start()
    log.warning("stallwatch on: stalls over %.0f ms are logged", limit_s * 1e3)
