"""The Raft link codec (replication/codec.py) and entry format
(replication/entries.py): every message type round-trips exactly; unknown
types, truncated or padded bytes and messages with no encoding (pickled
objects, pysyncobj's chunked "transmission", utility commands) are refused."""

from __future__ import annotations

import contextlib
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue.replication import codec, entries

i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
idx = st.integers(min_value=0, max_value=2**63 - 1)
addr = st.text(max_size=60)
blob = st.binary(max_size=300)


def msg(kind: str, **fields: Any) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"type": st.just(kind), **fields})


MESSAGES = st.one_of(
    addr,  # the greeting
    msg("request_vote", term=idx, last_log_index=idx, last_log_term=idx),
    msg("response_vote", term=idx),
    msg("timeout_now", term=idx),
    msg(
        "append_entries",
        term=idx,
        commit_index=idx,
        prevLogIdx=idx,
        prevLogTerm=idx,
        entries=st.lists(st.tuples(blob, idx, idx), max_size=5),
    ),
    msg(
        "append_entries",
        term=idx,
        commit_index=idx,
        serialized=st.one_of(st.none(), st.tuples(blob, st.booleans(), st.booleans())),
    ),
    msg("next_node_idx", next_node_idx=i64, reset=st.booleans(), success=st.booleans()),
    msg("next_node_idx", next_node_idx=i64, reset=st.booleans(), success=st.booleans(), term=i64),
    msg("apply_command", command=blob),
    msg("apply_command", command=blob, request_id=i64),
    msg("apply_command_response", request_id=i64, error=i64),
    msg("apply_command_response", request_id=i64, log_idx=i64, log_term=i64),
    msg("hb_batch", items=st.lists(st.tuples(addr, addr, i64, i64, i64, i64), max_size=5)),
    msg(
        "hb_batch_ack",
        acks=st.lists(st.tuples(addr, addr, i64, i64), max_size=5),
        refused=st.lists(st.tuples(addr, addr), max_size=5),
    ),
)


@settings(max_examples=400, deadline=None)
@given(MESSAGES)
def test_every_message_type_round_trips(message: Any) -> None:
    assert codec.decode(codec.encode(message)) == message


@settings(max_examples=300, deadline=None)
@given(MESSAGES, st.data())
def test_truncated_or_padded_messages_are_refused(message: Any, data: Any) -> None:
    body = codec.encode(message)
    cut = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    with pytest.raises(codec.CodecError):
        codec.decode(body[:cut])
    with pytest.raises(codec.CodecError):
        codec.decode(body + data.draw(st.binary(min_size=1, max_size=8)))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_codec_error_only(body: bytes) -> None:
    with contextlib.suppress(codec.CodecError):
        codec.decode(body)


def test_snapshot_chunk_false_is_sent_as_none() -> None:
    # pysyncobj's getTransmissionData returns False on a read error.
    m = {"type": "append_entries", "term": 1, "commit_index": 2, "serialized": False}
    assert codec.decode(codec.encode(m))["serialized"] is None


@pytest.mark.parametrize(
    "message",
    [
        ["status"],  # a utility command
        ["add", "127.0.0.1:9"],
        b"\x00" * 32,  # pysyncobj's Fernet random key exchange
        ("key", {"type": "response_vote", "term": 1}),
        {"type": "append_entries", "transmission": "start", "data": b"x", "term": 1},
        {"type": "unknown"},
        {"type": "request_vote", "term": 1},  # a field missing
        {"type": "response_vote", "term": 2**64},  # out of range
    ],
)
def test_messages_without_an_encoding_are_refused(message: Any) -> None:
    with pytest.raises(codec.CodecError):
        codec.encode(message)


def test_unknown_types_and_pickles_are_refused() -> None:
    for body in (b"", b"\x00", b"\x7f", pickle.dumps({"type": "response_vote", "term": 1})):
        with pytest.raises(codec.CodecError):
            codec.decode(body)


def test_a_flag_byte_other_than_0_or_1_is_refused() -> None:
    body = bytearray(
        codec.encode({"type": "next_node_idx", "next_node_idx": 3, "reset": True, "success": False})
    )
    body[-2] = 2
    with pytest.raises(codec.CodecError):
        codec.decode(bytes(body))


# ---- entries --------------------------------------------------------------------------
@given(blob)
def test_regular_entries_carry_their_bytes(payload: bytes) -> None:
    command = entries.regular(payload)
    assert entries.kind(command) == entries.REGULAR
    assert entries.regular_payload(command) == payload


@pytest.mark.parametrize("op", ["add", "rem"])
def test_membership_entries_round_trip(op: str) -> None:
    command = entries.membership(op, "127.0.0.1:7001")
    assert entries.kind(command) == entries.MEMBERSHIP
    assert entries.parse_membership(command) == (op, "127.0.0.1:7001")


def test_version_entries_round_trip() -> None:
    assert entries.parse_version(entries.version(3)) == 3
    assert entries.kind(b"\x01") == entries.NO_OP


def test_old_pickle_entries_are_refused_by_name() -> None:
    from pysyncobj import pickle as raft_pickle

    old = [
        b"\x00" + raft_pickle.dumps((0, (b"payload",))),
        b"\x02" + raft_pickle.dumps(["add", "127.0.0.1:7001", "127.0.0.1:7001"]),
        b"\x03" + raft_pickle.dumps(1),
    ]
    for command in old:
        with pytest.raises(entries.OldEntryFormat, match="entry format 2"):
            entries.kind(command)


def test_malformed_membership_entries_raise_value_error() -> None:
    for command in (b"\x02\xa2x127.0.0.1:1", b"\x02\xa2a", b"\x02\xa2anocolon"):
        with pytest.raises(ValueError):
            entries.parse_membership(command)
