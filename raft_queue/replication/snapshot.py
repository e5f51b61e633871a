"""Snapshot files: our state image followed by pysyncobj's own bookkeeping.

Layout: ``[image bytes][meta JSON][8-byte little-endian meta length]``. The
meta is pysyncobj's ``(last entry, previous entry, cluster)`` tuple as JSON
(commands hex-encoded, nodes by address), never a pickle, plus the image's
length and CRC-32. The same file is what the leader streams to a lagging
follower (install snapshot) in chunks; a chunk lost with a dropped connection
leaves a file whose image has a hole, so an image is checked against its
CRC before it replaces any state (``check_image`` / ``extract_image``).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

from raft_queue.replication.diskfiles import write_out_in_slices

_TRAILER = struct.Struct("<Q")
_CHUNK = 1 << 20


class CorruptSnapshot(OSError):
    """A snapshot whose image does not match the length and CRC it was written with."""


def _entry_to_json(entry: Any) -> list[Any]:
    command, idx, term = entry
    return [bytes(command).hex(), idx, term]


def _entry_from_json(raw: list[Any]) -> tuple[bytes, int, int]:
    return (bytes.fromhex(raw[0]), int(raw[1]), int(raw[2]))


def encode_meta(data: Any, image_len: int | None = None, crc: int | None = None) -> bytes:
    last, prev, cluster = data
    nodes = sorted(getattr(n, "id", n) for n in cluster)
    obj: dict[str, Any] = {
        "last": _entry_to_json(last),
        "prev": _entry_to_json(prev),
        "cluster": nodes,
    }
    if image_len is not None:
        obj["image_len"], obj["crc32"] = image_len, crc
    return json.dumps(obj).encode()


def decode_meta(raw: bytes) -> tuple[Any, Any, set[str]]:
    obj = json.loads(raw)
    return (_entry_from_json(obj["last"]), _entry_from_json(obj["prev"]), set(obj["cluster"]))


def write(path: str, data: Any, write_image: Callable[[BinaryIO], None]) -> None:
    """Write image + meta (with the image's length and CRC) to ``path``; fsync it."""
    with open(path, "w+b") as f:
        write_image(f)
        image_len = f.seek(0, os.SEEK_END)
        crc = _crc(f, image_len)
        f.seek(image_len)
        meta = encode_meta(data, image_len, crc)
        f.write(meta + _TRAILER.pack(len(meta)))
        f.flush()
        write_out_in_slices(f.fileno(), f.tell())  # not all at once (diskfiles.py)
        os.fsync(f.fileno())


def _crc(f: BinaryIO, length: int, out: BinaryIO | None = None) -> int:
    """CRC-32 of ``f``'s first ``length`` bytes (copied to ``out`` if given)."""
    f.seek(0)
    crc, left = 0, length
    while left:
        chunk = f.read(min(left, _CHUNK))
        if not chunk:
            raise CorruptSnapshot(f"snapshot image ends {left} bytes early")
        crc = zlib.crc32(chunk, crc)
        if out is not None:
            out.write(chunk)
        left -= len(chunk)
    return crc


def _expected(path: str) -> tuple[int | None, int | None]:
    """(image length, CRC-32) recorded in ``path``'s meta; (None, None) for a
    snapshot written before they were recorded."""
    with open(path, "rb") as f:
        end = f.seek(0, os.SEEK_END)
        f.seek(end - _TRAILER.size)
        (meta_len,) = _TRAILER.unpack(f.read(_TRAILER.size))
        f.seek(end - _TRAILER.size - meta_len)
        obj = json.loads(f.read(meta_len))
    return obj.get("image_len"), obj.get("crc32")


def _verify(path: str, image_len: int, crc: int) -> None:
    want_len, want_crc = _expected(path)
    if want_len is None:
        return
    if want_len != image_len or want_crc != crc:
        raise CorruptSnapshot(
            f"snapshot {path}: image of {image_len} bytes with CRC {crc:#010x}, "
            f"written as {want_len} bytes with CRC {want_crc:#010x} (lost chunks?)"
        )


def check_image(path: str, image_len: int) -> None:
    """Raise CorruptSnapshot unless the image is the one that was written."""
    with open(path, "rb") as f:
        _verify(path, image_len, _crc(f, image_len))


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
    """Copy the image part of snapshot ``path`` into file ``dest`` (fsynced);
    CorruptSnapshot (``dest`` left for the caller to remove) if it does not
    match the length and CRC it was written with."""
    with open(path, "rb") as src, open(dest, "wb") as out:
        crc = _crc(src, image_len, out)
        out.flush()
        os.fsync(out.fileno())
    _verify(path, image_len, crc)


def read_image(path: str, image_len: int) -> bytes:
    """The image part of snapshot ``path``, checked against its length and CRC."""
    with open(path, "rb") as f:
        image = f.read(image_len)
    _verify(path, len(image), zlib.crc32(image))
    return image


def remove_quietly(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)
