"""Disk blocks allocated before a mapping writes into them.

A write through a shared file mapping into a hole of a sparse file allocates
the block at the page fault; on a full disk that is a SIGBUS, which kills the
whole node process, instead of an error a caller can refuse cleanly.
``reserve`` allocates the blocks first (posix_fallocate), so a full disk is
an OSError(ENOSPC) before anything is written. Used by the Raft journal
(replication/diskfiles.py) and by LMDB's ``data.mdb`` (lmdb_store.py).
"""

from __future__ import annotations

import errno
import os

# A file system that cannot preallocate: the file stays sparse.
_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS)


def reserve(fd: int, offset: int, length: int) -> None:
    """Allocate disk blocks for ``[offset, offset + length)`` of ``fd`` now.

    glibc emulates posix_fallocate where the file system lacks fallocate
    (FUSE, some network file systems) by writing a zero byte into each block
    that reads as zero: safe only on a range nobody writes meanwhile. Both
    callers reserve beyond the data they have written, from the one thread
    that writes the file."""
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in _UNSUPPORTED:
            return
        raise
