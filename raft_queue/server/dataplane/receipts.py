"""Receipt strings: the one place they are made and read.

A receipt is ``<queue uid>:<partition>:<offset>:<lease epoch>:<run>.<count>.<mac>``.
The uid makes a receipt of a deleted-and-recreated queue invalid; the epoch
makes one of an earlier lease stale (core/receipts.py). ``run`` and ``count``
name the lease's run the record was leased in (offsets ``run .. run+count-1``,
all of that epoch), and the MAC is HMAC-SHA256, truncated to 128 bits (hex),
under ``derive_key(secret, RECEIPT_MAC)`` over the queue name and the run
(``run:<uid>:<partition>:<run>:<count>:<epoch>``): one MAC per run, not per
message, and a receipt's offset must lie inside its run. So a receipt cannot
be guessed, altered (an offset outside its run, another epoch, partition,
run or count) or carried to another queue: one consumer cannot ack or extend
another's lease; every offset a run covers was leased under that epoch in
that one lease, so naming any of them names a receipt the node issued. Every
node of a cluster holds the key, so any node can check a receipt before
anything is proposed.

Receipts of the earlier format, one MAC per receipt
(``<uid>:<partition>:<offset>:<epoch>:<mac>``, the MAC over the four fields),
are still taken. The two MAC inputs cannot be confused: a run's starts with
``run:``, a per-receipt one with the uid's digits.

A receipt that fails its MAC, or carries none (issued before receipts were
signed), is refused as bad input: INVALID_ARGUMENT naming ``receipts[i]``,
the whole call refused and nothing applied, as for any string that is not a
receipt of this queue. A *stale* receipt is different: it was genuine, its
lease moved on, and it is reported per receipt (``ok = false``).

A node with ``security.insecure = true`` (no cluster secret) issues and
accepts receipts without the MAC (the four fields only).

The MAC is computed here, in the server: the key is configuration, and
``core/`` only ever sees (offset, epoch) runs.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from itertools import repeat

from raft_queue import errors
from raft_queue.core.commands import ReceiptRun
from raft_queue.core.wire import U32_MAX, U64_MAX
from raft_queue.security.secret import RECEIPT_MAC, derive_key

MAC_BYTES = 16  # 128 bits, as NIST SP 800-107 allows for a truncated HMAC
MAC_HEX = 2 * MAC_BYTES
MAX_BULK_RUNS = 16  # an ack of more runs is checked receipt by receipt

UNSIGNED = (
    "receipt carries no MAC (issued before receipts were signed, or by an "
    "insecure node): receive the message again once its lease ends"
)
FORGED = "receipt was not issued by this cluster for this queue (bad MAC)"


class Receipts:
    """Makes and checks this cluster's receipts (asyncio thread; the MAC
    state is copied per receipt, never shared mid-use)."""

    def __init__(self, secret: bytes | None) -> None:
        key = derive_key(secret, RECEIPT_MAC) if secret is not None else None
        self._base = HmacSha256(key) if key is not None else None

    @property
    def signed(self) -> bool:
        return self._base is not None

    def encode(self, queue: str, uid: int, partition: int, offset: int, epoch: int) -> str:
        return self.span(queue, uid, partition, offset, 1, epoch)[0]

    def span(
        self, queue: str, uid: int, partition: int, offset: int, count: int, epoch: int
    ) -> list[str]:
        """The receipts of one lease's ``count`` records from ``offset``: one
        MAC for the run, each receipt its offset plus the run's signed tail."""
        head, tail = self.run_parts(queue, uid, partition, offset, count, epoch)
        return [f"{head}{o}{tail}" for o in range(offset, offset + count)]

    def run_parts(
        self, queue: str, uid: int, partition: int, offset: int, count: int, epoch: int
    ) -> tuple[str, str]:
        """(head, tail) of a lease run's receipts: the receipt of offset ``o``
        in it is ``head + str(o) + tail`` (what a MessageRun carries)."""
        head = f"{uid}:{partition}:"
        if self._base is None:
            return head, f":{epoch}"
        mac = self._run_mac(_prefix(queue), f"{uid}:{partition}:{offset}:{count}:{epoch}")
        return head, f":{epoch}:{offset}.{count}.{mac}"

    def _run_mac(self, prefix: bytes, run: str) -> str:
        assert self._base is not None
        return self._base.digest(prefix + b"run:" + run.encode())[:MAC_BYTES].hex()

    def parse(
        self,
        queue: str,
        receipts: Sequence[str],
        uid: int,
        partitions: int,
        field: str = "receipts",
    ) -> dict[int, PartReceipts]:
        """Every receipt checked (MAC, then fields) and grouped by partition;
        InvalidArgument ``<field>[i]`` at the first bad one, before
        anything is applied."""
        if self._base is not None:
            # A protobuf repeated field makes a str per item on every walk: once here.
            receipts = receipts if isinstance(receipts, list) else list(receipts)
            bulk = self._few_runs(queue, receipts, uid, partitions)
            if bulk is not None:
                return bulk
        return receipts_by_partition(self.bodies(queue, receipts, field), uid, partitions, field)

    def _few_runs(
        self, queue: str, receipts: Sequence[str], uid: int, partitions: int
    ) -> dict[int, PartReceipts] | None:
        """``parse`` for the usual ack (the receipts of one partition and a
        few runs, every one good), checked by C loops and one MAC per run;
        None for anything else (the receipt-by-receipt path then names the
        bad one)."""
        n = len(receipts)
        if not n or list(map(str.count, receipts, repeat(":", n))).count(4) != n:
            return None
        fields = ":".join(receipts).split(":")
        uids, parts, epochs, runs = fields[0::5], fields[1::5], fields[3::5], fields[4::5]
        if uids.count(uids[0]) != n or parts.count(parts[0]) != n:
            return None
        pairs = set(zip(epochs, runs, strict=True))
        if len(pairs) > MAX_BULK_RUNS:
            return None
        prefix, head = _prefix(queue), f"{uids[0]}:{parts[0]}"
        try:
            offsets = list(map(int, fields[2::5]))
            checked = {pair: self._run_bounds(prefix, head, *pair) for pair in pairs}
            ruid, part = int(uids[0]), int(parts[0])
        except (ValueError, TypeError):  # not run receipts, or not ASCII
            return None
        bounds = {pair: b for pair, b in checked.items() if b is not None}
        if len(bounds) != len(pairs) or ruid != uid or not 0 <= part < partitions:
            return None
        entry = PartReceipts()
        if len(pairs) == 1:
            lo, hi, epoch = bounds[epochs[0], runs[0]]
            o = offsets[0]
            if not (min(offsets) >= lo and max(offsets) < hi):
                return None
            if offsets == list(range(o, o + n)):
                entry.add_run(n, o, epoch)  # one lease's receipts, in order
                return {part: entry}
        for i, (offset, pair) in enumerate(
            zip(offsets, zip(epochs, runs, strict=True), strict=True)
        ):
            lo, hi, epoch = bounds[pair]
            if not lo <= offset < hi:
                return None
            entry.add(i, offset, epoch)
        return {part: entry}

    def _run_bounds(
        self, prefix: bytes, head: str, epoch_s: str, run: str
    ) -> tuple[int, int, int] | None:
        """(first offset, end, epoch) of a run receipt's run if its MAC and
        fields are good, else None. ValueError if it is no run receipt."""
        start, count, mac = run.split(".")
        if not hmac.compare_digest(self._run_mac(prefix, f"{head}:{start}:{count}:{epoch_s}"), mac):
            return None
        lo, hi, epoch = int(start), int(start) + int(count), int(epoch_s)
        if not (lo >= 0 and hi - 1 <= U64_MAX and 0 < epoch <= U32_MAX):
            return None
        return lo, hi, epoch

    def bodies(self, queue: str, receipts: Sequence[str], field: str = "receipts") -> Sequence[str]:
        """The receipts without their MACs (``uid:partition:offset:epoch``),
        each MAC checked (constant time; a run's once per call)."""
        if self._base is None:
            return receipts
        prefix, digest, same = _prefix(queue), self._base.digest, hmac.compare_digest
        good_runs: set[tuple[str, str, str, str]] = set()
        out: list[str] = []
        add = out.append
        for i, receipt in enumerate(receipts):
            body, _, given = receipt.rpartition(":")
            if "." in given:  # one MAC per run
                ok = self._in_good_run(prefix, body, given, good_runs)
            else:
                try:
                    ok = same(digest(prefix + body.encode())[:MAC_BYTES].hex(), given)
                except TypeError:  # not ASCII: no MAC of ours
                    ok = False
            if not ok:
                raise _refused(i, receipt, field)
            add(body)
        return out

    def _in_good_run(
        self, prefix: bytes, body: str, given: str, good: set[tuple[str, str, str, str]]
    ) -> bool:
        """Whether ``body``'s offset lies in the run ``given`` names and the
        run's MAC is good (remembered in ``good`` for the call)."""
        b, g = body.split(":"), given.split(".")
        if len(b) != 4 or len(g) != 3:
            return False
        uid, part, offset, epoch = b
        start, count, mac = g
        key = (uid, part, epoch, given)
        if key not in good:
            try:
                expected = self._run_mac(prefix, f"{uid}:{part}:{start}:{count}:{epoch}")
                if not hmac.compare_digest(expected, mac):
                    return False
            except (TypeError, UnicodeEncodeError):
                return False
            good.add(key)
        try:
            return int(start) <= int(offset) < int(start) + int(count)
        except ValueError:
            return False


