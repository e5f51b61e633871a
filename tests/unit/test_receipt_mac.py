"""Receipts carry a MAC (server/dataplane/receipts.py): a receipt the cluster did not
issue, or one with any field changed, is refused before anything is parsed
into a command; a genuine one parses as before."""

from __future__ import annotations

import hmac
import re

import pytest

from raft_queue import errors
from raft_queue.core.commands import ReceiptRun
from raft_queue.security.secret import RECEIPT_MAC, derive_key
from raft_queue.server.dataplane.receipts import FORGED, MAC_HEX, UNSIGNED, HmacSha256, Receipts

SECRET = b"\x01" * 32
BOOK = Receipts(SECRET)


def test_a_genuine_lease_of_receipts_parses_to_one_run() -> None:
    lease = BOOK.span("orders", 9, 1, 100, 1000, 3)
    assert all(len(r.rsplit(".", 1)[1]) == MAC_HEX for r in lease)
    assert lease[5].startswith("9:1:105:3:100.1000.")
    assert len({r.rsplit(":", 1)[1] for r in lease}) == 1  # one MAC for the run
    (entry,) = BOOK.parse("orders", lease, 9, 2).values()
    assert entry.runs() == (ReceiptRun(100, 1000, 3),)
    # Any subset, in any order, of one run or of several: the same records.
    some = [lease[7], lease[3], *BOOK.span("orders", 9, 1, 5000, 2, 4), lease[999]]
    (entry,) = BOOK.parse("orders", some, 9, 2).values()
    assert entry.runs() == (
        ReceiptRun(107, 1, 3), ReceiptRun(103, 1, 3), ReceiptRun(5000, 2, 4), ReceiptRun(1099, 1, 3)
    )  # fmt: skip
    assert entry.indexes == [0, 1, 2, 3, 4]
    (entry,) = BOOK.parse("orders", [lease[9], lease[8]], 9, 2).values()  # one run, out of order
    assert entry.runs() == (ReceiptRun(109, 1, 3), ReceiptRun(108, 1, 3))


def _old_format(queue: str, uid: int, part: int, offset: int, epoch: int) -> str:
    """A receipt as nodes issued them before runs: one MAC over the four fields."""
    body = f"{uid}:{part}:{offset}:{epoch}"
    mac = hmac.new(derive_key(SECRET, RECEIPT_MAC), f"{queue}\0{body}".encode(), "sha256")
    return f"{body}:{mac.digest()[:16].hex()}"


def test_receipts_of_the_earlier_format_still_act() -> None:
    old = [_old_format("orders", 9, 1, o, 3) for o in (100, 101)]
    (entry,) = BOOK.parse("orders", [*old, *BOOK.span("orders", 9, 1, 102, 2, 3)], 9, 2).values()
    assert entry.runs() == (ReceiptRun(100, 4, 3),)
    with pytest.raises(errors.InvalidArgument, match="bad MAC"):
        BOOK.parse("orders", [old[0][:-1] + "0"], 9, 2)


@pytest.mark.parametrize(
    "change",
    [
        lambda r: r.replace(":100.4.", ":100.5."),  # widen the run: its MAC breaks
        lambda r: r.replace(":100.4.", ":99.4."),  # move the run
        lambda r: r.replace("9:1:103:3", "9:1:104:3"),  # an offset past the run (in the next)
        lambda r: r.replace("9:1:103:3", "9:1:99:3"),  # an offset before it
        lambda r: r.replace("9:1:103:3", "9:1:-1:3"),
        lambda r: r.replace("9:1:103:3", "9:1:x:3"),
        lambda r: r.replace(":3:100.4.", ":4:100.4."),  # another epoch
        lambda r: r.replace("9:1:103", "9:0:103"),  # another partition
        lambda r: r.replace(":100.4.", ":100.4"),  # run and MAC not split
        lambda r: r.replace(".", ":", 1),  # a field too many
        lambda r: r + "é",
    ],
)
def test_a_run_receipt_covers_its_run_only(change: object) -> None:
    lease = BOOK.span("orders", 9, 1, 100, 4, 3)
    other = BOOK.span("orders", 9, 1, 104, 2, 3)  # the next run, same epoch
    bad = change(lease[3])  # type: ignore[operator]
    assert bad != lease[3]
    for receipts in ([bad], [*lease[:3], bad], [bad, *lease[:3]], [*other, bad, lease[0]]):
        with pytest.raises(errors.InvalidArgument) as info:
            BOOK.parse("orders", receipts, 9, 2)
        assert info.value.field == f"receipts[{receipts.index(bad)}]"


def test_a_run_mac_is_no_receipt_mac_of_the_earlier_format() -> None:
    """The run's MAC, presented as a one-receipt MAC over a body that spells
    the run, is refused: the two MAC inputs differ (``run:`` prefix)."""
    (r,) = BOOK.span("orders", 9, 1, 100, 1, 3)
    mac = r.rsplit(".", 1)[1]
    for body in ("9:1:100:1:3", "9:1:100:3"):
        with pytest.raises(errors.InvalidArgument):
            BOOK.bodies("orders", [f"{body}:{mac}"])  # the MAC check alone refuses it
        with pytest.raises(errors.InvalidArgument, match="bad MAC|not a receipt"):
            BOOK.parse("orders", [f"{body}:{mac}"], 9, 2)


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
