"""PartitionMachine: the replicated state of one queue partition.

Every replica applies the same decoded commands, in Raft order, each in one
write transaction of its own store; ``apply`` reads no clock and no random
source (time is the leader's ``now_ms`` in the command), so replicas hold
identical bytes, which ``digest`` proves. The machine holds no state between
calls: everything lives in the tables (``state.TABLES``), so a snapshot is the
store's image and a restored replica needs nothing else.

Costs: an Append is one put (its records as one segment) plus one per dedup
id and one per request id, and one counters put per apply; Lease, Ack, Nack
and ack compaction touch a handful of rows per run of contiguous records in
one state (``runs``), not per record, unless FIFO keys or per-record delays
make them look at records one by one; ``stats`` is O(1) plus the timers
already due.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from raft_queue.core import appends, carrying, dedup, delivery, queries, receipts, retention
from raft_queue.core.codec import TAG_APPEND, TAG_BATCH, decode, encode, split_batch
from raft_queue.core.commands import (
    Ack,
    Append,
    AppendBlobs,
    Batch,
    CarryLeases,
    ChangeVisibility,
    Command,
    CommitOffset,
    Configure,
    Expire,
    ForgetDead,
    Lease,
    Nack,
    Purge,
    Release,
    SeedDedup,
)
from raft_queue.core.kv import KVTxn
from raft_queue.core.records import check_blob
from raft_queue.core.results import (
    AppendResult,
    History,
    LeaseResult,
    PartitionStats,
    ReadResult,
    ReceiptsResult,
    Result,
)
from raft_queue.core.segments import Segment
from raft_queue.core.state import (
    GROUPS,
    TABLES,
    View,
    check_format,
    int_of,
    store_config,
    u64,
)
from raft_queue.core.wire import Malformed
from raft_queue.errors import InvalidArgument, PartitionSealed


class PartitionMachine:
    """Stateless: one instance may serve any number of stores."""

    TABLES: tuple[str, ...] = TABLES

    def apply(self, txn: KVTxn, cmd: Command) -> Result:
        """Apply ``cmd`` inside ``txn`` (the caller commits). Deterministic.

        Raises InvalidArgument only for something that is not a command; a
        valid command always applies (refusals are in its result).
        """
        view = View(txn)
        result = self._dispatch(view, cmd)
        view.flush()
        return result

    def apply_encoded(self, txn: KVTxn, data: bytes) -> Result:
        """``apply(txn, decode(data))``, with the same results and bytes, but an
        Append (alone or in a Batch) stores its records' bytes as received
        instead of decoding them into NewRecords and encoding them again: the
        replicas' hot path. Its framing is checked, not the records inside
        (the leader built them; ``decode`` checks everything). Malformed
        ``data`` raises InvalidArgument("command"); the caller's transaction
        must then be aborted (part may be applied)."""
        view = View(txn)
        result = _apply_bytes(view, bytes(data), nested=False)
        view.flush()
        return result

    def _dispatch(self, view: View, cmd: Command) -> Result:
        handler = _HANDLERS.get(type(cmd))
        if handler is None:
            raise InvalidArgument("command", f"not a command: {type(cmd).__name__}")
        return handler(view, cmd)

    def read(
        self, txn: KVTxn, offset: int, max_records: int, max_bytes: int | None = None
    ) -> ReadResult:
        """Retained records from ``offset`` on (acked or not: the log is
        replayable), at most ``max_records`` and, past the first record, at most
        ``max_bytes`` of bodies. An offset outside ``[earliest, latest)`` reads
        nothing (``next_offset == offset``); the caller compares it with the
        bounds in the result and decides (the server raises OutOfRange below
        ``earliest``, as Kafka)."""
        return queries.read(txn, offset, max_records, max_bytes)

    def check_format(self, txn: KVTxn) -> None:
        """Internal unless the store is empty or holds this version's data
        format (``state.DATA_FORMAT``): call it when opening a replica's store,
        so data of another version is refused, never misread."""
        check_format(txn)

    def stats(self, txn: KVTxn, now_ms: int) -> PartitionStats:
        """O(1) counters as of ``now_ms`` (see ``queries.stats``)."""
        return queries.stats(txn, now_ms)

    def segments(self, txn: KVTxn, offset: int, end: int) -> list[Segment]:
        """The stored segments holding offsets [offset, end): a sealed batch
        is opened whole (``sealing``), so its reader needs all of it."""
        return queries.segments(txn, offset, end)

    def history(self, txn: KVTxn, offset: int) -> History | None:
        """A record's state and recent leases (see ``queries.history``)."""
        return queries.history(txn, offset)

    def next_due_ms(self, txn: KVTxn) -> int | None:
        """When a long poll should look again (see ``queries.next_due_ms``)."""
        return queries.next_due_ms(txn)

    def dedup_entries(
        self, txn: KVTxn, after: bytes, max_entries: int, max_offsets: int, now_ms: int
    ) -> dedup.DedupPage:
        """Live dedup entries after key ``after`` (a move's export; see
        ``dedup.live_entries``)."""
        return dedup.live_entries(View(txn), after, max_entries, max_offsets, now_ms)

    def offsets(self, txn: KVTxn) -> dict[str, int]:
        """Committed consumer-group offsets."""
        return {key.decode(): int_of(value) for key, value in txn.scan(GROUPS)}

    def digest(self, txn: KVTxn) -> str:
        """Hex SHA-256 over every table's entries in order: equal on replicas
        that applied the same commands. O(size of the partition)."""
        h = hashlib.sha256()
        for table in self.TABLES:
            h.update(b"T" + len(table).to_bytes(4, "big") + table.encode())
            for key, value in txn.scan(table):
                h.update(len(key).to_bytes(4, "big") + key)
                h.update(len(value).to_bytes(8, "big") + value)
        return h.hexdigest()