def _refused(i: int, receipt: str, field: str = "receipts") -> errors.InvalidArgument:
    body, _, given = receipt.rpartition(":")
    mac = given.rpartition(".")[2]
    if len(given) != MAC_HEX and receipt.count(":") == 3:
        why = UNSIGNED
    elif body.count(":") != 3 or len(mac) != MAC_HEX:
        why = f"{receipt!r} is not a receipt"
    else:
        why = FORGED
    return errors.InvalidArgument(f"{field}[{i}]", why)


class HmacSha256:
    """HMAC-SHA256 under one key, from the standard library (``hmac``): the
    keyed state is made once and copied per message. It was written out by
    hand when every leased message had its own MAC (1.1 against 2.3 us a
    receipt); with one MAC per leased run the library's copy costs next to
    nothing per message, and crypto is not written here."""

    __slots__ = ("_keyed",)

    def __init__(self, key: bytes) -> None:
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    def digest(self, msg: bytes) -> bytes:
        mac = self._keyed.copy()
        mac.update(msg)
        return mac.digest()


def _prefix(queue: str) -> bytes:
    return queue.encode() + b"\x00"  # a queue name never holds NUL (config.check_queue_name)


class PartReceipts:
    """The receipts of one partition in a request: their indexes in the
    request, and as ``ReceiptRun``s (consecutive offsets of one epoch merged,
    order kept), which is how commands carry them."""

    __slots__ = ("indexes", "_runs")

    def __init__(self) -> None:
        self.indexes: list[int] = []
        self._runs: list[list[int]] = []  # [start, count, epoch]

    def add(self, i: int, offset: int, epoch: int) -> None:
        self.indexes.append(i)
        runs = self._runs
        if runs:
            last = runs[-1]
            if last[2] == epoch and last[0] + last[1] == offset:
                last[1] += 1
                return
        runs.append([offset, 1, epoch])

    def add_run(self, n: int, offset: int, epoch: int) -> None:
        """The next ``n`` receipts of the request: offsets ``offset ..``, one epoch."""
        start = len(self.indexes) and self.indexes[-1] + 1
        self.indexes.extend(range(start, start + n))
        self._runs.append([offset, n, epoch])

    def runs(self) -> tuple[ReceiptRun, ...]:
        return tuple(ReceiptRun(s, n, e) for s, n, e in self._runs)


