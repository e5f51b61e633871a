"""glibc's allocator, set for a node before it starts any thread.

glibc gives threads their own malloc arenas, up to 8 per CPU on 64-bit
(mallopt(3), M_ARENA_MAX). A node runs many threads that allocate (the
asyncio loop, the Raft driver, grpc's C-core pollers, executor threads) and
each arena keeps the memory freed into it: in the soak (docs/reliability.md,
"Soak") the anonymous memory outside the main heap swung by ~5 MiB and crept
up +0.46 MiB/min with Python's own objects flat; with two arenas it was flat
(+0.09). mallopt(3): "The more arenas you have, the lower the per-thread
contention, but the higher the memory usage".

``limit_arenas()`` sets M_ARENA_MAX before any thread exists (it only gates
new arenas; ones already made stay). An operator's own ``MALLOC_ARENA_MAX``
(or ``GLIBC_TUNABLES``) wins: then this does nothing. Not glibc (musl,
macOS): nothing either.
"""

from __future__ import annotations

import ctypes
import os
import re

M_ARENA_MAX = -8  # malloc.h
ARENAS = 2  # the main arena and one more: what the soak measured flat


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at ``arenas``; True if set here."""
    if "MALLOC_ARENA_MAX" in os.environ or "arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(M_ARENA_MAX, arenas))


def arena_count() -> int:
    """How many malloc arenas this process has (``malloc_info``'s heaps); 0
    if glibc cannot tell. For tests and debugging."""
    libc = _libc()
    if libc is None or not hasattr(libc, "malloc_info"):
        return 0
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        return 0
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    text = ctypes.string_at(buf, size.value).decode() if buf else ""
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(ctypes.cast(buf, ctypes.c_void_p))
    return len(re.findall(r'<heap nr="\d+">', text))