def _apply_bytes(view: View, data: bytes, nested: bool) -> Result:
    tag = data[0] if data else -1
    if tag == TAG_APPEND:
        return appends.append(view, data)
    if tag == TAG_BATCH and not nested:
        return tuple([_apply_part(view, part) for part in split_batch(data)])  # type: ignore[misc]
    cmd = decode(data)
    if isinstance(cmd, Batch):
        raise InvalidArgument("command", "nested Batch")
    return _HANDLERS[type(cmd)](view, cmd)


def _apply_part(view: View, data: bytes) -> Result | PartitionSealed:
    """One command of a Batch. An Append refused by a sealed partition is its
    own result, not the batch's: the acks it rode with still apply."""
    try:
        return _apply_bytes(view, data, nested=True)
    except PartitionSealed as exc:
        return exc


def _configure(view: View, cmd: Configure) -> None:
    was_fifo = view.fifo
    view.cfg = cmd.config
    store_config(view.txn, cmd.config)
    if was_fifo and not view.fifo:
        delivery.unblock_all(view)


def _append(view: View, cmd: Append) -> AppendResult:
    return appends.append(view, encode(cmd))


def _append_given_blobs(view: View, cmd: AppendBlobs) -> AppendResult:
    """As ``apply_encoded`` of its bytes, but the blobs are checked first
    (this path is not the replicas': they get bytes)."""
    try:
        for blob in cmd.blobs:
            check_blob(blob)
    except Malformed as exc:
        raise InvalidArgument("command", f"malformed Append: {exc}") from exc
    return appends.append(view, encode(cmd))


def _lease(view: View, cmd: Lease) -> LeaseResult:
    if view.cfg.fenced:  # moving away: what is left is copied, not leased here
        return LeaseResult(())
    view.at(cmd.now_ms)
    return delivery.lease(view, cmd.max_records, cmd.visibility_ms, cmd.consumer)


def _ack(view: View, cmd: Ack) -> ReceiptsResult:
    view.at(cmd.now_ms)
    return receipts.settle(view, cmd.receipts, receipts.ack)


def _nack(view: View, cmd: Nack) -> ReceiptsResult:
    view.at(cmd.now_ms)
    return receipts.settle(view, cmd.receipts, receipts.nack_action(cmd.delay_ms))


def _release(view: View, cmd: Release) -> ReceiptsResult:
    view.at(cmd.now_ms)
    return receipts.settle(view, cmd.receipts, receipts.release)


def _change_visibility(view: View, cmd: ChangeVisibility) -> ReceiptsResult:
    view.at(cmd.now_ms)
    return receipts.settle(view, cmd.receipts, receipts.visibility_action(cmd.visibility_ms))


def _commit_offset(view: View, cmd: CommitOffset) -> int:
    """Never backwards unless ``reset`` (as Kafka's committed offsets)."""
    key = cmd.group.encode()
    raw = view.txn.get(GROUPS, key)
    if raw is not None and not cmd.reset and int_of(raw) >= cmd.offset:
        return int_of(raw)
    view.txn.put(GROUPS, key, u64(cmd.offset))
    return cmd.offset


def _expire(view: View, cmd: Expire) -> Result:
    view.at(cmd.now_ms)
    return retention.expire(view)


def _purge(view: View, cmd: Purge) -> int:
    view.at(cmd.now_ms)
    return retention.purge(view)


def _forget_dead(view: View, cmd: ForgetDead) -> int:
    return retention.forget_dead(view, cmd.offsets)


def _seed_dedup(view: View, cmd: SeedDedup) -> int:
    view.at(cmd.now_ms)
    return dedup.seed(view, cmd.entries)


def _carry_leases(view: View, cmd: CarryLeases) -> int:
    view.at(cmd.now_ms)
    return carrying.carry(view, cmd.leases)


def _batch(view: View, cmd: Batch) -> tuple[Result, ...]:
    """One transaction, one counters write; results in command order."""
    return tuple(_HANDLERS[type(sub)](view, sub) for sub in cmd.commands)


_HANDLERS: dict[type, Callable[[View, Any], Result]] = {
    Configure: _configure,
    Append: _append,
    AppendBlobs: _append_given_blobs,
    Lease: _lease,
    Ack: _ack,
    Nack: _nack,
    Release: _release,
    ChangeVisibility: _change_visibility,
    CommitOffset: _commit_offset,
    Expire: _expire,
    Purge: _purge,
    ForgetDead: _forget_dead,
    SeedDedup: _seed_dedup,
    CarryLeases: _carry_leases,
    Batch: _batch,
}