def receipts_by_partition(
    receipts: Sequence[str], uid: int, partitions: int, field: str = "receipts"
) -> dict[int, PartReceipts]:
    """Receipt bodies (``uid:partition:offset:epoch``, MACs already checked)
    parsed and checked (InvalidArgument ``<field>[i]`` at the first bad one,
    before anything is applied), grouped by partition."""
    bulk = _one_partition(receipts, uid, partitions)
    if bulk is not None:
        return bulk
    by_part: dict[int, PartReceipts] = {}
    for i, receipt in enumerate(receipts):
        try:
            ruid, part, offset, epoch = map(int, receipt.split(":"))
        except ValueError:
            raise errors.InvalidArgument(f"{field}[{i}]", f"{receipt!r} is not a receipt") from None
        if ruid != uid:
            raise errors.InvalidArgument(
                f"{field}[{i}]", "receipt is from another queue (or a deleted one)"
            )
        if not 0 <= part < partitions:
            raise errors.InvalidArgument(
                f"{field}[{i}]", f"{receipt!r} names no partition of this queue"
            )
        if not (0 <= offset <= U64_MAX and 0 < epoch <= U32_MAX):
            raise errors.InvalidArgument(f"{field}[{i}]", f"{receipt!r} is not a receipt")
        entry = by_part.get(part)
        if entry is None:
            entry = by_part[part] = PartReceipts()
        entry.add(i, offset, epoch)
    return by_part


def _one_partition(
    receipts: Sequence[str], uid: int, partitions: int
) -> dict[int, PartReceipts] | None:
    """``receipts_by_partition`` for the usual ack (every receipt good, all
    of one partition), parsed in bulk by C loops; None for anything else
    (the receipt-by-receipt path then names the bad one)."""
    n = len(receipts)
    if not n or list(map(str.count, receipts, repeat(":", n))).count(3) != n:
        return None
    try:
        ints = list(map(int, ":".join(receipts).split(":")))
    except ValueError:
        return None
    part, offsets, epochs = ints[1], ints[2::4], ints[3::4]
    if (
        ints[0::4].count(uid) != n
        or ints[1::4].count(part) != n
        or not 0 <= part < partitions
        or not (min(offsets) >= 0 and max(offsets) <= U64_MAX)
        or not (min(epochs) > 0 and max(epochs) <= U32_MAX)
    ):
        return None
    entry = PartReceipts()
    first = offsets[0]
    if epochs.count(epochs[0]) == n and offsets == list(range(first, first + n)):
        entry.add_run(n, first, epochs[0])  # one lease's receipts, in order
    else:
        for i, (offset, epoch) in enumerate(zip(offsets, epochs, strict=True)):
            entry.add(i, offset, epoch)
    return {part: entry}
