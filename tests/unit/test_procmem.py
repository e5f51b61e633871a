"""chaos/procmem.py: the soak's resident memory by kind adds up and sorts
mappings right (this process's own /proc/self/smaps)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from chaos.procmem import KINDS, breakdown
from chaos.soak import proc_memory

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="Linux /proc")


def test_kinds_add_up_to_rss() -> None:
    kinds = breakdown(os.getpid())
    assert set(kinds) == set(KINDS)
    rss, _anon = proc_memory(os.getpid())
    assert kinds["code"] > 0 and kinds["heap"] + kinds["anon"] > 0
    assert abs(sum(kinds.values()) - rss) < 0.05 * rss  # two reads, a moment apart


def test_files_under_the_data_dir_are_journal_and_mdb_is_lmdb(tmp_path: Path) -> None:
    size = 64 * 4096
    for name in ("raft.journal", "data.mdb"):
        (tmp_path / name).write_bytes(b"\0" * size)
    before = breakdown(os.getpid(), str(tmp_path))
    with open(tmp_path / "raft.journal", "r+b") as j, open(tmp_path / "data.mdb", "rb") as d:
        mj = mmap.mmap(j.fileno(), size)
        md = mmap.mmap(d.fileno(), size, prot=mmap.PROT_READ)
        mj[:] = b"x" * size  # touch every page
        assert sum(md[i] for i in range(0, size, 4096)) == 0
        after = breakdown(os.getpid(), str(tmp_path))
        mj.close()
        md.close()
    assert after["journal"] - before["journal"] >= size
    assert after["lmdb"] - before["lmdb"] >= size


def test_a_gone_process_is_empty() -> None:
    assert breakdown(2**22 + 12345) == {}
