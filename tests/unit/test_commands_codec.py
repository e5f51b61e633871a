"""The partition command codec: the Raft wire format.

Every valid command survives encode/decode unchanged; anything else that
reaches ``decode`` (truncated, padded, corrupted, foreign bytes) is rejected
as InvalidArgument("command") and never as some other exception.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import (
    Ack,
    Append,
    AppendBlobs,
    Batch,
    ChangeVisibility,
    Command,
    CommitOffset,
    Configure,
    Expire,
    ForgetDead,
    Lease,
    Nack,
    NewRecord,
    PartitionConfig,
    Purge,
    ReceiptRef,
    ReceiptRun,
)
from raft_queue.core.records import to_blob
from raft_queue.errors import InvalidArgument

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
short = st.text(max_size=20)

configs = st.builds(
    PartitionConfig, st.sampled_from(["none", "fifo"]), u32, u32, u64, u64, u64, u32
)
records = st.builds(
    NewRecord,
    st.binary(max_size=64),
    short,
    st.lists(st.tuples(short, st.binary(max_size=8)), max_size=3).map(tuple),
    short,
    u32,
)
receipts = st.lists(
    st.one_of(
        st.builds(ReceiptRef, u64, st.integers(1, 2**32 - 1)),
        st.builds(ReceiptRun, st.integers(0, 2**63), st.integers(1, 2**32), st.integers(1, 9)),
    ),
    max_size=4,
).map(tuple)
simple_commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(Configure, configs),
    st.builds(Append, st.lists(records, max_size=4).map(tuple), u64, st.binary(max_size=64)),
    st.builds(Lease, short, u32, u32, u64),
    st.builds(Ack, receipts, u64),
    st.builds(Nack, receipts, u32, u64),
    st.builds(ChangeVisibility, receipts, u32, u64),
    st.builds(CommitOffset, st.text(min_size=1, max_size=20), u64, st.booleans()),
    st.builds(Expire, u64),
    st.builds(Purge, u64),
    st.builds(ForgetDead, st.lists(u64, max_size=4).map(tuple)),
)
commands = st.one_of(
    simple_commands, st.builds(Batch, st.lists(simple_commands, max_size=4).map(tuple))
)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_every_command_round_trips(cmd: Command) -> None:
    data = encode(cmd)
    assert decode(data) == cmd
    assert encode(decode(data)) == data


def test_round_trip_keeps_unicode_and_binary_exactly() -> None:
    rec = NewRecord(b"\x00\xff" * 3, key="clé-🔑", headers=(("h", b""), ("h", b"\x80")))
    cmd = Append((rec, NewRecord(b"", dedup_id="d" * 255)), now_ms=2**63)
    assert decode(encode(cmd)) == cmd


def _append12(flags: int, max_delay: int, ends: list[int], data: bytes) -> bytes:
    """An Append of data format 2 (tag 12: 32-bit delays)."""
    head = struct.pack(">QBIBI", 5, 0, len(ends), flags, max_delay)
    return b"\x0c" + head + struct.pack(f">{len(ends)}I", *ends) + data


def _append17(flags: int, max_delay: int, ends: list[int], data: bytes) -> bytes:
    """An Append of today (tag 17: 64-bit delays, 14-byte blob headers)."""
    head = struct.pack(">QBIBQ", 5, 0, len(ends), flags, max_delay)
    return b"\x11" + head + struct.pack(f">{len(ends)}I", *ends) + data


def test_an_append_of_32_bit_delays_still_decodes() -> None:
    """Tag 12 (before data format 3) in an old journal or from an old leader."""
    blob = struct.pack(">IHHH", 86_400_000, 0, 1, 0) + b"k" + b"body"
    cmd = decode(_append12(1, 86_400_000, [len(blob)], blob))
    assert cmd == Append((NewRecord(b"body", key="k", delay_ms=86_400_000),), now_ms=5)


def test_a_ten_year_delay_round_trips() -> None:
    ten_years = 3653 * 86_400_000
    cmd = Append((NewRecord(b"x", delay_ms=ten_years),), now_ms=5)
    assert decode(encode(cmd)) == cmd
    with pytest.raises(InvalidArgument, match="3653 days"):
        NewRecord(b"x", delay_ms=ten_years + 1)


def _rejected(data: bytes) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        decode(data)
    assert info.value.field == "command"
    return info.value


@settings(max_examples=200, deadline=None)
@given(commands, st.data())
def test_every_truncation_is_rejected(cmd: Command, data: st.DataObject) -> None:
    encoded = encode(cmd)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    _rejected(encoded[:cut])


@settings(max_examples=200, deadline=None)
@given(commands, st.binary(min_size=1, max_size=8))
def test_trailing_bytes_are_rejected(cmd: Command, extra: bytes) -> None:
    _rejected(encode(cmd) + extra)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_decodes_to_a_valid_command_or_invalid_argument(data: bytes) -> None:
    try:
        cmd = decode(data)
    except InvalidArgument as exc:
        assert exc.field == "command"
    else:
        assert decode(encode(cmd)) == cmd


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xff",
        b"\x03\x00" + b"\xff" * 10 + b"\x01\x00\x00",  # varint longer than 64 bits
        b"\x03\x00" + b"\xff" * 9 + b"\x7f\x00\x00",  # varint over 2**64 - 1
        b"\x02" + b"\x00" * 8 + b"\xff\xff\xff\xff",  # 4 billion records in no bytes
        b"\x07\x02\xff\xfe\x00\x00",  # group not UTF-8
        b"\x07\x01g\x05\x02",  # reset flag neither 0 nor 1
        b"\x01\x07" + b"\x00" * 6,  # unknown ordering
        b"\x04\x01\x05\x00\x09",  # receipt epoch 0 (tag 4: one receipt each)
        b"\x0d\x01\x05\x01\x00\x09",  # receipt run of epoch 0
        b"\x0d\x01\x05\x00\x01\x09",  # receipt run of no receipts
        b"\x0c" + b"\x00" * 8 + b"\x41",  # request id of 65 bytes
        b"\x0c" + b"\x00" * 9 + b"\x00\x00\x00\x02\x00\x00\x00\x00\x00",  # no end table
        _append17(0, 0, [16, 15], b"\x00" * 16),  # ends go backwards
        _append17(0, 0, [13], b"\x00" * 13),  # record shorter than its header
        _append17(0, 0, [14], b"\x00" * 15),  # a byte after the last record
        _append17(0, 8, [14], b"\x00" * 14),  # unknown flag
        _append17(1, 0, [14], b"\x00" * 14),  # summary says a key, the record has none
        _append17(0, 0, [14], b"\x00" * 8 + b"\x00\x01" + b"\x00" * 4),  # dedup id past the end
        _append12(0, 0, [12, 11], b"\x00" * 12),  # tag 12: ends go backwards
        _append12(0, 0, [9], b"\x00" * 9),  # tag 12: record shorter than its header
        _append12(0, 0, [10], b"\x00" * 11),  # tag 12: a byte after the last record
        b"\x0b\x00\x00\x00\x01\x00\x00\x00\x05\x0b\x00\x00\x00\x00",  # nested Batch
    ],
)
def test_malformed_input_is_rejected(data: bytes) -> None:
    """(``_append17`` / ``_append12`` build Appends: flags, max delay, ends, data.)"""
    _rejected(data)


def test_decode_rejects_non_bytes() -> None:
    _rejected("\x08\x00")  # type: ignore[arg-type]


def test_encode_rejects_non_commands() -> None:
    with pytest.raises(InvalidArgument) as info:
        encode(NewRecord(b"x"))  # type: ignore[arg-type]
    assert info.value.field == "command"


def test_tags_are_stable() -> None:
    """The first byte is the wire format: changing one breaks mixed-version clusters."""
    tags = {type(c).__name__: encode(c)[0] for c in _one_of_each()}
    assert tags == {
        "Configure": 1,
        "Append": 17,  # 12 before 64-bit delays (still decoded)
        "Lease": 3,
        "Ack": 13,
        "Nack": 14,
        "ChangeVisibility": 15,
        "CommitOffset": 7,
        "Expire": 8,
        "Purge": 9,
        "ForgetDead": 10,
        "Batch": 11,
    }


def test_the_layouts_before_segments_and_receipt_runs_still_decode() -> None:
    """Tags 2, 4, 5, 6: a record per u32-prefixed blob, a receipt per (offset, epoch)."""
    blob = struct.pack(">IHHH", 0, 0, 1, 0) + b"kbody"  # 32-bit delay, as then
    old_append = b"\x02" + struct.pack(">QII", 7, 1, len(blob)) + blob
    assert decode(old_append) == Append((NewRecord(b"body", key="k"),), 7)
    receipts = b"\x03\x05\x01\x06\x01\x09\x02"  # (5, 1), (6, 1), (9, 2)
    runs = (ReceiptRun(5, 2, 1), ReceiptRun(9, 1, 2))
    assert decode(b"\x04" + receipts + b"\x63") == Ack(runs, 99)
    assert decode(b"\x05" + receipts + b"\x01\x63") == Nack(runs, 1, 99)
    assert decode(b"\x06" + receipts + b"\x01\x63") == ChangeVisibility(runs, 1, 99)


def test_receipts_are_kept_as_the_fewest_runs_in_their_order() -> None:
    refs = tuple(ReceiptRef(o, e) for o, e in [(5, 1), (6, 1), (7, 2), (3, 1), (4, 1), (4, 1)])
    ack = Ack(refs, 1)
    runs = (ReceiptRun(5, 2, 1), ReceiptRun(7, 1, 2), ReceiptRun(3, 2, 1), ReceiptRun(4, 1, 1))
    assert ack.receipts == runs
    assert Ack(runs, 1) == ack == decode(encode(ack))
    assert Ack((ReceiptRun(0, 2, 1), ReceiptRun(2, 3, 1)), 1).receipts == (ReceiptRun(0, 5, 1),)


def _one_of_each() -> list[Command]:
    ref = (ReceiptRef(1, 1),)
    return [
        Configure(PartitionConfig()),
        Append((NewRecord(b"x"),), 1),
        Lease("c", 1, 0, 1),
        Ack(ref, 1),
        Nack(ref, 0, 1),
        ChangeVisibility(ref, 0, 1),
        CommitOffset("g", 1),
        Expire(1),
        Purge(1),
        ForgetDead((1,)),
        Batch(()),
    ]


def test_append_encoding_is_compact() -> None:
    """The hot path: a 100-byte record costs a few bytes of framing, not JSON."""
    one = len(encode(Append((NewRecord(b"x" * 100),), 1_700_000_000_000)))
    ten = len(encode(Append((NewRecord(b"x" * 100),) * 10, 1_700_000_000_000)))
    assert one <= 100 + 42  # 64-bit delays (data format 3) added 4 + 4 bytes
    assert (ten - one) / 9 <= 100 + 18


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: NewRecord("text"), "body"),
        (lambda: NewRecord(b"", key=b"k"), "key"),
        (lambda: NewRecord(b"", key="k" * 65536), "key"),
        (lambda: NewRecord(b"", dedup_id="é" * 40000), "dedup_id"),
        (lambda: NewRecord(b"", dedup_id=None), "dedup_id"),
        (lambda: NewRecord(b"", delay_ms=-1), "delay_ms"),
        (lambda: NewRecord(b"", headers=(("h", "v"),)), "headers"),
        (lambda: NewRecord(b"", headers=[("h", b"v")]), "headers"),
        (lambda: Append([NewRecord(b"")], 1), "records"),
        (lambda: Append((b"raw",), 1), "records"),
        (lambda: Append((), -1), "now_ms"),
        (lambda: Append((), 2**64), "now_ms"),
        (lambda: Append((), 1, request_id="r"), "request_id"),
        (lambda: Append((), 1, request_id=b"r" * 65), "request_id"),
        (lambda: ReceiptRun(1, 0, 1), "count"),
        (lambda: ReceiptRun(2**64 - 1, 2, 1), "count"),
        (lambda: ReceiptRun(1, 1, 0), "epoch"),
        (lambda: Ack((ReceiptRef(1, 1), 5), 1), "receipts"),
        (lambda: Lease(None, 1, 0, 1), "consumer"),
        (lambda: Lease("c", 1.5, 0, 1), "max_records"),
        (lambda: Lease("c", True, 0, 1), "max_records"),
        (lambda: ReceiptRef(1, 0), "epoch"),
        (lambda: ReceiptRef(-1, 1), "offset"),
        (lambda: Nack((), 3653 * 86_400_000 + 1, 1), "delay_ms"),
        (lambda: CommitOffset("", 1), "group"),
        (lambda: CommitOffset("g", 1, reset=1), "reset"),
        (lambda: ForgetDead((1, -2)), "offsets"),
        (lambda: Batch((Batch(()),)), "commands"),
        (lambda: Configure({"ordering": "fifo"}), "config"),
        (lambda: PartitionConfig(ordering="lifo"), "ordering"),
        (lambda: PartitionConfig(visibility_timeout_ms=-5), "visibility_timeout_ms"),
        (lambda: PartitionConfig(retention_bytes=2**64), "retention_bytes"),
    ],
)
def test_bad_fields_are_rejected_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        build()
    assert info.value.field == field


@settings(max_examples=200, deadline=None)
@given(st.lists(records, max_size=5).map(tuple), u64, st.binary(max_size=16))
def test_append_blobs_encode_to_the_bytes_of_the_same_append(
    recs: tuple[NewRecord, ...], now_ms: int, request_id: bytes
) -> None:
    from raft_queue.core.segments import summarize

    all_blobs = tuple(to_blob(r) for r in recs)
    blobs = AppendBlobs(all_blobs, now_ms, request_id)
    assert encode(blobs) == encode(Append(recs, now_ms, request_id))
    assert decode(encode(blobs)) == Append(recs, now_ms, request_id)
    summarized = AppendBlobs(all_blobs, now_ms, request_id, summarize(all_blobs))
    assert encode(summarized) == encode(blobs)
    assert encode(Batch((blobs, Lease("c", 1, 0, 1)))) == encode(
        Batch((Append(recs, now_ms, request_id), Lease("c", 1, 0, 1)))
    )


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), short, short)
def test_plain_blob_is_the_blob_of_a_record_without_headers_or_delay(
    body: bytes, key: str, dedup_id: str
) -> None:
    from raft_queue.core.records import plain_blob

    assert plain_blob(body, key, dedup_id) == to_blob(NewRecord(body, key, (), dedup_id, 0))


def test_plain_blob_rejects_what_new_record_rejects() -> None:
    from raft_queue.core.records import plain_blob

    with pytest.raises(InvalidArgument, match="key"):
        plain_blob(b"x", "k" * 70000, "")
    with pytest.raises(InvalidArgument, match="dedup_id"):
        plain_blob(b"x", "", "d" * 70000)
    with pytest.raises(InvalidArgument, match="body"):
        plain_blob(bytearray(b"x"), "", "")  # type: ignore[arg-type]
