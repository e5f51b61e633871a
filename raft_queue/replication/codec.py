"""The Raft link codec: an explicit binary encoding of the few message types
raft_queue's Raft groups exchange (no pickle, no eval, nothing that can name
a class or a function).

pysyncobj 0.3.17 pickled every message; anyone able to send a frame to a
Raft port could run code (hazard 6 of shared/PYSYNCOBJ.md). ``encode`` turns
a message into bytes and ``decode`` turns bytes back into exactly the Python
values pysyncobj's and our handlers expect (dicts with fixed keys, ints,
bools, bytes, str addresses); anything else raises ``CodecError`` and the
connection is dropped (wire.py).

A frame body is one tag byte and the fields of that message type, in order:
integers are signed 64-bit big-endian (``q``), flags one byte (0/1),
byte strings and str (UTF-8) a ``>I`` length then the bytes, lists a ``>I``
count then the items. Every field is required, trailing bytes are an
error. The types (tag: message):

- 1 greeting: the dialer's Raft address (str); the first message of a
  connection, from the dialer only (pysyncobj sends it; "readonly" peers and
  utility commands have no encoding).
- 2 request_vote: term, last_log_index, last_log_term.
- 3 response_vote: term.
- 4 append_entries: term, commit_index, prevLogIdx, prevLogTerm, entries
  (each: command bytes, index, term).
- 5 append_entries (install snapshot): term, commit_index, then a flag and,
  if set, one chunk (data bytes, is_first, is_last); unset stands for the
  ``None``/``False`` pysyncobj sends when it has nothing to send.
- 6 next_node_idx: next_node_idx, reset, success.
- 7 timeout_now: term.
- 8 apply_command: command bytes, flag, [request_id].
- 9 apply_command_response: request_id, flag: error (1: error code) or
  (0: log_idx, log_term).
- 10 hb_batch (heartbeats.py): items (leader str, member str, term,
  commit, prev_idx, prev_term).
- 11 hb_batch_ack: acks (leader str, member str, term, next index),
  refused (leader str, member str).
- 12 pre_vote (prevote.py): term, last_log_index, last_log_term.
- 13 pre_vote_response: term, granted flag.
- 14 next_node_idx with a term (raft.py ``_SyncObj__sendNextNodeIdx``):
  next_node_idx, reset, success, term. pysyncobj's ack (6) names no term,
  so a leader counted an ack of an earlier term (delayed on a slow link
  across two elections) as if it answered its own AppendEntries; the
  leader ignores one whose term is not its own (appends.py). A message
  without "term" is still sent as 6 (pysyncobj's own, and older peers).

pysyncobj's chunked "transmission" AppendEntries is not encoded: raft.py
never sends it (appends.py) and a peer that does is not a raft_queue peer.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

__all__ = ["CodecError", "decode", "encode"]


class CodecError(ValueError):
    """A message with no encoding, or bytes that are not a valid message."""


_Q = struct.Struct(">q")
_I = struct.Struct(">I")
_QQ = struct.Struct(">qq")
_QQQ = struct.Struct(">qqq")
_QQQQ = struct.Struct(">qqqq")
_ENTRY = struct.Struct(">Iqq")  # command length, index, term
_NEXT = struct.Struct(">qBB")
_NEXT_TERM = struct.Struct(">qBBq")

GREETING, REQUEST_VOTE, RESPONSE_VOTE, APPEND, SNAPSHOT = 1, 2, 3, 4, 5
NEXT_NODE_IDX, TIMEOUT_NOW, APPLY_COMMAND, APPLY_RESPONSE, HB_BATCH, HB_ACK = 6, 7, 8, 9, 10, 11
PRE_VOTE, PRE_VOTE_RESPONSE, NEXT_NODE_IDX_TERM = 12, 13, 14
MAX_ADDRESS_BYTES = 1024


# ---- encoding -------------------------------------------------------------------------
def _blob(data: Any) -> bytes:
    raw = bytes(data)
    return _I.pack(len(raw)) + raw


def _text(value: str) -> bytes:
    if not isinstance(value, str):
        raise CodecError(f"expected str, got {type(value).__name__}")
    return _blob(value.encode())


def _flag(value: Any) -> bytes:
    return b"\x01" if value else b"\x00"


def _enc_append(m: dict[str, Any]) -> bytes:
    entries = m.get("entries") or []
    head = _QQQQ.pack(m["term"], m["commit_index"], m["prevLogIdx"], m["prevLogTerm"])
    parts = [bytes((APPEND,)), head, _I.pack(len(entries))]
    for command, idx, term in entries:
        command = bytes(command)
        parts.append(_ENTRY.pack(len(command), idx, term))
        parts.append(command)
    return b"".join(parts)


def _enc_snapshot(m: dict[str, Any]) -> bytes:
    head = bytes((SNAPSHOT,)) + _QQ.pack(m["term"], m["commit_index"])
    chunk = m["serialized"]
    if not chunk:  # None or False: nothing to send this round
        return head + b"\x00"
    data, first, last = chunk
    return head + b"\x01" + _blob(data) + _flag(first) + _flag(last)


def _enc_apply(m: dict[str, Any]) -> bytes:
    out = bytes((APPLY_COMMAND,)) + _blob(m["command"])
    if "request_id" in m:
        return out + b"\x01" + _Q.pack(m["request_id"])
    return out + b"\x00"


def _enc_apply_response(m: dict[str, Any]) -> bytes:
    out = bytes((APPLY_RESPONSE,)) + _Q.pack(m["request_id"])
    if m.get("error") is not None:
        return out + b"\x01" + _Q.pack(m["error"])
    return out + b"\x00" + _QQ.pack(m["log_idx"], m["log_term"])


def _enc_batch(m: dict[str, Any]) -> bytes:
    items = m["items"]
    parts = [bytes((HB_BATCH,)), _I.pack(len(items))]
    for leader, member, term, commit, prev_idx, prev_term in items:
        parts += (_text(leader), _text(member), _QQQQ.pack(term, commit, prev_idx, prev_term))
    return b"".join(parts)


def _enc_ack(m: dict[str, Any]) -> bytes:
    acks, refused = m["acks"], m["refused"]
    parts = [bytes((HB_ACK,)), _I.pack(len(acks))]
    for leader, member, term, nxt in acks:
        parts += (_text(leader), _text(member), _QQ.pack(term, nxt))
    parts.append(_I.pack(len(refused)))
    for leader, member in refused:
        parts += (_text(leader), _text(member))
    return b"".join(parts)


def _enc_dict(m: dict[str, Any]) -> bytes:
    kind = m.get("type")
    if kind == "append_entries":
        if "serialized" in m:
            return _enc_snapshot(m)
        if "transmission" in m:
            raise CodecError("chunked append_entries has no encoding")
        return _enc_append(m)
    if kind == "next_node_idx":
        fields = (m["next_node_idx"], bool(m["reset"]), bool(m["success"]))
        if "term" in m:
            return bytes((NEXT_NODE_IDX_TERM,)) + _NEXT_TERM.pack(*fields, m["term"])
        return bytes((NEXT_NODE_IDX,)) + _NEXT.pack(*fields)
    if kind in ("request_vote", "pre_vote"):
        body = _QQQ.pack(m["term"], m["last_log_index"], m["last_log_term"])
        return bytes((REQUEST_VOTE if kind == "request_vote" else PRE_VOTE,)) + body
    if kind == "pre_vote_response":
        return bytes((PRE_VOTE_RESPONSE,)) + _Q.pack(m["term"]) + _flag(m["granted"])
    if kind in ("response_vote", "timeout_now"):
        tag = RESPONSE_VOTE if kind == "response_vote" else TIMEOUT_NOW
        return bytes((tag,)) + _Q.pack(m["term"])
    if kind == "apply_command":
        return _enc_apply(m)
    if kind == "apply_command_response":
        return _enc_apply_response(m)
    if kind == "hb_batch":
        return _enc_batch(m)
    if kind == "hb_batch_ack":
        return _enc_ack(m)
    raise CodecError(f"no encoding for message type {kind!r}")


def encode(message: Any) -> bytes:
    """The frame body of ``message``; CodecError if it has no encoding."""
    if type(message) is str:
        return bytes((GREETING,)) + _text(message)
    if type(message) is not dict:
        raise CodecError(f"no encoding for {type(message).__name__}")
    try:
        return _enc_dict(message)
    except (KeyError, TypeError, ValueError, struct.error) as exc:
        if isinstance(exc, CodecError):
            raise
        raise CodecError(f"cannot encode {message.get('type')!r}: {exc!r}") from exc


# ---- decoding -------------------------------------------------------------------------
class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise CodecError("truncated message")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def unpack(self, st: struct.Struct) -> tuple[Any, ...]:
        end = self.pos + st.size
        if end > len(self.buf):
            raise CodecError("truncated message")
        out = st.unpack_from(self.buf, self.pos)
        self.pos = end
        return out

    def i64(self) -> int:
        return int(self.unpack(_Q)[0])

    def flag(self) -> bool:
        (b,) = self.take(1)
        if b > 1:
            raise CodecError(f"flag byte {b}")
        return b == 1

    def count(self, min_item_bytes: int) -> int:
        (n,) = self.unpack(_I)
        if n * min_item_bytes > len(self.buf) - self.pos:
            raise CodecError(f"count {n} exceeds the message")
        return int(n)

    def blob(self) -> bytes:
        (n,) = self.unpack(_I)
        return self.take(n)

    def text(self) -> str:
        raw = self.blob()
        if len(raw) > MAX_ADDRESS_BYTES:
            raise CodecError("address too long")
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise CodecError("address is not UTF-8") from exc

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise CodecError(f"{len(self.buf) - self.pos} trailing bytes")


def _dec_append(r: _Reader) -> dict[str, Any]:
    term, commit, prev_idx, prev_term = r.unpack(_QQQQ)
    entries = []
    for _ in range(r.count(_ENTRY.size)):
        size, idx, e_term = r.unpack(_ENTRY)
        entries.append((r.take(size), idx, e_term))
    return {
        "type": "append_entries",
        "term": term,
        "commit_index": commit,
        "entries": entries,
        "prevLogIdx": prev_idx,
        "prevLogTerm": prev_term,
    }


def _dec_snapshot(r: _Reader) -> dict[str, Any]:
    term, commit = r.unpack(_QQ)
    chunk = None
    if r.flag():
        data = r.blob()
        chunk = (data, r.flag(), r.flag())
    return {"type": "append_entries", "term": term, "commit_index": commit, "serialized": chunk}


def _dec_vote(r: _Reader, kind: str = "request_vote") -> dict[str, Any]:
    term, last_idx, last_term = r.unpack(_QQQ)
    return {
        "type": kind,
        "term": term,
        "last_log_index": last_idx,
        "last_log_term": last_term,
    }


def _dec_pre_vote_response(r: _Reader) -> dict[str, Any]:
    return {"type": "pre_vote_response", "term": r.i64(), "granted": r.flag()}


def _dec_next(r: _Reader) -> dict[str, Any]:
    nxt, reset, success = r.unpack(_NEXT)
    return _next(nxt, reset, success)


def _dec_next_term(r: _Reader) -> dict[str, Any]:
    nxt, reset, success, term = r.unpack(_NEXT_TERM)
    return {**_next(nxt, reset, success), "term": term}


def _next(nxt: int, reset: int, success: int) -> dict[str, Any]:
    if reset > 1 or success > 1:
        raise CodecError("flag byte")
    return {
        "type": "next_node_idx",
        "next_node_idx": nxt,
        "reset": bool(reset),
        "success": bool(success),
    }


def _dec_apply(r: _Reader) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "apply_command", "command": r.blob()}
    if r.flag():
        out["request_id"] = r.i64()
    return out


def _dec_apply_response(r: _Reader) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "apply_command_response", "request_id": r.i64()}
    if r.flag():
        out["error"] = r.i64()
    else:
        out["log_idx"], out["log_term"] = r.unpack(_QQ)
    return out


def _dec_batch(r: _Reader) -> dict[str, Any]:
    items = []
    for _ in range(r.count(8 + _QQQQ.size)):
        leader, member = r.text(), r.text()
        items.append((leader, member, *r.unpack(_QQQQ)))
    return {"type": "hb_batch", "items": items}


def _dec_ack(r: _Reader) -> dict[str, Any]:
    acks = []
    for _ in range(r.count(8 + _QQ.size)):
        leader, member = r.text(), r.text()
        acks.append((leader, member, *r.unpack(_QQ)))
    refused = [(r.text(), r.text()) for _ in range(r.count(8))]
    return {"type": "hb_batch_ack", "acks": acks, "refused": refused}


_DECODERS: dict[int, Callable[[_Reader], Any]] = {
    GREETING: lambda r: r.text(),
    REQUEST_VOTE: _dec_vote,
    RESPONSE_VOTE: lambda r: {"type": "response_vote", "term": r.i64()},
    APPEND: _dec_append,
    SNAPSHOT: _dec_snapshot,
    NEXT_NODE_IDX: _dec_next,
    NEXT_NODE_IDX_TERM: _dec_next_term,
    TIMEOUT_NOW: lambda r: {"type": "timeout_now", "term": r.i64()},
    APPLY_COMMAND: _dec_apply,
    APPLY_RESPONSE: _dec_apply_response,
    HB_BATCH: _dec_batch,
    HB_ACK: _dec_ack,
    PRE_VOTE: lambda r: _dec_vote(r, "pre_vote"),
    PRE_VOTE_RESPONSE: _dec_pre_vote_response,
}


def decode(body: bytes, start: int = 0) -> Any:
    """The message in ``body[start:]`` (a greeting decodes to its address, a
    str); CodecError for an unknown type or malformed bytes."""
    if len(body) <= start:
        raise CodecError("empty message")
    decoder = _DECODERS.get(body[start])
    if decoder is None:
        raise CodecError(f"unknown message type {body[start]}")
    r = _Reader(body, start + 1)
    message = decoder(r)
    r.end()
    return message
