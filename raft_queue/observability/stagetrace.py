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
            with open(os.path.join(_DIR, f"{os.getpid()}.trace"), "a") as f:
                f.writelines(f"{t} {name} {tid}\n" for name, t, tid in rows)

    def mark(name: str) -> None:
        _buf.append((name, _now(), _ident() % 100000))
        if len(_buf) >= 512:
            _flush()

    atexit.register(_flush)
else:
    mark = _noop
