"""A memory debug switch: ``RAFTQ_TRACEMALLOC=<seconds>`` in a node's environment.

Off (and free) unless the variable is set. When set, a daemon thread logs
at WARNING on the node's log every ``<seconds>``:

- ``memtrace rss``: VmRSS, RssAnon, RssFile, the bytes tracemalloc traced,
  and glibc's heap (``mallinfo2``: arena, in use, free in arena, mmapped).
  RssAnon growing with ``traced`` flat means memory outside Python objects
  (C extensions, allocator fragmentation); RssFile is mapped files (LMDB,
  journals, shared libraries), not heap;
- ``memtrace gen``: the GC's generation counts, collections and objects
  collected per generation, and the pauses since the last line (gc.callbacks);
- ``memtrace site``: with tracemalloc on, the allocation sites (innermost
  frame first) that grew most since the first report;
- ``memtrace gc``: the object types whose count grew most since the first
  report (``gc.get_objects``: container objects, not those ``gc.freeze`` froze);
- ``memtrace held <type>``: what holds the newest instance of each type named.

More switches: ``RAFTQ_TRACEMALLOC_FRAMES`` (frames per trace, default 8; 0
leaves tracemalloc off, for the other lines at no tracing cost),
``RAFTQ_TRACEMALLOC_REFERRERS`` (type names, comma-separated, for ``held``),
``RAFTQ_TRACEMALLOC_COLLECT=1`` (a full collection before counting types, and
how many unreachable objects it found: reachable objects from uncollected
garbage), ``RAFTQ_TRACEMALLOC_TRIM=1`` (``malloc_trim(0)`` each round, and
RssAnon after it). They change what they measure (tracing slows a node a
lot; COLLECT and TRIM free memory): use them to find a leak, not in
production. docs/reliability.md ("Soak") tells what they found.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import logging
import os
import threading
import time
import tracemalloc
import types

log = logging.getLogger("raft_queue.memtrace")

TOP = 15


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
            "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def malloc_heap() -> dict[str, int]:
    """glibc's ``mallinfo2()``: {} where it is not available."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    m = fn()
    return {"arena": m.arena, "in_use": m.uordblks, "free": m.fordblks, "mmapped": m.hblkhd}


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """VmRSS, RssAnon, RssFile of a process in bytes (0 if unknown)."""
    out = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in out:
                    out[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def _type_counts() -> collections.Counter[str]:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def held_by(type_name: str, depth: int = 6) -> str:
    """What holds a recent instance of ``type_name``: a chain of referrer types
    (frames and this module's own lists skipped), innermost first."""
    objs = [o for o in gc.get_objects() if type(o).__qualname__ == type_name]
    if not objs:
        return "none"
    chain, obj, seen = [], objs[-1], {id(objs)}
    del objs
    for _ in range(depth):
        seen.add(id(obj))
        refs = [
            r for r in gc.get_referrers(obj)
            if id(r) not in seen and not isinstance(r, types.FrameType)
            and not (isinstance(r, list) and len(r) > 1000)
        ]  # fmt: skip
        seen.add(id(refs))
        if not refs:
            chain.append("(no more referrers)")
            break
        obj = refs[0]
        desc = type(obj).__qualname__
        if isinstance(obj, dict):
            desc += f"[{len(obj)}]" + str(list(obj)[:4])[:120]
        elif isinstance(obj, (list, tuple, set)):
            desc += f"[{len(obj)}]"
        elif callable(obj):
            desc += f" {getattr(obj, '__qualname__', '')}"
        chain.append(desc)
    return " <- ".join(chain)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f}M"


