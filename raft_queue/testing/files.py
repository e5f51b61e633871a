"""Reading and copying a node's files in tests without their holes.

With LMDB's writemap a replica's ``data.mdb`` is as long as the map (1 GiB
to start) and sparse (storage/lmdb_store.py). Reading it whole reads a GiB
of zeros per replica, and ``shutil.copytree`` writes them: a test that
greps or keeps a node's files reads or copies only what the file system
holds (SEEK_DATA / SEEK_HOLE; ``cp --sparse=always``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def written_bytes(path: Path) -> bytes:
    """The file's data regions, in order, joined by a zero byte (a hole reads
    as zeros, so no text spans one); b"" if it is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # replaced (compaction) or removed meanwhile
        return b""
    try:
        size, parts, offset = os.fstat(fd).st_size, [], 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after offset
                break
            end = os.lseek(fd, start, os.SEEK_HOLE)
            parts.append(os.pread(fd, end - start, start))
            offset = end
        return b"\0".join(parts)
    finally:
        os.close(fd)


def copy_tree_sparse(src: Path, dst: Path) -> None:
    """``src`` copied to ``dst`` (which must not exist), holes kept."""
    subprocess.run(
        ["cp", "-a", "--sparse=always", str(src), str(dst)],
        check=True,
        capture_output=True,
        timeout=120,
    )
