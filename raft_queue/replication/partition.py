"""One replica of one queue partition: a Raft group over an LMDB state machine.

Apply runs on the driver thread: decode the entry, run the pure
``PartitionMachine`` in one LMDB write transaction that also stores the Raft
index, so replaying the journal after a crash skips what LMDB already has.
Snapshots are LMDB images (``snapshot.py``), streamed by pysyncobj to lagging
followers and restored atomically.

Reads (``read``, ``stats``, ``digest``) run on any thread in read
transactions, concurrently with apply.

Hook for long polls: ``on_wake`` (set by the node) is called on the driver
thread after an applied entry that may have made a message visible (Append,
Nack, Release, Ack: a FIFO key's next record, ChangeVisibility, Configure,
Expire). It
must be cheap and never block: the node's hook only bumps a counter and, when
someone waits, schedules a wake-up on the asyncio loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import ExitStack, contextmanager
from typing import Any, BinaryIO

from pysyncobj.monotonic import monotonic as monotonic_time

from raft_queue import errors
from raft_queue.core import codec, commands
from raft_queue.core.partition import PartitionMachine
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.replication import entries, offdriver, snapshot, writeout
from raft_queue.replication.diskfiles import drop_page_cache
from raft_queue.replication.group import (
    MAX_COMMANDS_PER_ENTRY,
    Pending,
    ReplicatedGroup,
    Waiter,
)
from raft_queue.replication.host import RaftHost
from raft_queue.replication.raft import bind_address_for, make_conf
from raft_queue.replication.standing import StandingLeases
from raft_queue.storage.lmdb_store import HeldWrite, LmdbStore

log = logging.getLogger(__name__)


# Commands after which a waiting Receive or Read may find something new.
_WAKING = (
    commands.Append,
    commands.Nack,
    commands.Release,
    commands.Ack,
    commands.ChangeVisibility,
    commands.Configure,
    commands.Expire,
)


# By the entry's first byte, so the apply path never decodes just to decide.
# A batch (many requests in one entry) conservatively wakes waiters.
_WAKING_TAGS = frozenset(codec.tag_of(cls) for cls in (*_WAKING, commands.Batch))


def _may_wake(data: bytes) -> bool:
    return bool(data) and data[0] in _WAKING_TAGS


# How many records a command may make visible, when it does not say
# (Configure, Expire, ...): the standing leases it takes along at most.
_SHOW_UNKNOWN = 64


def _may_show(command: Any) -> int:
    """Records ``command`` may make visible (an upper bound, for riders)."""
    kind = type(command)
    if kind is commands.AppendBlobs:
        return len(command.blobs)
    if kind is commands.Append:
        return len(command.records)
    if kind in (commands.Nack, commands.Release, commands.ChangeVisibility, commands.Ack):
        return sum(run.count for run in command.receipts)
    return _SHOW_UNKNOWN if kind in _RIDDEN_FIFO else 0


# How long a claimed standing lease waits for its commit (the default
# command timeout, ReplicatedGroup.submit).
CLAIMED_COMMIT_S = 10.0


# Proposing one of these takes the standing leases along (see standing.py).
# Ack only in FIFO queues (it may release its key's next record); elsewhere
# an ack makes nothing visible and a lease beside it would find nothing.
_RIDDEN = frozenset(
    (
        commands.Append,
        commands.AppendBlobs,
        commands.Nack,
        commands.Release,
        commands.ChangeVisibility,
        commands.Configure,
        commands.Expire,
    )
)
_RIDDEN_FIFO = _RIDDEN | {commands.Ack}


# Test and benchmark switch (read once): RAFTQ_APPLY_AHEAD=0 applies every
# entry only once committed, as before apply-ahead (docs/benchmarks.md).
APPLY_AHEAD = os.environ.get("RAFTQ_APPLY_AHEAD", "1") != "0"


class _Ahead:
    """The leader's newest entry, applied before its commit (``after_append``)."""

    __slots__ = ("data", "held", "index", "result")

    def __init__(self, index: int, data: bytes, held: HeldWrite, result: Any) -> None:
        self.index, self.data, self.held, self.result = index, data, held, result


def _wall_ms() -> int:
    return int(time.time() * 1000)


