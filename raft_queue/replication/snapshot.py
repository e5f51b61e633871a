"""Snapshot files: our state image followed by pysyncobj's own bookkeeping.

Layout: ``[image bytes][meta JSON][8-byte little-endian meta length]``. The
meta is pysyncobj's ``(last entry, previous entry, cluster)`` tuple as JSON
(commands hex-encoded, nodes by address), never a pickle. The same file is
what the leader streams to a lagging follower (install snapshot).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from typing import Any, BinaryIO

_TRAILER = struct.Struct("<Q")


def _entry_to_json(entry: Any) -> list[Any]:
    command, idx, term = entry
    return [bytes(command).hex(), idx, term]


def _entry_from_json(raw: list[Any]) -> tuple[bytes, int, int]:
    return (bytes.fromhex(raw[0]), int(raw[1]), int(raw[2]))


def encode_meta(data: Any) -> bytes:
    last, prev, cluster = data
    nodes = sorted(getattr(n, "id", n) for n in cluster)
    return json.dumps(
        {"last": _entry_to_json(last), "prev": _entry_to_json(prev), "cluster": nodes}
    ).encode()


def decode_meta(raw: bytes) -> tuple[Any, Any, set[str]]:
    obj = json.loads(raw)
    return (_entry_from_json(obj["last"]), _entry_from_json(obj["prev"]), set(obj["cluster"]))


def write(path: str, data: Any, write_image: Callable[[BinaryIO], None]) -> None:
    """Write image + meta to ``path`` and fsync it."""
    with open(path, "wb") as f:
        write_image(f)
        f.seek(0, os.SEEK_END)
        meta = encode_meta(data)
        f.write(meta + _TRAILER.pack(len(meta)))
        f.flush()
        os.fsync(f.fileno())


def read_meta(path: str) -> tuple[tuple[Any, Any, set[str]], int]:
    """The pysyncobj tuple and the length of the image before it."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(end - _TRAILER.size)
        (meta_len,) = _TRAILER.unpack(f.read(_TRAILER.size))
        image_len = end - _TRAILER.size - meta_len
        f.seek(image_len)
        return decode_meta(f.read(meta_len)), image_len


def extract_image(path: str, image_len: int, dest: str) -> None:
    """Copy the image part of snapshot ``path`` into file ``dest`` (fsynced)."""
    with open(path, "rb") as src, open(dest, "wb") as out:
        left = image_len
        while left:
            chunk = src.read(min(left, 1 << 20))
            if not chunk:
                raise OSError(f"snapshot {path} is truncated")
            out.write(chunk)
            left -= len(chunk)
        out.flush()
        os.fsync(out.fileno())


def read_image(path: str, image_len: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(image_len)


def remove_quietly(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)
