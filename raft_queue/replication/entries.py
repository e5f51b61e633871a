"""Raft entry commands, explicitly encoded (Raft entry format 2).

pysyncobj stores an entry's command as a type byte followed by a pickle:
``(funcID, args, kwargs)`` for ``@replicated`` calls, ``['add'|'rem', id,
node]`` for membership changes, an int for code versions, and unpickles it
when the entry is applied. Whoever can get an entry into the log (any
member, the leader above all) could then run code on every replica. Here a
command is a type byte (pysyncobj's: 0 regular, 1 no-op, 2 membership, 3
version), the format byte ``FORMAT`` and:

- regular: the group's state-machine bytes (``ReplicatedGroup.apply_bytes``
  decodes them with its own codec: core/commands.py, core/metadata_commands.py);
- membership: ``a`` (add) or ``r`` (remove), then the member's Raft address
  in UTF-8;
- version: ``>I`` version number;
- no-op: nothing (the type byte alone, as pysyncobj writes it).

Entries written by earlier versions (a pickle where ``FORMAT`` is) are
refused (``OldEntryFormat``, naming the journal) when a group opens: see
docs/internals.md, "Data format".
"""

from __future__ import annotations

import struct

from raft_queue import errors

REGULAR, NO_OP, MEMBERSHIP, VERSION = 0, 1, 2, 3
FORMAT = 0xA2  # "entry format 2"; a pickle (format 1) has 0x80 here
_PREFIX = {k: bytes((k, FORMAT)) for k in (REGULAR, MEMBERSHIP, VERSION)}
_OPS = {"add": b"a", "rem": b"r"}
_OP_NAMES = {b"a": "add", b"r": "rem"}
_VER = struct.Struct(">I")
MAX_ADDRESS_BYTES = 1024


OldEntryFormat = errors.OldEntryFormat


def regular(payload: bytes) -> bytes:
    return _PREFIX[REGULAR] + payload


def membership(op: str, address: str) -> bytes:
    """``op``: "add" or "rem"."""
    raw = address.encode()
    if op not in _OPS or not raw or len(raw) > MAX_ADDRESS_BYTES or b":" not in raw:
        raise ValueError(f"bad membership change {op!r} {address!r}")
    return _PREFIX[MEMBERSHIP] + _OPS[op] + raw


def version(number: int) -> bytes:
    return _PREFIX[VERSION] + _VER.pack(number)


def kind(command: bytes) -> int:
    """The entry's type byte; OldEntryFormat for an entry of another format."""
    if not command:
        raise OldEntryFormat("empty Raft entry")
    k = command[0]
    if k == NO_OP:
        return k
    if k not in _PREFIX or len(command) < 2 or command[1] != FORMAT:
        raise OldEntryFormat(
            f"Raft entry of type {k} in an older entry format (pysyncobj pickle); this "
            "version of raft_queue reads only entry format 2 (docs/internals.md, Data format)"
        )
    return k


def regular_payload(command: bytes) -> bytes:
    return bytes(command[2:])


def parse_membership(command: bytes) -> tuple[str, str]:
    """(op, address) of a membership entry; ValueError if malformed."""
    op = _OP_NAMES.get(bytes(command[2:3]))
    raw = bytes(command[3:])
    if op is None or not raw or len(raw) > MAX_ADDRESS_BYTES:
        raise ValueError("malformed membership entry")
    address = raw.decode()
    if ":" not in address:
        raise ValueError("malformed membership entry")
    return op, address


def parse_version(command: bytes) -> int:
    if len(command) != 2 + _VER.size:
        raise ValueError("malformed version entry")
    return int(_VER.unpack_from(command, 2)[0])
