"""Per-stage timestamps of the data path, for latency work (off by default).

With ``RAFTQ_STAGE_TRACE=<dir>`` in a process's environment, ``mark(name)``
appends ``(name, CLOCK_MONOTONIC ns)`` to a buffer that is written to
``<dir>/<pid>.trace`` every 512 marks and at exit; CLOCK_MONOTONIC is one
clock for every process of the host, so the stages of one request can be
lined up across client, leader and followers (``python -m
raft_queue.bench.stage_report <dir>``; docs/benchmarks.md, "Where W1's
milliseconds go").
Unset, ``mark`` is a constant no-op function: nothing is recorded.
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
import time

_DIR = os.environ.get("RAFTQ_STAGE_TRACE", "")


def _noop(name: str) -> None:
    return None


if _DIR:
    _buf: list[tuple[str, int, int]] = []
    _lock = threading.Lock()
    _now = time.monotonic_ns
    _ident = threading.get_ident

    def _flush() -> None:
        with _lock:  # one writer at a time; marks keep appending meanwhile
            rows = _buf.copy()
            del _buf[: len(rows)]  # what was appended after the copy stays
        if rows:
            rows.append(("trace.flush", _now(), _ident() % 100000))
            with open(os.path.join(_DIR, f"{os.getpid()}.trace"), "a") as f:
                f.writelines(f"{t} {name} {tid}\n" for name, t, tid in rows)
            mark("trace.flushed")

    def mark(name: str) -> None:
        _buf.append((name, _now(), _ident() % 100000))
        if len(_buf) >= 512:
            _flush()

    def _on_gc(phase: str, info: dict[str, int]) -> None:
        # A collection stops every thread of the process: a slow send can be
        # lined up with one (stage_report --tail counts them per request).
        mark(f"gc.{phase}{info.get('generation', 0)}")

    atexit.register(_flush)
    gc.callbacks.append(_on_gc)
else:
    mark = _noop

SLOW_NS = 200_000  # a callback or driver round longer than this is marked (0.2 ms)


def _label(obj: object) -> str:
    coro = getattr(obj, "get_coro", None)
    target = coro() if coro is not None else obj
    name = getattr(target, "__qualname__", None) or type(target).__name__
    return "".join(c if c.isalnum() or c in "._" else "_" for c in str(name))[:60]


def watch_loop() -> None:
    """Tracing only: mark every asyncio callback (a task step: its
    coroutine) that runs longer than SLOW_NS as ``slow.start``/``slow.<name>``
    pairs, to line a slow send up with the work that held the loop."""
    if not _DIR:
        return
    import asyncio.events

    handle = asyncio.events.Handle
    run = handle._run

    def _run(self: asyncio.events.Handle) -> None:
        t0 = time.monotonic_ns()
        run(self)
        if time.monotonic_ns() - t0 > SLOW_NS:
            cb = getattr(self, "_callback", None)
            owner = getattr(cb, "__self__", cb)
            _buf.append(("slow.start", t0, threading.get_ident() % 100000))
            mark(f"slow.{_label(owner)}")

    handle._run = _run  # type: ignore[method-assign]


def round_done(t0: int, what: str) -> None:
    """Tracing only: mark a driver round that began at ``t0`` (monotonic ns)
    if it ran longer than SLOW_NS."""
    if _DIR and time.monotonic_ns() - t0 > SLOW_NS:
        _buf.append(("slow.start", t0, threading.get_ident() % 100000))
        mark(f"slow.{what}")


TRACING = bool(_DIR)
