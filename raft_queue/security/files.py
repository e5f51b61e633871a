"""File permissions of a node: its data (message bodies, the metadata, Raft
journals, snapshots) is readable by the node's own user only.

``private_files(data_dir)`` runs once at node start, before any thread:

- the process umask becomes 077, so every file and directory the node (and
  the libraries it drives: LMDB, pysyncobj) creates afterwards is 0600 /
  0700 whatever mode the creator asked for;
- the data directory is created 0700, and a tree left by an older version
  (0755 / 0644 under the default umask) is tightened in place, as OpenSSH
  refuses a private key others can read rather than trusting it.

The modules that create files also ask for these modes explicitly (the
journal, LMDB, the role file), so a library embedding them without this
umask still gets private files.
"""

from __future__ import annotations

import os
import stat

DIR_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077


def private_files(data_dir: str) -> None:
    """Set the umask and make ``data_dir`` (and all under it) private."""
    os.umask(UMASK)
    os.makedirs(data_dir, mode=DIR_MODE, exist_ok=True)
    tighten(data_dir)


def tighten(root: str) -> None:
    """Drop group and other permissions from ``root`` and everything under it
    (symlinks are not followed)."""
    _strip(root, DIR_MODE)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            _strip(os.path.join(dirpath, name), DIR_MODE)
        for name in filenames:
            _strip(os.path.join(dirpath, name), FILE_MODE)


def _strip(path: str, mode: int) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # removed meanwhile
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return
    os.chmod(path, stat.S_IMODE(st.st_mode) & mode)
