"""PartitionMachine: the replicated state of one queue partition.

Every replica applies the same decoded commands, in Raft order, each in one
write transaction of its own store; ``apply`` reads no clock and no random
source (time is the leader's ``now_ms`` in the command), so replicas hold
identical bytes, which ``digest`` proves. The machine holds no state between
calls: everything lives in the tables (``state.TABLES``), so a snapshot is the
store's image and a restored replica needs nothing else.

Costs: Append is one put per record (plus one per dedup id) and one counters
put per apply; Lease, Ack and Nack touch a handful of small tables per record;
``stats`` is O(1) plus the timers already due.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from itertools import islice
from typing import Any

from raft_queue.core import delivery, queries, retention
from raft_queue.core.codec import TAG_APPEND, TAG_BATCH, decode, split_append, split_batch
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
    Purge,
)
from raft_queue.core.kv import KVTxn
from raft_queue.core.records import (
    StoredRecord,
    check_blob,
    decode_value,
    stored_value,
    to_blob,
)
from raft_queue.core.results import (
    AppendItem,
    AppendResult,
    History,
    LeaseResult,
    PartitionStats,
    ReadResult,
    ReceiptsResult,
    Result,
)
from raft_queue.core.state import (
    DEDUP,
    GROUPS,
    RECORDS,
    TABLES,
    View,
    int_of,
    load_counters,
    pair_key,
    store_config,
    table_key,
    u64,
    unpack_pair,
)
from raft_queue.core.wire import Malformed
from raft_queue.errors import InvalidArgument


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
        replicas' hot path. Malformed ``data`` raises InvalidArgument("command");
        the caller's transaction must then be aborted (part may be applied)."""
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
        c = load_counters(txn)
        records: list[StoredRecord] = []
        total = 0
        start = u64(offset) if c.earliest <= offset < c.next_offset else None
        scan = txn.scan(RECORDS, start) if start is not None else iter(())
        for raw_key, value in islice(scan, max(max_records, 0)):
            rec = decode_value(int_of(raw_key), value)
            total += len(rec.body)
            if records and max_bytes is not None and total > max_bytes:
                break
            records.append(rec)
        next_offset = records[-1].offset + 1 if records else offset
        return ReadResult(tuple(records), next_offset, c.earliest, c.next_offset)

    def stats(self, txn: KVTxn, now_ms: int) -> PartitionStats:
        """O(1) counters as of ``now_ms`` (see ``queries.stats``)."""
        return queries.stats(txn, now_ms)

    def history(self, txn: KVTxn, offset: int) -> History | None:
        """A record's state and recent leases (see ``queries.history``)."""
        return queries.history(txn, offset)

    def next_due_ms(self, txn: KVTxn) -> int | None:
        """When a long poll should look again (see ``queries.next_due_ms``)."""
        return queries.next_due_ms(txn)

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
        return _append_blobs(view, *split_append(data))
    if tag == TAG_BATCH and not nested:
        return tuple([_apply_bytes(view, part, nested=True) for part in split_batch(data)])
    cmd = decode(data)
    if isinstance(cmd, Batch):
        raise InvalidArgument("command", "nested Batch")
    return _HANDLERS[type(cmd)](view, cmd)


def _configure(view: View, cmd: Configure) -> None:
    was_fifo = view.fifo
    view.cfg = cmd.config
    store_config(view.txn, cmd.config)
    if was_fifo and not view.fifo:
        delivery.unblock_all(view)


def _append(view: View, cmd: Append) -> AppendResult:
    records = [(to_blob(r), r.dedup_id.encode()) for r in cmd.records]
    return _append_blobs(view, cmd.now_ms, records)


def _append_given_blobs(view: View, cmd: AppendBlobs) -> AppendResult:
    try:
        records = [(blob, check_blob(blob)) for blob in cmd.blobs]
    except Malformed as exc:
        raise InvalidArgument("command", f"malformed Append: {exc}") from exc
    return _append_blobs(view, cmd.now_ms, records)


def _append_blobs(view: View, now_ms: int, records: list[tuple[bytes, bytes]]) -> AppendResult:
    """Dense offsets; ``timestamp_ms`` is ``now_ms``, raised if needed to the
    previous record's so timestamps never decrease (retention, delay and dedup
    walk the log in time order). ``records``: (blob, dedup_id as UTF-8) pairs.

    The hot path of every replica: the dedup check of ``dedup.lookup_or_record``
    is inlined, and the records go to the log in one ``put_many``."""
    c, txn = view.c, view.txn
    ts = c.last_ts = max(now_ms, c.last_ts)
    view.at(ts)
    window = view.cfg.dedup_window_ms
    clock = c.clock
    get, put = txn.get, txn.put
    offset = c.next_offset
    items: list[AppendItem] = []
    add_item = items.append
    rows: list[tuple[bytes, bytes]] = []
    add_row = rows.append
    stamp = stored_value(ts, b"")  # the >Q timestamp every value starts with
    for blob, dedup_id in records:
        if dedup_id and window > 0:
            key = table_key(dedup_id)
            raw = get(DEDUP, key)
            if raw is not None:
                original, original_ts = unpack_pair(raw)
                if clock - original_ts < window:
                    add_item(AppendItem(original, True))
                    continue
            put(DEDUP, key, pair_key(offset, ts))
        add_row((u64(offset), stamp + blob))
        add_item(AppendItem(offset, False))
        offset += 1
    txn.put_many(RECORDS, rows)
    added = sum(len(value) for _, value in rows)
    c.next_offset, c.stored_bytes = offset, c.stored_bytes + added
    return AppendResult(tuple(items))


def _lease(view: View, cmd: Lease) -> LeaseResult:
    view.at(cmd.now_ms)
    return LeaseResult(delivery.lease(view, cmd.max_records, cmd.visibility_ms, cmd.consumer))


def _ack(view: View, cmd: Ack) -> ReceiptsResult:
    view.at(cmd.now_ms)
    return ReceiptsResult(delivery.settle(view, cmd.receipts, delivery.ack))


def _nack(view: View, cmd: Nack) -> ReceiptsResult:
    view.at(cmd.now_ms)
    return ReceiptsResult(delivery.settle(view, cmd.receipts, delivery.nack_action(cmd.delay_ms)))


def _change_visibility(view: View, cmd: ChangeVisibility) -> ReceiptsResult:
    view.at(cmd.now_ms)
    action = delivery.visibility_action(cmd.visibility_ms)
    return ReceiptsResult(delivery.settle(view, cmd.receipts, action))


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
    ChangeVisibility: _change_visibility,
    CommitOffset: _commit_offset,
    Expire: _expire,
    Purge: _purge,
    ForgetDead: _forget_dead,
    Batch: _batch,
}
