"""A FUSE passthrough file system that fails I/O with EIO on demand.

    python -m chaos.eiofs SOURCE MOUNTPOINT FLAG

Every operation is passed to SOURCE (a real directory, real files, a real
fdatasync underneath). While the file FLAG exists, write, fsync, fdatasync,
truncate and fallocate fail with EIO (reads too if FLAG contains "read"),
as a disk that went bad does. Delete FLAG to heal. Runs in the foreground
until unmounted (``fusermount3 -u -z MOUNTPOINT``) or killed; the mount is
``allow_other``-free and single-threaded (enough for one node).

Binding: mfusepy (ctypes bindings for libfuse 2 and 3; Debian's fuse3 gives
libfuse3 and fusermount3).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

from mfusepy import FUSE, FuseOSError, Operations


class EioFs(Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, source: str, flag: str) -> None:
        self.source = os.path.realpath(source)
        self.flag = flag

    def _path(self, path: str) -> str:
        return os.path.join(self.source, path.lstrip("/"))

    def _faulty(self, reading: bool = False) -> None:
        try:
            with open(self.flag) as f:
                mode = f.read()
        except OSError:
            return
        if not reading or "read" in mode:
            raise FuseOSError(errno.EIO)

    # ---- metadata ---------------------------------------------------------------------
    def access(self, path: str, amode: int) -> int:
        if not os.access(self._path(path), amode):
            raise FuseOSError(errno.EACCES)
        return 0

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        st = os.lstat(self._path(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")
        out: dict[str, Any] = {k: getattr(st, k) for k in keys}
        for k in ("st_atime", "st_mtime", "st_ctime"):
            out[k] = getattr(st, k + "_ns") if self.use_ns else getattr(st, k)
        return out

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._path(path))]

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._path(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree")
        return {k: getattr(st, k) for k in (*keys, "f_files", "f_flag", "f_frsize", "f_namemax")}

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._path(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._path(path))

    def unlink(self, path: str) -> None:
        os.unlink(self._path(path))

    def rename(self, old: str, new: str) -> None:
        os.rename(self._path(old), self._path(new))

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._path(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._path(path), uid, gid)

    def utimens(self, path: str, times: Any = None) -> None:
        os.utime(self._path(path), ns=times) if times else os.utime(self._path(path))

    # ---- files ------------------------------------------------------------------------
    def open(self, path: str, flags: int) -> int:
        return os.open(self._path(path), flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._faulty(reading=True)
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._faulty()
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: Any = None) -> None:
        self._faulty()
        if fh is not None:
            os.ftruncate(fh, length)
        else:
            os.truncate(self._path(path), length)

    def fallocate(self, path: str, mode: int, offset: int, length: int, fh: int) -> int:
        self._faulty()
        if mode:
            raise FuseOSError(errno.EOPNOTSUPP)
        os.posix_fallocate(fh, offset, length)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self._faulty()
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: Any) -> int:
        self._faulty()
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0


def main(argv: list[str]) -> None:
    source, mountpoint, flag = argv
    FUSE(EioFs(source, flag), mountpoint, foreground=True, nothreads=True)


if __name__ == "__main__":
    main(sys.argv[1:])
