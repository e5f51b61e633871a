"""Receipts carry a MAC (server/dataplane/receipts.py): a receipt the cluster did not
issue, or one with any field changed, is refused before anything is parsed
into a command; a genuine one parses as before."""

from __future__ import annotations

import hmac
import re

import pytest

from raft_queue import errors
from raft_queue.core.commands import ReceiptRun
from raft_queue.server.dataplane.receipts import FORGED, MAC_HEX, UNSIGNED, HmacSha256, Receipts

SECRET = b"\x01" * 32
BOOK = Receipts(SECRET)


def test_a_genuine_lease_of_receipts_parses_to_one_run() -> None:
    lease = BOOK.span("orders", 9, 1, 100, 1000, 3)
    assert all(len(r.rsplit(":", 1)[1]) == MAC_HEX for r in lease)
    (entry,) = BOOK.parse("orders", lease, 9, 2).values()
    assert entry.runs() == (ReceiptRun(100, 1000, 3),)


def _altered(receipt: str, field: int, value: str) -> str:
    parts = receipt.split(":")
    parts[field] = value
    return ":".join(parts)


@pytest.mark.parametrize(
    ("field", "value"),
    [(0, "8"), (1, "0"), (2, "101"), (3, "4"), (4, "0" * MAC_HEX)],
    ids=["uid", "partition", "offset", "epoch", "mac"],
)
def test_a_receipt_with_any_field_changed_is_refused(field: int, value: str) -> None:
    good = BOOK.encode("orders", 9, 1, 100, 3)
    with pytest.raises(errors.InvalidArgument, match="bad MAC") as info:
        BOOK.parse("orders", [good, _altered(good, field, value)], 9, 2)
    assert info.value.field == "receipts[1]"


def test_a_receipt_is_bound_to_its_queue_name_and_to_the_cluster_key() -> None:
    good = BOOK.encode("orders", 9, 1, 100, 3)
    with pytest.raises(errors.InvalidArgument, match=re.escape(FORGED)):
        BOOK.parse("orders2", [good], 9, 2)
    other_cluster = Receipts(b"\x02" * 32)
    with pytest.raises(errors.InvalidArgument, match=re.escape(FORGED)):
        other_cluster.parse("orders", [good], 9, 2)


@pytest.mark.parametrize("receipt", ["9:1:100:3", "9:1:100:3:", "made-up", ""])
def test_unsigned_or_made_up_receipts_are_refused(receipt: str) -> None:
    with pytest.raises(errors.InvalidArgument) as info:
        BOOK.parse("orders", [receipt], 9, 2)
    assert info.value.field == "receipts[0]"
    if receipt == "9:1:100:3":  # issued before receipts were signed
        assert UNSIGNED in info.value.message


def test_an_insecure_node_issues_and_takes_the_four_fields() -> None:
    plain = Receipts(None)
    assert plain.encode("orders", 9, 1, 100, 3) == "9:1:100:3"
    (entry,) = plain.parse("orders", ["9:1:100:3"], 9, 2).values()
    assert entry.runs() == (ReceiptRun(100, 1, 3),)


@pytest.mark.parametrize("key", [b"", b"k" * 32, b"k" * 64, b"k" * 65, bytes(range(200))])
def test_the_precomputed_hmac_is_hmac_sha256(key: bytes) -> None:
    for msg in (b"", b"orders\x009:1:100:3", b"x" * 1000):
        assert HmacSha256(key).digest(msg) == hmac.new(key, msg, "sha256").digest()
