"""Byte-level primitives shared by the command codec and the record format.

Unsigned LEB128 varints and length-prefixed fields: compact for the small
numbers and short strings most fields hold, and unambiguous (a varint is
prefix-free, so ``varint(len) + data`` is too). Fixed-width big-endian
integers are used where bytes must sort numerically (table keys).

Decoding errors raise ``Malformed``; the command codec turns it into
``InvalidArgument("command", ...)`` at its one entry point.
"""

from __future__ import annotations

import struct

U64 = struct.Struct(">Q")
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
_MAX_VARINT_BYTES = 10  # 64 bits / 7 bits per byte, rounded up


class Malformed(ValueError):
    """The bytes are not a valid encoding (truncated, overlong, bad UTF-8)."""


def put_uvarint(buf: bytearray, n: int) -> None:
    """Append ``n`` (0 <= n < 2**64) as an unsigned LEB128 varint."""
    while n >= 0x80:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def put_bytes(buf: bytearray, data: bytes) -> None:
    """Append ``data`` prefixed by its length."""
    put_uvarint(buf, len(data))
    buf += data


def put_str(buf: bytearray, text: str) -> None:
    """Append ``text`` as length-prefixed UTF-8."""
    put_bytes(buf, text.encode())


class Reader:
    """Sequential decoder over one buffer; every read checks bounds."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def uvarint(self) -> int:
        pos = self.pos
        if pos < len(self.data) and self.data[pos] < 0x80:  # one byte: most of them
            self.pos = pos + 1
            return self.data[pos]
        return self._long_uvarint()

    def _long_uvarint(self) -> int:
        data, pos = self.data, self.pos
        result = shift = 0
        for i in range(_MAX_VARINT_BYTES):
            if pos + i >= len(data):
                raise Malformed("truncated varint")
            byte = data[pos + i]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos + i + 1
                if result > U64_MAX:
                    raise Malformed("varint exceeds 64 bits")
                return result
            shift += 7
        raise Malformed("varint longer than 10 bytes")

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise Malformed(f"truncated: need {n} bytes at {self.pos}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def bytes_(self) -> bytes:
        return self.take(self.uvarint())

    def str_(self) -> str:
        raw = self.bytes_()
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise Malformed("invalid UTF-8") from exc

    def flag(self) -> bool:
        value = self.uvarint()
        if value > 1:
            raise Malformed(f"boolean out of range: {value}")
        return value == 1

    def rest(self) -> bytes:
        chunk = self.data[self.pos :]
        self.pos = len(self.data)
        return chunk

    def end(self) -> None:
        """Trailing bytes mean the input was not what we encoded."""
        if self.pos != len(self.data):
            raise Malformed(f"{len(self.data) - self.pos} trailing bytes")
