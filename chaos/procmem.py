"""What a process's resident memory is made of, from ``/proc/<pid>/smaps``.

``breakdown(pid)`` sums the ``Rss`` of every mapping into kinds:

- ``heap``: glibc's main arena (``[heap]``, grown by brk);
- ``anon``: every other anonymous mapping (thread stacks, glibc's per-thread
  arenas, pymalloc's arenas, large malloc blocks mapped on their own);
- ``lmdb``: LMDB's data and lock files (``*.mdb``): file pages the process has
  touched through LMDB's read-only map, which the kernel can drop and re-read;
- ``journal``: every other file under the node's data directory (the Raft
  journals, written through a shared mapping);
- ``code``: every other file (the Python binary, shared libraries).

``anon + heap`` is what the process holds and only it can free (RssAnon);
the other three are page cache the process maps (RssFile + RssShmem).
"""

from __future__ import annotations

KINDS = ("heap", "anon", "lmdb", "journal", "code")


def _kind(path: str) -> str:
    if path == "[heap]":
        return "heap"
    if not path or path.startswith("["):
        return "anon"  # [stack], [anon:...], [vdso]-like pseudo paths
    if path.endswith(".mdb"):
        return "lmdb"
    if "/journal" in path or path.endswith((".journal", ".vote")):
        return "journal"
    return "code"


def breakdown(pid: int, data_dir: str = "") -> dict[str, int]:
    """Resident bytes of ``pid`` by kind (``KINDS``); {} if it is gone. A file
    under ``data_dir`` that is not LMDB counts as ``journal``."""
    out = dict.fromkeys(KINDS, 0)
    kind = "anon"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(maxsplit=6)
                if not head:
                    continue
                if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    path = head[5].strip() if len(head) > 5 else ""
                    kind = _kind(path)
                    if kind == "code" and data_dir and path.startswith(data_dir):
                        kind = "journal"
                elif head[0] == "Rss:":
                    out[kind] += int(head[1]) * 1024
    except OSError:
        return {}
    return out
