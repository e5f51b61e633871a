"""raft_queue/testing/files.py: a sparse file read and copied without its holes."""

from __future__ import annotations

import os
from pathlib import Path

from raft_queue.testing.files import copy_tree_sparse, written_bytes

GIB = 1 << 30


def _sparse(path: Path) -> None:
    with open(path, "wb") as f:
        f.write(b"HEAD-MARKER")
        f.truncate(GIB)
        f.seek(GIB - 4096)
        f.write(b"TAIL-MARKER")


def test_written_bytes_finds_text_on_both_sides_of_a_hole_without_reading_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "data.mdb"
    _sparse(path)
    got = written_bytes(path)
    assert b"HEAD-MARKER" in got and b"TAIL-MARKER" in got
    assert len(got) < 64 << 20  # not the GiB of zeros between
    assert written_bytes(tmp_path / "gone") == b""


def test_copy_tree_sparse_keeps_the_holes(tmp_path: Path) -> None:
    (tmp_path / "src" / "p").mkdir(parents=True)
    _sparse(tmp_path / "src" / "p" / "data.mdb")
    copy_tree_sparse(tmp_path / "src", tmp_path / "dst")
    copy = tmp_path / "dst" / "p" / "data.mdb"
    assert os.stat(copy).st_size == GIB
    assert os.stat(copy).st_blocks * 512 < 64 << 20
    assert b"TAIL-MARKER" in written_bytes(copy)