class _Predicted(Exception):
    """Carries a predicted result out of the write transaction it aborts."""

    def __init__(self, result: Any) -> None:
        super().__init__("predicted")
        self.result = result


class PartitionReplica(ReplicatedGroup):
    def __init__(
        self,
        key: str,
        host: RaftHost,
        self_address: str,
        peers: Sequence[str],
        data_dir: str,
        election_timeout_s: tuple[float, float] = (1.0, 2.0),
        heartbeat_s: float | None = None,
        dial: Callable[[str], str | None] = lambda a: None,
        fsync: bool = True,
        log_compaction_min_entries: int = 20000,
        log_compaction_min_time_s: float = 300.0,
        durability: str = "",
        preferred: bool | None = None,
        bind_host: str | None = None,
        link_key: bytes | None = None,
    ) -> None:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)  # private: docs/security.md
        self.durability = durability or ("fsync" if fsync else "quorum")
        fsync = self.durability == "fsync"
        self.data_dir = data_dir
        self.on_wake: Callable[[], None] | None = None  # driver thread; see module doc
        self.applied_entries = 0  # entries applied since open (housekeeping skips idle groups)
        self.standing = StandingLeases()  # long polls waiting here (standing.py)
        self.standing.on_stand = self._stood
        # Leader: the log index by which the last entry that may make records
        # visible was proposed; while it is not applied, a poll that stands
        # is proposed at once, right behind it (see _stood).
        self._waking_upto = 0
        self._waking_left = 0  # records that entry may show no standing lease took yet
        self._ridden = _RIDDEN
        self.machine = PartitionMachine()
        self._stored_index: int | None = None  # LMDB's last_applied (_last_applied)
        self._ahead: _Ahead | None = None  # driver thread: see after_append
        self.applied_ahead = 0  # entries whose commit found them applied ahead
        drop_page_cache(data_dir)  # before LMDB maps its file (see ReplicatedGroup)
        self.store = LmdbStore(os.path.join(data_dir, "lmdb"), tables=PartitionMachine.TABLES)
        self._check_format()
        conf = make_conf(
            journal_file=os.path.join(data_dir, "raft.journal"),
            dump_file=os.path.join(data_dir, "raft.dump"),
            election_timeout_min_s=election_timeout_s[0],
            election_timeout_max_s=election_timeout_s[1],
            heartbeat_s=heartbeat_s,
            bind_address=bind_address_for(bind_host, self_address),
            serializer=self._serialize,
            deserializer=self._deserialize,
            log_compaction_min_entries=log_compaction_min_entries,
            log_compaction_min_time_s=log_compaction_min_time_s,
        )
        super().__init__(
            key,
            host,
            self_address,
            peers,
            conf,
            dial=dial,
            link_key=link_key,
            fsync=fsync,
            lease_quorum_s=election_timeout_s[0],
        )
        if preferred is not None and self._SyncObj__raftCurrentTerm == 0:
            # A new partition: its preferred (first) replica campaigns first
            # and the others wait one more election timeout, so it leads from
            # the start instead of taking over PREFER_AFTER_S later by a
            # transfer, an election that pauses the partition. If it is down,
            # the others elect a leader election_timeout_s[1] later.
            low, high = election_timeout_s
            first = low / 4 if preferred else high + random.uniform(low, high)
            self._SyncObj__raftElectionDeadline = monotonic_time() + first
        self._data_file = os.path.join(data_dir, "lmdb", "data.mdb")
        writeout.register(self._data_file)  # steadily, not all at once later (writeout.py)
        # Snapshots are written off the driver thread (offdriver.py, issue 17).
        self._image: Callable[[BinaryIO], None] | None = None  # the pinned image's writer
        self._snapshots = offdriver.write_snapshots_off_driver(
            self._SyncObj__serializer, self._pin_image
        )

    # ---- state machine --------------------------------------------------------------
    def encode_batch(self, cmds: list[Any]) -> bytes:
        if len(cmds) == 1:
            return commands.encode(cmds[0])
        return commands.encode(commands.Batch(tuple(cmds)))

    def _enqueue(
        self, command: Any, fut: Waiter, timeout_s: float, level: str, wake: bool, hold_s: float
    ) -> None:
        if type(command) is commands.Configure:  # every leader is configured first
            fifo = command.config.ordering == "fifo"
            self._ridden = _RIDDEN_FIFO if fifo else _RIDDEN
        super()._enqueue(command, fut, timeout_s, level, wake, hold_s)

    def may_hold(self, command: Any) -> bool:
        """Whether ``command`` may wait for the next entry (``submit(hold_s=)``):
        not if it may make records visible (a FIFO queue's Ack frees its key:
        held, the key's next record would wait for it)."""
        return type(command) not in self._ridden

    def riders(self, pending: list[Pending]) -> list[Pending]:
        """The standing leases, if ``pending`` may make records visible: as
        many as those records can feed, in the same entry (standing.py)."""
        if not any(type(p[0]) in self._ridden for p in pending):
            return []
        self._waking_upto = self._SyncObj__getCurrentLogIndex() + 1
        self._waking_left = sum(self._may_show(p[0]) for p in pending)
        room = -len(pending) % MAX_COMMANDS_PER_ENTRY  # what the last entry has left
        return self._claim_standing(room)

    def _may_show(self, command: Any) -> int:
        """``_may_show``, but an Expire shows nothing unless a lease ends or
        a delay passes by its time: housekeeping's Expire (every second while
        the partition holds records) took every standing request along, each
        leasing nothing, and a consumer's lingering lease (lingering.py) was
        used up before the Append it waited for. Entries still in flight are
        not looked at: a poll the Expire's apply wakes still leases itself."""
        if type(command) is commands.Expire:
            try:
                due = self.next_due_ms()
            except errors.QueueError:  # stopped or failed: its proposal fails anyway
                return _SHOW_UNKNOWN
            return 0 if due is None or due > command.now_ms else _SHOW_UNKNOWN
        return _may_show(command)

    def _claim_standing(self, max_requests: int) -> list[Pending]:
        """Standing leases for at most ``_waking_left`` records (what the
        waking entry may show and no lease took yet)."""
        if not self.standing or self._waking_left <= 0:
            return []
        claimed = self.standing.claim(_wall_ms, max_requests, self._waking_left)
        if claimed:
            _stage("x.ride")
        self._waking_left -= sum(lease.max_records for lease, _, _ in claimed)
        # A request's deadline says until when it may be CLAIMED (a lingering
        # one's is the 50 ms linger window); once proposed, its lease waits
        # for the commit as any command does. Failing it at the claim
        # deadline (OutcomeUnknown) left the lease to apply with no one to
        # deliver or undo it: its records stayed in flight for the whole
        # visibility timeout (W4's 30 s outliers under a slow disk).
        commit_by = time.monotonic() + CLAIMED_COMMIT_S
        return [(lease, fut, commit_by, "") for lease, fut, _ in claimed]

    def _stood(self) -> None:
        """A long poll stood (any thread). If an entry that may make records
        visible is in flight (proposed, not applied), tick: ``before_tick``
        proposes the standing lease at once, in the next entry, so it applies
        right after that one and finds its records. Otherwise it would wait
        for that entry to apply and then lease in a Raft round of its own."""
        if self._waking_upto > self.raftLastApplied:
            self._host.mark_active(self.key)

    def before_tick(self) -> None:
        super().before_tick()
        if self.standing and self._waking_upto > self.raftLastApplied and self._isLeader():
            claimed = self._claim_standing(MAX_COMMANDS_PER_ENTRY)
            if claimed:
                self._propose(claimed)

    def split_results(self, result: Any, count: int) -> list[Any]:
        if isinstance(result, BaseException) or result is None:
            return [result] * count
        return [result] if count == 1 else list(result)

    def apply_bytes(self, index: int, data: bytes) -> Any:
        ahead, self._ahead = self._ahead, None
        stored = index <= self._last_applied()  # journal replay after a restart
        if ahead is not None and (stored or ahead.index != index or ahead.data != data):
            ahead.held.abort()  # another entry took its index (a new leader's)
            ahead = None
        if stored:
            return None

        def run(txn: Any) -> Any:
            # apply_encoded stores Append records as received (no re-encode):
            # the replica hot path, about 2x cheaper than decode + apply.
            result = self.machine.apply_encoded(txn, data)
            self.store.set_last_applied(txn, index)
            return result

        if ahead is not None:  # applied while it was being replicated: commit that
            ahead.held.commit()
            result = ahead.result
            self.applied_ahead += 1
        else:
            result = self.store.run_write(run, size_hint=len(data))
        self._stored_index = index
        self.applied_entries += 1
        hook = self.on_wake
        if hook is not None and _may_wake(data):
            try:
                hook()
            except Exception:  # a wake-up is an optimisation: never fail the apply
                log.exception("wake hook failed in %s", self.key)
        return result

    def after_append(self) -> None:
        """Leader, driver thread, once its new entries went out and its own
        sync began or ended (ticks.py): apply the newest entry now, in an
        LMDB write transaction held open until that entry commits, if every
        entry before it is applied. The leader would otherwise sit idle
        waiting for a follower's durable copy and only then apply; now the
        commit's apply is an LMDB commit, and the Send's answer goes out
        that much sooner (docs/internals.md, "Apply ahead of commit").

        Nothing is visible before the commit (readers see committed LMDB
        state only), and what is committed is what ``apply_bytes`` would
        write: the same bytes applied at the same index to the same state
        (all earlier entries applied, no other write since: the held
        transaction is this store's only writer, and ``_drop_ahead`` ends it
        before anything else writes). If the index commits with other bytes
        (a new leader's entry), the transaction is aborted and the entry
        applied as usual; so is one whose apply raised (it raises again
        there, and is handled there)."""
        if not APPLY_AHEAD or self._ahead is not None or self.failed or self._closed:
            return
        journal = self._SyncObj__raftLog
        if not len(journal):
            return
        command, index, _term = journal[-1]
        if index != self.raftLastApplied + 1 or entries.kind(command) != entries.REGULAR:
            return
        if index <= self._last_applied():
            return
        data = entries.regular_payload(command)
        try:
            held = self.store.hold_write(size_hint=len(data))
        except Exception:  # full map (now grown), full disk: the apply meets it
            return
        try:
            result = self.machine.apply_encoded(held.txn, data)
            self.store.set_last_applied(held.txn, index)
        except Exception:
            held.abort()
            return
        self._ahead = _Ahead(index, data, held, result)

    def _drop_ahead(self) -> None:
        """End an apply ahead before anything else writes the store (driver)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.held.abort()

    def _last_applied(self) -> int:
        """LMDB's last_applied: read once (a read transaction), then the index
        of our own last apply (driver thread; a snapshot restore resets it)."""
        if self._stored_index is None:
            self._stored_index = self.store.last_applied()
        return self._stored_index

    def predict(self, data: bytes) -> Any:
        """Apply ``data`` in a write transaction that is then aborted: the
        result without the effects (driver thread, for early acks)."""
        self._drop_ahead()
        try:
            with self.store.begin(write=True) as txn:
                raise _Predicted(self.machine.apply_encoded(txn, data))
        except _Predicted as done:
            return done.result
        except Exception:
            return None

    def _check_format(self) -> None:
        """Refuse (Internal, naming the path) a store written in another data
        format, rather than misread it: see docs/internals.md, "Data format"."""
        try:
            with self.store.begin() as txn:
                self.machine.check_format(txn)
        except errors.Internal as exc:
            self.store.close()
            raise errors.Internal(f"{self.store.path}: {exc.message}") from exc

    # ---- durability -------------------------------------------------------------------
    def set_durability(self, mode: str) -> None:
        """``fsync``: the journal is synced before an entry counts (leader and
        followers); ``quorum``/``leader``: it is not. ``leader`` also acks
        Appends early (``submit_append``). Any thread; takes effect next tick."""
        self.durability = mode
        self._SyncObj__raftLog._enabled = mode == "fsync" and bool(self._journal_path)

    def submit_append(self, command: Any, timeout_s: float = 10.0) -> Future[Any]:
        """Submit an Append; the future holds ``(result, level reached)``:
        ``leader`` if acked before replication, else the replica's mode
        (``quorum`` for a leader-mode replica that could not ack early)."""
        return self.submit(command, timeout_s, level=self.durability)

    def submit_append_awaitable(self, command: Any, timeout_s: float = 10.0) -> asyncio.Future[Any]:
        """``submit_append`` from an asyncio loop's thread: the loop's future."""
        return self.submit_awaitable(command, timeout_s, level=self.durability)

    # ---- reads (any thread) ------------------------------------------------------------
    @contextmanager
    def _reading(self) -> Iterator[Any]:
        """A read txn; Unavailable (retryable) once the replica was stopped,
        which another thread may do at any time (the reconciler)."""
        if getattr(self, "failed", ""):  # fail-stop: no reads from a replica that stopped
            raise errors.Unavailable(f"{self.key}: replica failed: {self.failed}")
        with ExitStack() as stack:
            try:
                txn = stack.enter_context(self.store.begin())
            except errors.Internal:
                if not self.store.closed:
                    raise
                raise errors.Unavailable(f"{self.key}: replica stopped") from None
            yield txn

    def read(self, offset: int, max_records: int) -> Any:
        with self._reading() as txn:
            return self.machine.read(txn, offset, max_records)

    def stats(self, now_ms: int) -> Any:
        with self._reading() as txn:
            return self.machine.stats(txn, now_ms)

    def next_due_ms(self) -> int | None:
        """The earliest time (leader clock, ms) at which a lease ends or a
        delay passes, so a long poll can sleep exactly until then; None if
        nothing is scheduled (or the machine cannot tell)."""
        due = getattr(self.machine, "next_due_ms", None)
        if due is None:
            return None
        with self._reading() as txn:
            result: int | None = due(txn)
            return result

    def segments(self, offset: int, end: int) -> list[Any]:
        """The stored segments holding offsets [offset, end) (sealed reads)."""
        with self._reading() as txn:
            return self.machine.segments(txn, offset, end)

    def history(self, offset: int) -> Any:
        """Delivery history of record ``offset`` (state, receive count, each
        lease's time, consumer and deadline); None if the machine keeps none."""
        history = getattr(self.machine, "history", None)
        if history is None:
            return None
        with self._reading() as txn:
            return history(txn, offset)

    def dedup_entries(self, after: bytes, max_entries: int, max_offsets: int, now_ms: int) -> Any:
        """A page of live dedup entries (a queue move's export, ``dedup.live_entries``)."""
        with self._reading() as txn:
            return self.machine.dedup_entries(txn, after, max_entries, max_offsets, now_ms)

    def offsets(self) -> dict[str, int]:
        with self._reading() as txn:
            return self.machine.offsets(txn)

    def digest(self) -> str:
        with self._reading() as txn:
            return self.machine.digest(txn)

    # ---- snapshots (called by pysyncobj; written off the driver, offdriver.py) ------------
    @contextmanager
    def _pin_image(self) -> Iterator[None]:
        """Off-driver thread, while the driver waits: the image ``_serialize``
        writes is the state as of now (pysyncobj's last applied entry)."""
        with self.store.pinned_image() as write_image:
            self._image = write_image
            try:
                yield
            finally:
                self._image = None

    def _serialize(self, path: str, data: Any) -> None:
        """The off-driver thread (offdriver.py), inside ``_pin_image``."""
        self.store.sync()
        snapshot.write(path, data, self._image or self.store.snapshot_to)

    def _deserialize(self, path: str) -> Any:
        meta, image_len = self.snapshot_meta(path)
        snap_index = meta[0][1]
        if self._loading_at_start and self.store.last_applied() >= snap_index:
            return meta  # restart: our LMDB is already at or past the snapshot
        # A snapshot received from a leader is always restored, even behind
        # what our LMDB applied: what a follower applied beyond a leader's
        # snapshot is not known to be the leader's (pysyncobj committed a
        # follower's stale entries on a snapshot chunk, appends.py), and
        # keeping it made that state permanent: the follower then led and
        # served it (a chaos campaign lost acked sends to it).
        image = path + ".image"
        self._drop_ahead()
        try:
            snapshot.extract_image(path, image_len, image)
            self._stored_index = None
            self.store.restore_from(image)
        finally:
            snapshot.remove_quietly(image)
        self._check_format()  # a snapshot from a replica of another version
        return meta

    def close(self) -> None:
        self._drop_ahead()  # the store's close waits for the held transaction
        super().close()
        self._snapshots.wait_written()  # before the store closes and the files go
        writeout.unregister(self._data_file)
        self.store.close()
