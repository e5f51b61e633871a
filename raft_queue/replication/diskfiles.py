"""A replica's files on disk: allocated before use, read from the disk after a failure.

``PreallocatedFile`` is pysyncobj's journal file (an mmap grown by ftruncate)
with every byte allocated before the mapping covers it, so a full disk is an
OSError(ENOSPC) instead of SIGBUS. ``drop_page_cache`` evicts the cached pages
of a replica's files before it opens them (fsyncgate: after a failed fsync the
page cache may hold data the disk never got).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from pysyncobj.journal import ResizableFile

from raft_queue.storage.space import reserve

SYNC_SLICE_BYTES = 8 << 20
_SYNC_RANGE_ALL = 1 | 2 | 4  # SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER


def _sync_file_range() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):  # not Linux
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_SYNC_RANGE = _sync_file_range()


def write_out_in_slices(fd: int, length: int, slice_bytes: int = SYNC_SLICE_BYTES) -> None:
    """Write ``fd``'s first ``length`` dirty bytes to the disk ``slice_bytes``
    at a time, each slice waited for (Linux ``sync_file_range``; elsewhere
    nothing), before the caller's fsync. A big snapshot fsynced at once put
    170 MB in the disk's queue, and every journal fdatasync of the node
    waited behind it (75-125 ms, issue 17): one slice at a time, a journal
    sync waits for at most one slice. Not durability: the fsync that follows is."""
    fn = _SYNC_RANGE
    if fn is None:
        return
    for offset in range(0, length, slice_bytes):
        if fn(fd, offset, min(slice_bytes, length - offset), _SYNC_RANGE_ALL) != 0:
            return  # the fsync after it writes (and reports) what is left


def drop_page_cache(path: str) -> None:
    """Drop the clean cached pages of every file under ``path`` (before a
    replica opens them): after a failed fsync, Linux marks the pages it could
    not write clean and keeps them, so reads would serve data the disk never
    got ("fsyncgate"); once dropped, reads come from the disk. Pages mapped
    or still dirty stay (nothing of this replica is open yet)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or not os.path.isdir(path):
        return
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


class PreallocatedFile(ResizableFile):
    """pysyncobj's journal file (an mmap grown by ftruncate, so sparse) with
    every byte of it allocated before the mapping covers it (``reserve``)."""

    def __init__(self, path: str, default: bytes | None = None) -> None:
        super().__init__(path, defaultContent=default)
        reserve(self._ResizableFile__f.fileno(), 0, self._ResizableFile__mm.size())

    def write(self, offset: int, values: bytes) -> None:
        # Grow the mapping (ftruncate: a hole), then allocate the hole before
        # anything is written through the mapping into it.
        mm = self._ResizableFile__mm
        end = offset + len(values)
        while end > mm.size():
            size = mm.size()
            new = max(int(size * self._ResizableFile__resizeFactor), end)
            mm.resize(new)
            reserve(self._ResizableFile__f.fileno(), size, new - size)
        super().write(offset, values)