class MemTrace:
    def __init__(self, period_s: float, frames: int, referrers: tuple[str, ...] = ()) -> None:
        self.period_s = period_s
        self.frames = frames
        self.referrers = referrers  # type names: log what holds their newest instance
        self.collect = os.environ.get("RAFTQ_TRACEMALLOC_COLLECT") == "1"
        self.trim = os.environ.get("RAFTQ_TRACEMALLOC_TRIM") == "1"
        self._stop = threading.Event()
        self._first: tracemalloc.Snapshot | None = None
        self._types: collections.Counter[str] = collections.Counter()
        self._gc_t0 = 0.0
        self._pauses: dict[int, list[float]] = {}  # generation -> pause times since the last report

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self._pauses.setdefault(info["generation"], []).append(
                time.perf_counter() - self._gc_t0
            )

    def start(self) -> None:
        if self.frames > 0:  # 0: no tracing, only the rss, heap and gc lines
            tracemalloc.start(self.frames)
        gc.callbacks.append(self._on_gc)
        threading.Thread(target=self._run, name="memtrace", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.report()
            except Exception:  # a debug aid must not take the node down
                log.exception("memtrace failed")

    def _snapshot(self) -> tracemalloc.Snapshot:
        skip = tracemalloc.Filter(False, tracemalloc.__file__)
        return tracemalloc.take_snapshot().filter_traces([skip])

    def report(self) -> None:
        """One round of lines (the first one only sets the baseline)."""
        snap = self._snapshot() if tracemalloc.is_tracing() else None
        self._report_rss()
        if self.trim:  # how much of RssAnon is free heap glibc keeps
            t0 = time.monotonic()
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            ms = (time.monotonic() - t0) * 1e3
            log.warning("memtrace trim %.1f ms: anon now %s", ms, _mib(proc_status()["RssAnon"]))
        self._report_gc()
        counts = _type_counts()
        if not self._types:
            self._first, self._types = snap, counts
            return
        if snap is not None and self._first is not None:
            self._report_sites(snap.compare_to(self._first, "traceback")[:TOP])
        grown = sorted(((counts[k] - self._types[k], k) for k in counts), reverse=True)[:TOP]
        log.warning("memtrace gc %s", ", ".join(f"{k} {d:+d} ({counts[k]})" for d, k in grown))
        for name in self.referrers:
            log.warning("memtrace held %s: %s", name, held_by(name))

    def _report_rss(self) -> None:
        traced, _ = tracemalloc.get_traced_memory()
        st, heap = proc_status(), malloc_heap()
        log.warning(
            "memtrace rss rss=%s anon=%s file=%s traced=%s tracemalloc_overhead=%s heap=%s",
            _mib(st["VmRSS"]), _mib(st["RssAnon"]), _mib(st["RssFile"]), _mib(traced),
            _mib(tracemalloc.get_tracemalloc_memory()),
            {k: _mib(v) for k, v in heap.items()},
        )  # fmt: skip

    def _report_gc(self) -> None:
        stats = [(g["collections"], g["collected"]) for g in gc.get_stats()]
        pauses, self._pauses = self._pauses, {}
        worst = {g: f"{len(p)}x max {max(p) * 1e3:.1f} ms" for g, p in sorted(pauses.items())}
        log.warning(
            "memtrace gen counts=%s (collections, collected)=%s pauses=%s",
            gc.get_count(), stats, worst,
        )  # fmt: skip
        if self.collect:  # tells reachable objects from cyclic garbage not yet collected
            t0 = time.monotonic()
            found = gc.collect()
            ms = (time.monotonic() - t0) * 1e3
            log.warning("memtrace collect %d unreachable in %.0f ms", found, ms)

    def _report_sites(self, diffs: list[tracemalloc.StatisticDiff]) -> None:
        for stat in diffs:
            frames = list(reversed(stat.traceback))[:6]  # the innermost first
            where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}" for f in frames)
            log.warning(
                "memtrace site %+d B (%+d objs) now %s in %d: %s",
                stat.size_diff, stat.count_diff, _mib(stat.size), stat.count, where,
            )  # fmt: skip


def start_from_env() -> MemTrace | None:
    """Start tracing when RAFTQ_TRACEMALLOC is set to a period in seconds."""
    raw = os.environ.get("RAFTQ_TRACEMALLOC", "")
    if not raw:
        return None
    frames = int(os.environ.get("RAFTQ_TRACEMALLOC_FRAMES", "8"))
    names = tuple(n for n in os.environ.get("RAFTQ_TRACEMALLOC_REFERRERS", "").split(",") if n)
    trace = MemTrace(float(raw), frames, names)
    trace.start()
    log.warning("memtrace on: every %s s, %d frames", raw, trace.frames)
    return trace
