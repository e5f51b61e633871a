"""Partition LMDB files written out steadily, a slice at a time, off the driver.

A partition's LMDB is opened ``sync=False`` (storage/lmdb_store.py): its
pages stay dirty in the page cache, durability is the Raft journal's. After
W2 (1.2-1.8 million records) the three nodes of a dev cluster held 745 MB of
dirty pages, and the kernel's flusher wrote them all at once 30 s later
(``vm.dirty_expire_centisecs``): every journal fdatasync of the node queued
behind it (76-122 ms each on the followers, a ~250 ms stall of W4's producer;
docs/benchmarks.md, "W4's producer stall"). Here one ``raft-writeout`` thread
per process writes each registered file out every ``PERIOD_S``, 8 MB at a
time, each slice waited for (``diskfiles.write_out_in_slices``), so a journal
sync waits for at most one slice. Not durability (nothing relies on it).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from raft_queue.replication.diskfiles import write_out_in_slices

log = logging.getLogger(__name__)

PERIOD_S = 1.0

_lock = threading.Lock()
_paths: dict[str, int] = {}  # file -> how many open replicas registered it
_thread: threading.Thread | None = None


def register(path: str) -> None:
    """Write ``path`` out steadily from now on (until ``unregister``)."""
    global _thread
    with _lock:
        _paths[path] = _paths.get(path, 0) + 1
        if _thread is None:
            _thread = threading.Thread(target=_run, name="raft-writeout", daemon=True)
            _thread.start()


def unregister(path: str) -> None:
    with _lock:
        left = _paths.get(path, 0) - 1
        if left > 0:
            _paths[path] = left
        else:
            _paths.pop(path, None)


def write_out(path: str) -> None:
    """One pass over ``path`` (gone or unreadable: nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        write_out_in_slices(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _run() -> None:
    while True:
        time.sleep(PERIOD_S)
        with _lock:
            paths = list(_paths)
        for path in paths:
            try:
                write_out(path)
            except Exception:  # never let it die: the next pass tries again
                log.exception("writing out %s failed", path)
