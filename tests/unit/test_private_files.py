"""security/files.py: a data tree left group- or world-readable (by an older
version, under the default umask) is made the node user's own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from raft_queue.security.files import tighten


def test_an_open_tree_is_tightened_to_0700_and_0600(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "p1").mkdir(parents=True)
    (root / "p1" / "data.mdb").write_bytes(b"x")
    (root / "role.json").write_text("{}")
    os.symlink("/etc/hostname", root / "link")  # not followed
    for path, mode in ((root, 0o755), (root / "p1", 0o775), (root / "p1" / "data.mdb", 0o644),
                       (root / "role.json", 0o666)):  # fmt: skip
        path.chmod(mode)
    before = stat.S_IMODE(os.stat("/etc/hostname").st_mode)
    tighten(str(root))
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in (root, *root.rglob("*"))
             if not p.is_symlink()}  # fmt: skip
    assert modes == {"data": 0o700, "p1": 0o700, "data.mdb": 0o600, "role.json": 0o600}
    assert stat.S_IMODE(os.stat("/etc/hostname").st_mode) == before
