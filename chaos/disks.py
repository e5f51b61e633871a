"""Disk faults under one node's data directory (root only; Linux).

- ``Tmpfs``: a small tmpfs mounted on the directory; ``fill()`` shrinks it
  to what is used plus a little (``mount -o remount,size=``), so the disk is
  full for the node; ``grow()`` gives space back.
- ``EioMount``: the directory as a FUSE passthrough (chaos/eiofs.py) over a
  real directory beside it; ``fail()`` makes every write and sync return
  EIO, ``heal()`` ends it.

Both must be set up before the node starts (the node's files live in them)
and are unmounted lazily (``umount -l`` / ``fusermount3 -u -z``) in
``close()``, which the context managers always call, so a failing test
leaves no mount behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from raft_queue.testing.files import copy_tree_sparse


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


def used_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class Tmpfs:
    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = Path(path)
        self.size_bytes = size_bytes
        self.mounted = False

    def mount(self) -> Tmpfs:
        self.path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", str(self.path))
        self.mounted = True
        return self

    def resize(self, size_bytes: int) -> None:
        """remount with a new size (tmpfs refuses one below what is used)."""
        _run("mount", "-o", f"remount,size={size_bytes}", str(self.path))
        self.size_bytes = size_bytes

    def fill(self, leave_bytes: int) -> None:
        """Shrink to what is used now plus ``leave_bytes`` (page-rounded)."""
        self.resize(used_bytes(self.path) + leave_bytes)

    def grow(self, size_bytes: int) -> None:
        self.resize(max(size_bytes, self.size_bytes))

    def close(self) -> None:
        if self.mounted:
            # What the node left, kept beside it for a failed run's evidence
            # (the campaign deletes the whole run directory when it passes).
            with contextlib.suppress(Exception):
                copy_tree_sparse(self.path, self.path.with_name(self.path.name + ".tmpfs-copy"))
            with contextlib.suppress(Exception):
                _run("umount", "-l", str(self.path))
            self.mounted = False


class EioMount:
    """``path`` served by chaos/eiofs.py from ``path.parent / (name + ".real")``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.source = self.path.with_name(self.path.name + ".real")
        self.flag = self.path.with_name(self.path.name + ".eio")
        self.proc: subprocess.Popen[bytes] | None = None

    def mount(self, timeout_s: float = 15.0) -> EioMount:
        self.path.mkdir(parents=True, exist_ok=True)
        self.source.mkdir(parents=True, exist_ok=True)
        log = open(self.path.with_name(self.path.name + ".fuse.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.eiofs", str(self.source), str(self.path), str(self.flag)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"FUSE mount of {self.path} failed")
            time.sleep(0.05)
        return self

    def fail(self, reads: bool = False) -> None:
        self.flag.write_text("read" if reads else "write")

    def heal(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.flag.unlink()

    def close(self) -> None:
        self.heal()
        if os.path.ismount(self.path):
            with contextlib.suppress(Exception):
                _run("fusermount3", "-u", "-z", str(self.path))
        if self.proc is not None:
            with contextlib.suppress(Exception):
                self.proc.terminate()
                self.proc.wait(10)
            self.proc = None


@contextlib.contextmanager
def tmpfs(path: Path, size_bytes: int) -> Iterator[Tmpfs]:
    fs = Tmpfs(path, size_bytes)
    try:
        yield fs.mount()
    finally:
        fs.close()


@contextlib.contextmanager
def eio_mount(path: Path) -> Iterator[EioMount]:
    fs = EioMount(path)
    try:
        yield fs.mount()
    finally:
        fs.close()
        shutil.rmtree(fs.source, ignore_errors=True)


def can_mount() -> bool:
    return os.geteuid() == 0 and sys.platform.startswith("linux")


def have_fuse() -> bool:
    if not (can_mount() and os.path.exists("/dev/fuse") and shutil.which("fusermount3")):
        return False
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError):
        return False
    return True
