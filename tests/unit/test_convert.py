"""The leader's conversions between protobuf and the partition machine
(``server/api/convert.py``): no sockets, a MemoryStore machine where needed."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client import models
from raft_queue.config import QueueSpec
from raft_queue.core.codec import encode
from raft_queue.core.commands import Append, AppendBlobs, Lease, NewRecord, ReceiptRun
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.records import to_blob
from raft_queue.core.results import LeaseResult
from raft_queue.core.sealing import open_records, seal_blobs
from raft_queue.core.segments import summarize
from raft_queue.security.encryption import encrypter
from raft_queue.server.api import answer as answers
from raft_queue.server.api import convert
from raft_queue.server.dataplane import bounds
from raft_queue.server.dataplane import receipts as receipt_strings
from raft_queue.server.dataplane.receipts import Receipts
from raft_queue.storage import MemoryStore

ENTRIES = [
    queue_pb2.SendEntry(body=b"plain"),
    queue_pb2.SendEntry(body=b"keyed", key="k"),
    queue_pb2.SendEntry(body=b"id", dedup_id="d-1"),
    queue_pb2.SendEntry(body=b"late", delay_ms=50),
    queue_pb2.SendEntry(body=b"h", headers={"a": b"1"}),
]


@pytest.mark.parametrize("picked", [[0], [0, 1, 2], [0, 3], [4, 0], [0, 1, 2, 3, 4]])
def test_record_blobs_come_with_their_own_summary(picked: list[int]) -> None:
    blobs, summary = convert.record_blobs(ENTRIES, picked, QueueSpec())
    assert summary == summarize(blobs)
    records = tuple(convert.new_record(i, ENTRIES[i], QueueSpec()) for i in picked)
    assert encode(AppendBlobs(blobs, 1, b"r", summary)) == encode(Append(records, 1, b"r"))


def _leased(records: list[NewRecord], n: int) -> LeaseResult:
    machine, store = PartitionMachine(), MemoryStore(PartitionMachine.TABLES)
    with store.begin(write=True) as txn:
        machine.apply(txn, Append(tuple(records[:2]), 1))
        machine.apply(txn, Append(tuple(records[2:]), 2))
        machine.apply(txn, Lease("c", 1, 0, 3))  # the first record is not in the result
        result = machine.apply(txn, Lease("c", n, 0, 4))
    assert isinstance(result, LeaseResult)
    return result


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("secret", [None, b"s" * 32])
def test_lease_messages_are_the_leased_records_with_their_receipts(
    keyed: bool, secret: bytes | None
) -> None:
    extra = {"key": "k", "headers": (("h", b"v"),)} if keyed else {}
    records = [NewRecord(b"r%d" % i, dedup_id=f"d{i}" if keyed else "", **extra) for i in range(5)]
    result = _leased(records, 3)
    book = Receipts(secret)
    got = convert.lease_messages("q", 2, 77, result, book)
    # One run per span (the lease crosses two Appends): receipts name their run.
    assert [(s.offset, s.count, s.epoch) for s in result.spans] == [(1, 1, 1), (2, 2, 1)]
    handles = [r for s in result.spans for r in book.span("q", 77, 2, s.offset, s.count, 1)]
    want = [
        convert.message_pb("q", 2, m.record, handle, m.receive_count)
        for m, handle in zip(result.messages, handles, strict=True)
    ]
    assert got == want
    assert [m.offset for m in got] == [1, 2, 3]  # across the two appends' segments
    assert got[0].receipt.startswith("77:2:1:1") and got[0].body == b"r1"
    assert (got[0].receipt == "77:2:1:1") is (secret is None)


def test_receipts_group_by_partition_as_runs_in_request_order() -> None:
    receipts = ["9:0:5:1", "9:1:7:2", "9:0:6:1", "9:0:8:1", "9:0:3:1", "9:0:4:1", "9:0:4:1"]
    by_part = receipt_strings.receipts_by_partition(receipts, 9, 2)
    assert by_part[0].indexes == [0, 2, 3, 4, 5, 6]
    assert by_part[0].runs() == (
        ReceiptRun(5, 2, 1),
        ReceiptRun(8, 1, 1),
        ReceiptRun(3, 2, 1),
        ReceiptRun(4, 1, 1),  # a repeat is its own run: it settles after the first
    )
    assert by_part[1].runs() == (ReceiptRun(7, 1, 2),)


def test_one_lease_of_receipts_is_one_run_and_odd_lists_parse_as_one_by_one() -> None:
    lease = [f"9:1:{o}:3" for o in range(100, 1100)]
    (entry,) = receipt_strings.receipts_by_partition(lease, 9, 2).values()
    assert entry.indexes == list(range(1000)) and entry.runs() == (ReceiptRun(100, 1000, 3),)
    mixed = ["9:1:5:3", "9:1:6:3", "9:1:6:3", "9:1:9:4"]
    (entry,) = receipt_strings.receipts_by_partition(mixed, 9, 2).values()
    assert entry.indexes == [0, 1, 2, 3]
    assert entry.runs() == (ReceiptRun(5, 2, 3), ReceiptRun(6, 1, 3), ReceiptRun(9, 1, 4))
    # Two malformed receipts whose parts add up to 8 fields are still refused.
    with pytest.raises(errors.InvalidArgument) as info:
        receipt_strings.receipts_by_partition(["9:0:1:1:9", "0:2:1"], 9, 2)
    assert info.value.field == "receipts[0]"


@pytest.mark.parametrize(
    ("receipt", "why"),
    [
        ("9:0:5", "not a receipt"),
        ("9:0:x:1", "not a receipt"),
        ("8:0:5:1", "another queue"),
        ("9:2:5:1", "no partition"),
        ("9:0:5:0", "not a receipt"),
        ("9:0:-1:1", "not a receipt"),
    ],
)
def test_a_bad_receipt_is_invalid_argument_naming_it(receipt: str, why: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=why) as info:
        receipt_strings.receipts_by_partition(["9:0:1:1", receipt], 9, 2)
    assert info.value.field == "receipts[1]"


def test_request_ids_are_bounded() -> None:
    assert convert.check_request_id(b"x" * 64) == b"x" * 64
    with pytest.raises(errors.InvalidArgument) as info:
        convert.check_request_id(b"x" * 65)
    assert info.value.field == "request_id"


def test_receipts_response_in_full_or_failures_only() -> None:
    from raft_queue.server.api.receipt_results import receipts_response

    forwarded_ok = queue_pb2.ReceiptResult(receipt="r2", ok=True)
    forwarded_bad = queue_pb2.ReceiptResult(receipt="r3", ok=False, error="x")
    results = ["ok", "stale", forwarded_ok, forwarded_bad, "not_found"]
    request = queue_pb2.AckRequest(queue="q", receipts=["r0", "r1", "r2", "r3", "r4"])
    full = receipts_response(request, results)
    assert [(r.receipt, r.ok) for r in full.results] == [
        ("r0", True),
        ("r1", False),
        ("r2", True),
        ("r3", False),
        ("r4", False),
    ]
    assert not full.failures_only and "stale" in full.results[1].error
    request.failures_only = True
    short = receipts_response(request, results)
    assert short.failures_only and list(short.failed) == [1, 3, 4]
    assert [r.receipt for r in short.results] == ["r1", "r3", "r4"]
    assert short.results[1] == forwarded_bad


def test_send_response_as_runs_merges_consecutive_offsets_only() -> None:
    from raft_queue.server.dataplane.sending import response

    fsync = queue_pb2.DURABILITY_FSYNC
    forwarded = (1, 9, False, fsync)  # a forwarded partition's result: the same type
    results = [(0, 5, False, fsync), (0, 6, False, fsync), forwarded, (0, 7, False, fsync)]
    results += [(0, 7, True, fsync), (0, 8, True, fsync), (0, 8, True, fsync)]
    runs = [(r.partition, r.offset, r.count, r.duplicate) for r in response(results, True).runs]
    assert runs == [(0, 5, 2, False), (1, 9, 1, False), (0, 7, 1, False), (0, 7, 2, True)] + [
        (0, 8, 1, True)
    ]
    full = response(results)
    assert [(r.partition, r.offset) for r in full.results][:3] == [(0, 5), (0, 6), (1, 9)]
    assert not full.runs


def test_send_results_are_runs_in_entry_order_whatever_order_partitions_answer() -> None:
    """An Append of consecutive entries is one run; interleaved entries
    (round robin over partitions) one each; partitions answering out of
    order still give the entries' order; an entry without a result is an
    error, never a short answer."""
    from raft_queue.server.dataplane.sending import Results, response

    fsync = queue_pb2.DURABILITY_FSYNC
    whole = Results(1000)
    whole.put_run(range(1000), 0, 40, False, fsync)
    assert [(r.partition, r.offset, r.count) for r in response(whole, True).runs] == [(0, 40, 1000)]
    mixed = Results(5)
    mixed.put_run([1, 3], 1, 7, False, fsync)  # partition 1 answered first
    mixed.put_run([0, 2, 4], 0, 10, False, fsync)
    assert list(mixed) == [(0, 10, False, fsync), (1, 7, False, fsync), (0, 11, False, fsync)] + [
        (1, 8, False, fsync),
        (0, 12, False, fsync),
    ]
    two = Results(4)
    two.put_run([2, 3], 0, 12, False, fsync)
    two.put_run([0, 1], 0, 10, False, fsync)  # a later Append's offsets follow on: merged
    assert [(r.offset, r.count) for r in response(two, True).runs] == [(10, 4)]
    short = Results(3)
    short.put_run([0, 1], 0, 10, False, fsync)
    with pytest.raises(errors.Internal):
        response(short, True)


def test_a_forwarded_answer_reads_back_as_the_results_it_carried() -> None:
    """What a leader answers a forwarding node (runs, or one result per
    entry) comes back as the same (partition, offset, duplicate, durability)
    results, in order."""
    from raft_queue.server.dataplane.sending import Results, response

    fsync = queue_pb2.DURABILITY_FSYNC
    results = [(2, 5, False, fsync), (2, 6, False, fsync), (2, 9, True, fsync)]
    for as_runs in (True, False):
        back = Results(5)
        back.put_response([0, 2, 4], response(results, as_runs), "q[2]")
        back.put_run([1, 3], 0, 0, False, fsync)  # the entries this node stored itself
        assert [r for r in back if r[0] == 2] == results
        with pytest.raises(errors.Internal):
            Results(4).put_response(range(4), response(results, as_runs), "q[2]")


def test_a_receive_answer_is_built_in_place_and_copied_only_when_it_differs() -> None:
    records = [NewRecord(b"r%d" % i) for i in range(5)]
    book = Receipts(b"s" * 32)

    def leased(answer: answers.Answer | None) -> list[Any]:
        token = answers.ANSWER.set(answer)
        try:
            return convert.lease_messages("q", 2, 77, _leased(records, 3), book)
        finally:
            answers.ANSWER.reset(token)

    plain = leased(None)  # no answer open: Messages of their own
    answer = answers.Answer()
    made = leased(answer)
    assert made == plain and len(answer.response.messages) == 3
    acks = queue_pb2.ReceiptsResponse(failures_only=True)
    response = answer.close(made, acks)
    assert response.messages[0] is made[0], "no copy: the Messages made in place"
    assert list(response.messages) == plain and response.acks == acks
    assert answer.response is None and leased(answer) == plain  # late: made apart
    for pick in (lambda a: a[:2], lambda a: a[::-1], lambda a: [*a, plain[0]]):
        answer = answers.Answer()  # some given back, reordered, one from elsewhere
        picked = pick(leased(answer))
        response = answer.close(picked, None)
        assert list(response.messages) == picked, "copied, as returned"
        assert response.messages[0] is not picked[0]


def _sealed_lease(records: list[NewRecord], uid: int, part: int) -> tuple[LeaseResult, Any]:
    """A lease of ``records`` stored sealed (encryption at rest), and an opener."""
    aes = AESGCM(bytes(range(32)))
    blobs = tuple(to_blob(r) for r in records)
    sealed, summary = seal_blobs(blobs, summarize(blobs), uid, part, 1, encrypter(aes))
    machine, store = PartitionMachine(), MemoryStore(PartitionMachine.TABLES)
    with store.begin(write=True) as txn:
        machine.apply(txn, AppendBlobs(sealed, 1, b"", summary))
        machine.apply(txn, Lease("c", 1, 0, 3))  # the first record is not in the result
        result = machine.apply(txn, Lease("c", len(records), 0, 4))
    assert isinstance(result, LeaseResult)

    def opener(seg: Any, i: int, j: int) -> list[Any]:
        dec = lambda key_id, nonce, data, aad: aes.decrypt(nonce, data, aad)  # noqa: E731
        return open_records(seg, uid, part, dec)[i:j]

    return result, opener


@pytest.mark.parametrize("headers", [False, True])
def test_sealed_records_give_the_same_messages(headers: bool) -> None:
    extra = {"headers": (("h", b"v"),)} if headers else {}
    records = [NewRecord(b"r%d" % i, **extra) for i in range(5)]  # type: ignore[arg-type]
    result, opener = _sealed_lease(records, 77, 2)
    book = Receipts(b"s" * 32)
    got = convert.lease_messages("q", 2, 77, result, book, opener)
    (span,) = result.spans
    handles = book.span("q", 77, 2, span.offset, span.count, span.epoch)
    want = [
        queue_pb2.Message(queue="q", partition=2, offset=o, body=b"r%d" % o, receipt=handle,
                          timestamp_ms=1, receive_count=1, headers=dict(extra.get("headers", ())))
        for o, handle in zip(range(1, 5), handles, strict=True)
    ]  # fmt: skip
    assert got == want


def _in_answer(answer: Any, lease: Any) -> list[Any]:
    token = answers.ANSWER.set(answer)
    try:
        return lease()
    finally:
        answers.ANSWER.reset(token)


def _fields(m: Any) -> tuple[Any, ...]:
    return (m.queue, m.partition, m.offset, m.body, m.key, dict(m.headers), m.timestamp_ms,
            m.receipt, m.receive_count, m.dedup_id)  # fmt: skip


@pytest.mark.parametrize("sealed", [False, True])
@pytest.mark.parametrize("secret", [None, b"s" * 32])
def test_a_runs_answer_reads_back_as_the_same_messages(sealed: bool, secret: bytes | None) -> None:
    """Bare records leave as MessageRuns when the client asked for runs; the
    SDK reads them back as exactly the Messages (receipts too) it got before."""
    records = [NewRecord(b"body %d" % i) for i in range(6)]
    book = Receipts(secret)
    if sealed:
        result, opener = _sealed_lease(records, 77, 2)
    else:
        result, opener = _leased(records, 5), None
    lease = lambda: convert.lease_messages("q", 2, 77, result, book, opener)  # noqa: E731
    plain = lease()  # no answer open: Messages
    answer = answers.Answer(runs=True)
    items = _in_answer(answer, lease)
    assert {type(m) for m in items} == {answers.RunItem}
    assert [_fields(m) for m in items] == [_fields(m) for m in plain], (
        "a RunItem reads as its Message"
    )
    assert [m.message() for m in items] == plain
    response = answer.close(items, None)
    assert not response.messages and sum(len(r.bodies) for r in response.runs) == len(plain)
    assert len(response.runs) == len(result.spans), "a run per lease span"
    wire = queue_pb2.ReceiveResponse.FromString(response.SerializeToString())
    got = models.received_from_pb("q", wire)
    assert got == [models.message_from_pb(m) for m in plain]
    assert response.ByteSize() < queue_pb2.ReceiveResponse(messages=plain).ByteSize()
    no_runs = answers.Answer(runs=False)  # a client that did not ask: Messages as before
    assert list(no_runs.close(_in_answer(no_runs, lease), None).messages) == plain


def test_a_runs_answer_keeps_the_order_of_messages_runs_and_their_pieces() -> None:
    bare = [NewRecord(b"b%d" % i) for i in range(6)]
    keyed = [NewRecord(b"k%d" % i, key="k", headers=(("h", b"v"),)) for i in range(4)]
    book = Receipts(b"s" * 32)
    answer = answers.Answer(runs=True)
    runs = _in_answer(answer, lambda: convert.lease_messages("q", 1, 5, _leased(bare, 5), book))
    others = _in_answer(answer, lambda: convert.lease_messages("q", 3, 5, _leased(keyed, 3), book))
    assert {type(m) for m in others} == {queue_pb2.Message}
    # pieces of runs, reordered, between Messages: as a give-back or a second node leaves them
    picked = [others[0], *runs[3:], *runs[:2], others[2], runs[2], others[1]]
    response = answer.close(picked, queue_pb2.ReceiptsResponse(failures_only=True))
    # runs: offsets 1 (one span) and 2..5 (another); picked: 4-5 | 1 | 2 | 3
    assert [(r.at, r.offset, len(r.bodies)) for r in response.runs] == [
        (1, 4, 2), (3, 1, 1), (4, 2, 1), (6, 3, 1)
    ]  # fmt: skip
    assert len(response.messages) == 3
    assert response.acks.failures_only
    got = models.received_from_pb("q", queue_pb2.ReceiveResponse.FromString(
        response.SerializeToString()))  # fmt: skip
    want = [m.message() if isinstance(m, answers.RunItem) else m for m in picked]
    assert got == [models.message_from_pb(m) for m in want]


def test_run_items_are_bounded_and_counted_as_messages() -> None:
    records = [NewRecord(b"x" * 100) for _ in range(8)]
    answer = answers.Answer(runs=True)
    book = Receipts(b"s" * 32)
    items = _in_answer(answer, lambda: convert.lease_messages("q", 0, 9, _leased(records, 7), book))
    wire = sum(m.message().ByteSize() for m in items)
    assert answers.answer_bytes(items) >= wire, "a bound: never under what the answer costs"
    assert bounds.within_bytes(items, 10**6) == len(items)
    assert bounds.within_bytes(items, 250) == 2  # body bytes, as for Messages
    assert bounds.within_bytes(items[:1], 10) == 1  # one alone always goes
    response = answer.close(items[:3], None)
    assert answers.answered(response) == 3
    assert answers.answered(queue_pb2.ReceiveResponse(messages=[items[0].message()])) == 1
