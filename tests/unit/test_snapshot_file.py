"""Snapshot files carry their image's length and CRC-32: an image with a hole
(chunks lost when a connection dropped mid-transfer) is refused, never restored."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import pytest

from raft_queue.replication import snapshot

META = ((b"\x01cmd", 120, 3), (b"\x01prev", 119, 3), {"127.0.0.1:1", "127.0.0.1:2"})
IMAGE = os.urandom(3 * 65536 + 123)


def _write(path: Path, image: bytes = IMAGE) -> None:
    def write_image(f: BinaryIO) -> None:
        f.write(image)

    snapshot.write(str(path), META, write_image)


def _with_hole(path: Path, start: int, size: int) -> None:
    """The file as a follower would assemble it if chunks [start, start+size) were lost."""
    raw = path.read_bytes()
    path.write_bytes(raw[:start] + raw[start + size :])


def test_an_intact_snapshot_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "raft.dump"
    _write(path)
    meta, image_len = snapshot.read_meta(str(path))
    assert meta[0] == META[0] and meta[1] == META[1] and meta[2] == META[2]
    assert image_len == len(IMAGE)
    snapshot.extract_image(str(path), image_len, str(tmp_path / "image"))
    assert (tmp_path / "image").read_bytes() == IMAGE
    assert snapshot.read_image(str(path), image_len) == IMAGE
    snapshot.check_image(str(path), image_len)


@pytest.mark.parametrize("start", [0, 65536, 2 * 65536])
def test_an_image_with_a_lost_chunk_is_refused(tmp_path: Path, start: int) -> None:
    path = tmp_path / "raft.dump"
    _write(path)
    _with_hole(path, start, 65536)
    meta, image_len = snapshot.read_meta(str(path))  # the trailer still parses
    assert meta[0] == META[0]
    with pytest.raises(snapshot.CorruptSnapshot, match="lost chunks"):
        snapshot.extract_image(str(path), image_len, str(tmp_path / "image"))
    with pytest.raises(snapshot.CorruptSnapshot):
        snapshot.read_image(str(path), image_len)
    with pytest.raises(snapshot.CorruptSnapshot):
        snapshot.check_image(str(path), image_len)


def test_a_flipped_byte_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "raft.dump"
    _write(path)
    raw = bytearray(path.read_bytes())
    raw[1000] ^= 0xFF
    path.write_bytes(bytes(raw))
    _, image_len = snapshot.read_meta(str(path))
    with pytest.raises(snapshot.CorruptSnapshot):
        snapshot.check_image(str(path), image_len)


def test_a_snapshot_written_before_checksums_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "raft.dump"
    meta = snapshot.encode_meta(META)  # no image_len / crc32, as older versions wrote
    path.write_bytes(IMAGE + meta + snapshot._TRAILER.pack(len(meta)))
    _, image_len = snapshot.read_meta(str(path))
    assert snapshot.read_image(str(path), image_len) == IMAGE
