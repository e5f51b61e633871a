"""pysyncobj 0.3.17, made safe: the one module that subclasses its internals.

Each fix names the hazard of shared/PYSYNCOBJ.md it closes; tests in
``tests/unit/test_raft_hazards.py`` fail against plain ``SyncObj`` and pass
against ``SafeSyncObj``.

1. AppendEntries never truncates entries that do not conflict (Raft §5.3):
   ``_SyncObj__onMessageReceived`` handles regular append_entries itself.
2. The log can never be emptied by compaction (``_SyncObj__deleteEntriesTo``
   keeps the last entry).
3. The journal is synced before a follower acknowledges entries and before
   the leader counts its own copy: followers queue their acks and
   ``flush_durable()`` syncs once for the whole batch, then sends them; the
   leader syncs at the start and end of every tick, so entries appended in a
   tick are durable before any ack can be counted for them. Term and vote are
   fsynced (file and directory) before a vote is sent; snapshots are durable
   before the journal is compacted or cleared for them; compaction writes a
   new journal file (see SyncedJournal).
4. Waiters are never lost: ``_SyncObj__loadDumpFile`` resolves every callback
   waiting for an index the snapshot skipped with UNKNOWN_OUTCOME (our caller
   also bounds every wait with a timeout).
5. A leader cut off from its quorum steps down: ``leaderFallbackTimeout`` is
   set to the election timeout by ``make_conf`` and ``has_quorum_contact()``
   lets callers refuse leases on a stale belief.

Also: entries of 64 KiB or more never take pysyncobj's chunked "transmission"
path (it mislabels chunks and skipped fixes 1 and 3):
``_SyncObj__sendAppendEntries`` sends every entry whole, and chunks from a
peer still running plain pysyncobj are reassembled by unpickling, not by
their labels, then handled as a regular AppendEntries.

Threading: everything here runs on the host's driver thread, except
``submit_command`` (any thread; it only enqueues).
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import struct
import time
import zlib
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj import journal as journal_format
from pysyncobj.journal import FileJournal, MetaStorer, ResizableFile
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import TCPNode
from pysyncobj.poller import Poller
from pysyncobj.syncobj import _RAFT_STATE, FAIL_REASON
from pysyncobj.tcp_connection import TcpConnection

from raft_queue import errors
from raft_queue.replication import heartbeats

log = logging.getLogger(__name__)

PYSYNCOBJ_VERSION = "0.3.17"


def check_version() -> None:
    """Refuse to run on another pysyncobj: the fixes below patch its internals."""
    from pysyncobj.version import VERSION

    if VERSION != PYSYNCOBJ_VERSION:
        raise errors.VersionMismatch(
            f"pysyncobj {VERSION} is installed; raft_queue needs exactly {PYSYNCOBJ_VERSION}"
        )


def fail_reason_error(reason: int, leader: str = "") -> errors.QueueError:
    """Map a pysyncobj FAIL_REASON to our error tree (the one place that does)."""
    if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
        return errors.NotLeader("not the leader of this group", leader)
    if reason == FAIL_REASON.QUEUE_FULL:
        return errors.ResourceExhausted("raft command queue is full")
    if reason == FAIL_REASON.LEADER_CHANGED:
        return errors.OutcomeUnknown("leader changed while the command was in flight")
    if reason == FAIL_REASON.DISCARDED:
        return errors.Unavailable("command discarded by a new leader; not applied")
    if reason == FAIL_REASON.REQUEST_DENIED:
        return errors.FailedPrecondition("raft request denied")
    return errors.OutcomeUnknown(f"raft outcome unknown (reason {reason})")


class ProxiedNode(TCPNode):
    """A peer whose identity is its address but whose TCP dial target may differ
    (a fault-injection proxy). ``dial`` maps the address to ``host:port``."""

    def __init__(self, address: str, dial: str | None = None) -> None:
        super().__init__(address)
        host, port = (dial or address).rsplit(":", 1)
        object.__setattr__(self, "_dial_host", host)
        object.__setattr__(self, "_dial_port", int(port))

    @property
    def ip(self) -> str:  # used by TcpTransport to connect
        return self._dial_host  # type: ignore[no-any-return]

    @property
    def port(self) -> int:
        return self._dial_port  # type: ignore[no-any-return]


# ---- wire format (TcpConnection) ------------------------------------------------------
# pysyncobj 0.3.17 frames every message as zlib.compress(pickle protocol 2, level 3).
# For the small messages that are most of the traffic (heartbeats, acks: ~100 B)
# zlib costs far more than the message: deflate allocates and clears ~256 KiB of
# state per call (measured 160-400 us per compress on this 2-core machine, against
# 3-7 us for the pickle), and the 256-replica idle node sends thousands a second.
# Protocol 2 also pickles bytes as latin-1 text (entries grow and cost a text
# codec pass). So: pickle protocol 5 (any Python 3.8+ unpickler reads it), zlib
# (level 1) only from COMPRESS_MIN_BYTES. A frame whose first byte is 0x80 (the
# pickle PROTO opcode; zlib streams start with 0x78) is read as a bare pickle,
# so frames from unpatched peers still decode; unpatched peers cannot read ours
# (upgrade every node of a cluster together). Snapshot chunks are always
# compressed: an LMDB image is mostly free pages, and a 64 KiB chunk must
# cross the link within the sender's connection timeout (the follower answers
# no chunk; over a slow link, uncompressed chunks never arrived).
COMPRESS_MIN_BYTES = 1 << 20
_PICKLE_PROTO = b"\x80"


def _wire_send(conn: TcpConnection, message: Any) -> None:
    compress = type(message) is dict and message.get("serialized") is not None
    if conn.sendRandKey:
        message = (conn.sendRandKey, message)
    data = pickle.dumps(message, protocol=5)
    if compress or len(data) >= COMPRESS_MIN_BYTES:
        data = zlib.compress(data, 1)
    if conn.encryptor:
        data = conn.encryptor.encrypt_at_time(data, int(monotonic_time()))
    conn._TcpConnection__writeBuffer += struct.pack("i", len(data)) + data
    conn._TcpConnection__trySendBuffer()


def _wire_parse(conn: TcpConnection) -> Any:
    """pysyncobj's ``__processParseMessage`` with the frame decoding above."""
    buf = conn._TcpConnection__readBuffer
    if len(buf) < 4:
        return None
    size = struct.unpack("i", buf[:4])[0]
    if len(buf) - 4 < size:
        return None
    data = buf[4 : 4 + size]
    try:
        if conn.encryptor:
            stamp = conn.encryptor.extract_timestamp(data)
            if stamp < conn.recvLastTimestamp:
                raise ValueError("replayed frame")
            conn.recvLastTimestamp = stamp
            data = conn.encryptor.decrypt(data)
        if data[:1] != _PICKLE_PROTO:
            data = zlib.decompress(data)
        message = pickle.loads(data)  # noqa: S301 (hazard 6: set a password)
        if conn.recvRandKey:
            rand_key, message = message
            if rand_key != conn.recvRandKey:
                raise ValueError("wrong session key")
    except Exception:
        conn.disconnect()
        return None
    conn._TcpConnection__readBuffer = buf[4 + size :]
    return message


TcpConnection.send = _wire_send
TcpConnection._TcpConnection__processParseMessage = _wire_parse


class GroupPoller(Poller):
    """A group's view of the host's shared poller: subscriptions go to the shared
    poller; the group's own ``poll`` (end of every tick) does nothing, because the
    host's driver thread polls once for all groups."""

    def __init__(self, shared: Poller) -> None:
        self._shared = shared

    def subscribe(self, descr: int, callback: Callable[..., None], eventMask: int) -> None:  # noqa: N803
        self._shared.subscribe(descr, callback, eventMask)

    def unsubscribe(self, descr: int) -> None:
        self._shared.unsubscribe(descr)

    def poll(self, timeout: float) -> None:
        return None


# Test-only: with RAFTQ_POWERLOSS_COPY=1 every journal sync also leaves
# "<journal>.synced", the journal exactly as synced, before any ack that sync
# allows; tests/chaos/test_durability.py simulates power loss by SIGKILL and
# putting back only that copy. Read once at import: free when unset.
POWERLOSS_COPY = os.environ.get("RAFTQ_POWERLOSS_COPY") == "1"


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` (a rename into it) durable."""
    fd = os.open(path or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableMetaStorer(MetaStorer):
    """Term and vote (pysyncobj's meta dict), durable with ONE fdatasync per
    change and no rename: ``<journal>.vote`` holds two fixed slots, written
    alternately in place (``>QII`` sequence, length, crc32, then the pickled
    dict); the valid slot with the highest sequence wins, so a torn write
    leaves the previous state. pysyncobj's ``<journal>.meta`` (tmp + rename,
    never synced) could come back old after a power loss (a node voting twice
    in a term); a tmp-fsync, rename, directory-fsync fix costs two fsyncs per
    change, four per vote, all on the driver thread, and made election storms
    self-sustaining with hundreds of groups on a busy disk. The old file is
    read once if no slot is valid (upgrade)."""

    SLOT = 4096
    _HEAD = struct.Struct(">QII")

    def __init__(self, journal_path: str) -> None:
        super().__init__(f"{journal_path}.meta")
        path = f"{journal_path}.vote"
        fresh = not os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fresh:
            os.ftruncate(self._fd, 2 * self.SLOT)
            os.fsync(self._fd)
            fsync_dir(os.path.dirname(path))
        self._seq, self._meta = self._read()

    def _read(self) -> tuple[int, dict[str, Any] | None]:
        best: tuple[int, dict[str, Any] | None] = (0, None)
        for slot in (0, 1):
            raw = os.pread(self._fd, self.SLOT, slot * self.SLOT)
            if len(raw) < self._HEAD.size:
                continue
            seq, size, crc = self._HEAD.unpack_from(raw)
            body = raw[self._HEAD.size : self._HEAD.size + size]
            if seq > best[0] and len(body) == size and zlib.crc32(body) == crc:
                best = (seq, pickle.loads(body))  # noqa: S301 (our own file)
        return best

    def getMeta(self) -> dict[str, Any]:  # noqa: N802
        return dict(self._meta) if self._meta is not None else super().getMeta()

    def storeMeta(self, meta: dict[str, Any]) -> None:  # noqa: N802
        body = pickle.dumps(meta, protocol=5)
        if self._HEAD.size + len(body) > self.SLOT:
            raise ValueError(f"raft meta of {len(body)} bytes does not fit a slot")
        self._seq += 1
        head = self._HEAD.pack(self._seq, len(body), zlib.crc32(body))
        os.pwrite(self._fd, head + body, (self._seq % 2) * self.SLOT)
        os.fdatasync(self._fd)
        self._meta = dict(meta)

    def close(self) -> None:
        os.close(self._fd)


class SyncedJournal:
    """Wraps pysyncobj's journal: remembers whether anything was written since
    the last ``sync()`` so one sync covers a whole batch of entries; stores
    term/vote durably; compacts by writing a new file.

    Syncs use ``os.fdatasync`` on our own descriptor of the journal file, not
    ``mmap.flush()``: CPython 3.11 holds the GIL through msync (measured: a
    spinning thread ran 0.14 M iterations/s during a 256 MiB msync, 2.4 M/s
    during fdatasync), stalling gRPC and every other group. On Linux this
    syncs the same data: msync(MS_SYNC) of a shared file mapping is
    ``vfs_fsync_range`` on the file (mm/msync.c), and pages written through a
    MAP_SHARED mapping are the file's page-cache pages, marked dirty on the
    write fault, which fsync/fdatasync of any descriptor of the inode writes
    back (measured: /proc/meminfo Dirty fell by the 256 MiB written through
    the mapping after fdatasync of a separate O_RDONLY descriptor). fdatasync
    also persists the file size the mapping grew to (ftruncate)."""

    def __init__(self, inner: Any, path: str | None, enabled: bool) -> None:
        self._inner = inner
        self._path = path
        self._enabled = enabled and path is not None
        self._fd: int | None = None
        if path is not None and isinstance(inner, FileJournal):
            storer = DurableMetaStorer(path)
            inner._FileJournal__metaStorer = storer
            inner._FileJournal__meta = storer.getMeta()
            self._fd = os.open(path, os.O_RDONLY)
        self.dirty = False
        self.syncs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __getitem__(self, idx: Any) -> Any:
        return self._inner[idx]

    def __len__(self) -> int:
        return len(self._inner)

    def add(self, command: bytes, idx: int, term: int) -> None:
        self._inner.add(command, idx, term)
        self.dirty = True

    def clear(self) -> None:
        self._inner.clear()
        self.dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802,N803
        self._inner.deleteEntriesFrom(entryFrom)
        self.dirty = True

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802,N803
        """Drop the first ``entryTo`` entries. pysyncobj rewrites the journal in
        place (clear, then re-add every kept entry through the mapping): a kill
        in the middle leaves a prefix of the kept entries, and after a power
        loss any mix of old and new pages. Instead write the kept entries to a
        new file, sync it, rename it over the journal and sync the directory:
        a crash leaves the old journal or the new one."""
        if self._fd is None:
            self._inner.deleteEntriesTo(entryTo)
            self.dirty = True
            return
        assert self._path is not None
        inner = self._inner
        keep = inner._FileJournal__journal[entryTo:]
        tmp = f"{self._path}.compact"
        end = _write_journal(tmp, keep, self._enabled)
        old = inner._FileJournal__journalFile
        old._ResizableFile__mm.close()  # not _destroy(): that msyncs the old file
        old._ResizableFile__f.close()
        os.replace(tmp, self._path)
        if self._enabled:
            fsync_dir(os.path.dirname(self._path))
        inner._FileJournal__journalFile = ResizableFile(self._path)
        inner._FileJournal__journal = keep
        inner._FileJournal__currentOffset = end
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_RDONLY)
        self.dirty = True  # a sync (and POWERLOSS_COPY) sees the new file

    def onOneSecondTimer(self) -> None:  # noqa: N802
        """pysyncobj rewrites the meta file every second to store the commit
        index. Raft keeps commitIndex volatile (Figure 2): a stale one after a
        restart only delays applying until the leader's next AppendEntries, and
        LMDB's last_applied skips what was applied. Not storing it spares a
        write and an fdatasync per second per busy group; the meta is stored
        only when term or vote change."""

    def sync(self) -> bool:
        """fdatasync the journal if written since the last sync; True if it did."""
        if not self.dirty:
            return False
        self.dirty = False
        if self._enabled and self._fd is not None:
            os.fdatasync(self._fd)  # releases the GIL (mmap.flush does not)
            self.syncs += 1
            if POWERLOSS_COPY and self._path:
                tmp = f"{self._path}.synced.tmp"
                shutil.copyfile(self._path, tmp)
                os.replace(tmp, f"{self._path}.synced")  # atomic: a kill leaves old or new
        return True

    def _destroy(self) -> None:
        self._inner._destroy()
        storer = getattr(self._inner, "_FileJournal__metaStorer", None)
        if isinstance(storer, DurableMetaStorer):
            storer.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_journal(path: str, entries: list[Any], durable: bool) -> int:
    """Write ``entries`` to a new journal file in pysyncobj 0.3.17's format
    (journal.py: header, then per record ``<I`` size, ``<QQ`` index and term,
    command, ``<I`` size); returns the offset after the last record."""
    offset = int(journal_format.FIRST_RECORD_OFFSET)
    with open(path, "wb") as f:
        f.write(b"\0" * offset)
        for command, idx, term in entries:
            data = struct.pack("<QQ", idx, term) + bytes(command)
            size = struct.pack("<I", len(data))
            f.write(size + data + size)
            offset += len(data) + 8
        header = FileJournal._FileJournal__getDefaultHeader(None)  # constants only
        f.seek(0)
        f.write(header[: journal_format.LAST_RECORD_OFFSET_OFFSET] + struct.pack("<I", offset))
        f.flush()
        if durable:
            os.fsync(f.fileno())
    return offset


# An idle group is ticked at least this often (see SafeSyncObj.next_deadline):
# log compaction by time (minutes) and reconnects need no more. Heartbeats,
# elections, connection retries, messages and commands have their own
# deadlines or wake the group at once.
MAX_IDLE_S = 5.0

# Bytes of entries per AppendEntries message (pysyncobj's default is 64 KiB;
# an entry at least this long took its broken chunked path).
APPEND_ENTRIES_BATCH_BYTES = 1 << 20
SEND_BUFFER_BYTES = 1 << 20
# A partially received chunked entry (from a peer that still chunks) larger
# than this is dropped; the leader then resends from the follower's log end.
MAX_TRANSMISSION_BYTES = 1 << 30


def make_conf(
    *,
    journal_file: str | None,
    dump_file: str | None,
    election_timeout_min_s: float,
    election_timeout_max_s: float,
    serializer: Callable[[str, Any], None] | None = None,
    deserializer: Callable[[str], Any] | None = None,
    log_compaction_min_entries: int = 20000,
    log_compaction_min_time_s: float = 300.0,
    password: str | None = None,
    bind_address: str | None = None,
    heartbeat_s: float | None = None,
) -> SyncObjConf:
    """The SyncObjConf every group uses: manual ticks (the host drives them),
    no pysyncobj-level batching (we batch messages into entries ourselves and
    want each entry sent at once), and a leader that steps down after one
    election timeout without quorum contact (hazard 5)."""
    return SyncObjConf(
        autoTick=False,
        appendEntriesUseBatch=False,
        raftMinTimeout=election_timeout_min_s,
        raftMaxTimeout=election_timeout_max_s,
        leaderFallbackTimeout=election_timeout_max_s,
        # Heartbeats: every group costs a message (and an ack) per period per
        # follower, the bulk of an idle node's CPU; a quarter of the minimum
        # election timeout, as etcd's 100 ms / 1 s.
        appendEntriesPeriod=heartbeat_s or election_timeout_min_s / 4,
        connectionRetryTime=0.5,
        connectionTimeout=election_timeout_max_s,
        journalFile=journal_file,
        fullDumpFile=dump_file,
        serializer=serializer,
        deserializer=deserializer,
        logCompactionMinEntries=log_compaction_min_entries,
        logCompactionMinTime=log_compaction_min_time_s,
        dynamicMembershipChange=True,
        commandsWaitLeader=False,
        password=password,
        bindAddress=bind_address,
        pollerType="poll",
        # Entries are never chunked ("transmission", see SafeSyncObj): one
        # AppendEntries carries whole entries, up to this many bytes of them
        # plus the one that crosses it.
        appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_BYTES,
        # SO_SNDBUF (the kernel doubles it, capped by net.core.wmem_max): a
        # multi-MiB entry leaves the send buffer in a few writes instead of
        # hundreds (pysyncobj copies the rest of its buffer after each write).
        sendBufferSize=SEND_BUFFER_BYTES,
    )


class SafeSyncObj(SyncObj):
    """SyncObj with hazards 1-5 fixed. Subclasses add ``@replicated`` methods.

    ``shared_poller``: the host's poller (see GroupPoller). ``fsync``: sync the
    journal before acknowledging (durability "fsync"); False for "quorum".
    """

    def __init__(
        self,
        self_address: str,
        peers: list[str],
        conf: SyncObjConf,
        shared_poller: Poller,
        fsync: bool = True,
        on_activity: Callable[[], None] | None = None,
        on_flush: Callable[[], None] | None = None,
        node_factory: Callable[[str], TCPNode] = ProxiedNode,
    ) -> None:
        self.__shared_poller = GroupPoller(shared_poller)
        self._pending_acks: list[tuple[Any, int]] = []
        self._transmissions: dict[Any, bytearray] = {}  # node -> chunks so far
        self._on_activity = on_activity or (lambda: None)
        self._on_flush = on_flush or self._on_activity
        self._fsync = fsync
        self._journal_path = conf.journalFile
        self._loading_at_start = False
        self._last_tick = time.monotonic()  # host clock; see next_deadline
        # The host's coalesced heartbeats (heartbeats.Heartbeats), if enabled.
        self.heartbeat_mux: Any = None
        super().__init__(self_address, peers, conf, nodeClass=node_factory)
        journal = SyncedJournal(self._SyncObj__raftLog, conf.journalFile, fsync)
        self._SyncObj__raftLog = journal
        # pysyncobj read term, vote and commit index from its own meta file in
        # __init__; the durable ones live in DurableMetaStorer's file.
        self._SyncObj__raftCurrentTerm = max(
            journal.getCurrentTerm(), self._SyncObj__getCurrentLogTerm()
        )
        self._SyncObj__votedForNodeId = journal.getVotedForNodeId()
        self._SyncObj__raftCommitIndex = journal.getRaftCommitIndex()
        serializer = self._SyncObj__serializer
        user_deserializer = serializer._Serializer__deserializer
        if user_deserializer is not None:

            def deserialize(path: str) -> Any:
                data = user_deserializer(path)
                if self._loading_at_start:
                    self._align_journal(prev=data[1], last=data[0])
                return data

            serializer._Serializer__deserializer = deserialize

    # The poller pysyncobj creates in __init__ is replaced by our shared view.
    @property
    def _poller(self) -> GroupPoller:
        return self.__shared_poller

    @_poller.setter
    def _poller(self, value: Any) -> None:
        pass

    # ---- durability (hazard 3) -------------------------------------------------
    def flush_durable(self) -> None:
        """Sync the journal if needed, then send the acks that waited for it."""
        self._SyncObj__raftLog.sync()
        if self._pending_acks:
            acks, self._pending_acks = self._pending_acks, []
            for node, next_idx in acks:
                self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=next_idx, success=True)

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N803
        self.flush_durable()  # own entries durable before the commit count
        super()._onTick(0.0)
        self.flush_durable()  # entries appended this tick durable before any ack

    def _SyncObj__onBecomeLeader(self) -> None:  # noqa: N802
        # The new leader appends a no-op and (single-node group) may count it
        # committed in the same tick: make it durable first.
        SyncObj._SyncObj__onBecomeLeader(self)
        self._SyncObj__raftLog.sync()

    def tick(self) -> None:
        """One tick (driver thread). Errors are logged, never propagated: one bad
        group must not stop the driver of every other group."""
        self._last_tick = time.monotonic()
        try:
            self._onTick(0.0)
        except Exception:
            log.exception("tick failed for %s", self.selfNode)

    def next_deadline(self, now: float) -> float:
        """When this group next needs a tick if no message or command arrives
        (driver thread; also asked when a timer pops, to skip ticks a
        heartbeat made unnecessary): a leader at its next heartbeat (which
        also re-checks quorum contact, hazard 5) unless it is quiet and the
        host's coalesced heartbeats cover it (heartbeats.py), a follower or
        candidate at its election deadline, a group missing peers a
        connection retry after its last tick, and every group at least every
        ``MAX_IDLE_S`` (log compaction by time). ``now`` if work is left over.
        ``now`` and the result are on the caller's clock (time.monotonic);
        pysyncobj's own clock can be offset from it (0.1 s measured), so its
        deadlines are converted through their distance from pysyncobj's now."""
        if (
            self._pending_acks
            or self._SyncObj__raftCommitIndex > self._SyncObj__raftLastApplied
            or self._SyncObj__commandsQueue._FastQueue__queue
        ):
            return now
        conf = self._SyncObj__conf
        due = self._last_tick + MAX_IDLE_S
        others = self._SyncObj__otherNodes
        connected = self._SyncObj__connectedNodes
        if not self._SyncObj__transport.ready or len(connected) < len(others):
            due = min(due, self._last_tick + conf.connectionRetryTime)
        to_host = now - float(monotonic_time())
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            mux = self.heartbeat_mux
            if mux is not None and mux.quiet_peers(self) is not None:
                return due
            return min(due, float(self._SyncObj__newAppendEntriesTime) + to_host)
        if self._SyncObj__selfNode is not None and (connected or not others):
            # Past only if no election could start (no peer): retry timer then.
            election = float(self._SyncObj__raftElectionDeadline) + to_host
            due = min(due, max(election, now + 0.001))
        return due

    def _SyncObj__onNodeDisconnected(self, node: Any) -> None:  # noqa: N802
        # Tick now: a group may sleep MAX_IDLE_S, and reconnecting is its job.
        SyncObj._SyncObj__onNodeDisconnected(self, node)
        self._on_activity()

    # ---- command submission (any thread) ------------------------------------------
    def _applyCommand(self, command: Any, callback: Any, commandType: Any = None) -> None:  # noqa: N803
        super()._applyCommand(command, callback, commandType)
        self._on_activity()

    # ---- leadership (hazard 5) ------------------------------------------------------
    def has_quorum_contact(self, within_s: float) -> bool:
        """Leader heard from a majority (itself included) within ``within_s``."""
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            return False
        others = self._SyncObj__otherNodes
        if not others:
            return True
        deadline = monotonic_time() - within_s
        last = self._SyncObj__lastResponseTime
        heard = 1 + sum(1 for n in others if last.get(n, 0) > deadline)
        return heard > (len(others) + 1) / 2

    def leader_address(self) -> str:
        leader = self._getLeader()
        return leader.address if leader is not None else ""

    # ---- hazard 2 -------------------------------------------------------------------
    def _SyncObj__deleteEntriesTo(self, toIDx: int) -> None:  # noqa: N802,N803
        """Compaction after a snapshot (pysyncobj renamed ``<dump>.tmp`` to the
        dump). The rename is made durable first: otherwise a power loss could
        keep the compacted journal beside the previous snapshot, a gap."""
        log_ = self._SyncObj__raftLog
        toIDx = min(toIDx, log_[-1][1])  # always keep the last entry
        diff = toIDx - log_[0][1]
        if diff > 0:
            dump = self._SyncObj__conf.fullDumpFile
            if dump and self._journal_path:
                fsync_dir(os.path.dirname(dump))
            log_.deleteEntriesTo(diff)

    def _align_journal(self, prev: Any, last: Any) -> None:
        """At start, before pysyncobj loads the snapshot ``(prev, last)``: if
        the journal holds those two entries but does not start with them (a
        crash between the snapshot's rename and the compaction), compact it to
        them. pysyncobj would otherwise discard the whole journal, entries
        after the snapshot included, acknowledged ones too."""
        log_ = self._SyncObj__raftLog
        if len(log_) < 2 or (log_[0] == prev and log_[1] == last):
            return
        pos = prev[1] - log_[0][1]
        if 0 < pos < len(log_) - 1 and log_[pos] == prev and log_[pos + 1] == last:
            log_.deleteEntriesTo(pos)
            log_.sync()

    # ---- hazard 4 (and durable snapshot installs) -------------------------------------
    def _SyncObj__loadDumpFile(self, clearJournal: bool) -> None:  # noqa: N802,N803
        dump = self._SyncObj__conf.fullDumpFile
        if clearJournal and dump and self._journal_path and os.path.exists(dump):
            # A snapshot received from the leader: pysyncobj wrote and renamed
            # it without fsync; it must be on disk before the journal is cleared.
            fd = os.open(dump, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(os.path.dirname(dump))
        self._loading_at_start = not clearJournal
        try:
            SyncObj._SyncObj__loadDumpFile(self, clearJournal)
        finally:
            self._loading_at_start = False
        applied = self._SyncObj__raftLastApplied
        waiting = self._SyncObj__commandsWaitingCommit
        for idx in [i for i in waiting if i <= applied]:
            for _term, callback in waiting.pop(idx):
                callback(None, FAIL_REASON.UNKNOWN_OUTCOME)

    # ---- large entries (no "transmission") -----------------------------------------
    def _SyncObj__sendAppendEntries(self) -> None:  # noqa: N802
        """pysyncobj's sender (syncobj.py ~1251) without its "transmission" path.

        pysyncobj pickles an entry of ``appendEntriesBatchSizeBytes`` or more and
        sends it in chunks, labelling a chunk ``finish`` by comparing with the
        command's length instead of the pickle's, so a command a few bytes
        under a multiple of the chunk size arrives as start, finish, finish and
        the follower fails to unpickle it (on every resend). The chunks also
        bypassed hazards 1 and 3 on the follower. Here an entry always travels
        whole inside a regular AppendEntries (TCP frames it; entries are
        bounded by ``group.MAX_ENTRY_BYTES`` unless one command is larger).
        Snapshot installs are unchanged."""
        conf = self._SyncObj__conf
        start = monotonic_time()
        self._SyncObj__newAppendEntriesTime = start + conf.appendEntriesPeriod
        raft_log = self._SyncObj__raftLog
        connected = self._SyncObj__connectedNodes
        next_index = self._SyncObj__raftNextIndex
        for node in self._SyncObj__otherNodes | self._SyncObj__readonlyNodes:
            if node not in connected:
                self._SyncObj__serializer.cancelTransmisstion(node)
                continue
            first, sending_snapshot = True, False
            nxt = next_index[node]
            while first or sending_snapshot or nxt <= self._SyncObj__getCurrentLogIndex():
                if nxt > raft_log[0][1]:
                    self._send_entries(node, nxt)
                else:
                    sending_snapshot = self._send_snapshot_chunk(node)
                if node not in connected:
                    break
                nxt, first = next_index[node], False
                if monotonic_time() - start > conf.appendEntriesPeriod:
                    break

    def _send_entries(self, node: Any, nxt: int) -> None:
        prev_idx, prev_term = self._SyncObj__getPrevLogIndexTerm(nxt)
        entries: list[Any] = []
        if nxt <= self._SyncObj__getCurrentLogIndex():
            batch = self._SyncObj__conf.appendEntriesBatchSizeBytes
            entries = self._SyncObj__getEntries(nxt, None, batch)
            self._SyncObj__raftNextIndex[node] = entries[-1][1] + 1
        self._SyncObj__transport.send(
            node,
            {
                "type": "append_entries",
                "term": self._SyncObj__raftCurrentTerm,
                "commit_index": self._SyncObj__raftCommitIndex,
                "entries": entries,
                "prevLogIdx": prev_idx,
                "prevLogTerm": prev_term,
            },
        )

    def _send_snapshot_chunk(self, node: Any) -> bool:
        """One chunk of the snapshot file; True while more chunks follow."""
        data = self._SyncObj__serializer.getTransmissionData(node)
        self._SyncObj__transport.send(
            node,
            {
                "type": "append_entries",
                "term": self._SyncObj__raftCurrentTerm,
                "commit_index": self._SyncObj__raftCommitIndex,
                "serialized": data,
            },
        )
        if not data:
            return False
        if data[2]:  # last chunk
            self._SyncObj__raftNextIndex[node] = self._SyncObj__raftLog[1][1] + 1
            return False
        return True

    def _reassemble(self, node: Any, message: dict[str, Any]) -> dict[str, Any] | None:
        """A chunked entry from a peer running plain pysyncobj: the message with
        the whole entry once complete, else None. Completeness is decided by
        unpickling, never by the sender's label (it mislabels chunks): a
        ``finish`` that does not unpickle is treated as a middle chunk."""
        kind, data = message["transmission"], message.get("data") or b""
        buf = self._transmissions.get(node)
        if kind == "start" or buf is None:
            if kind != "start":
                return None  # joined mid-entry; the leader resends after our nack
            buf = self._transmissions[node] = bytearray()
        buf += data
        if len(buf) > MAX_TRANSMISSION_BYTES:
            del self._transmissions[node]
            return None
        if kind != "finish":
            return None
        try:
            entry = pickle.loads(bytes(buf))  # noqa: S301 (hazard 6)
        except Exception:  # truncated: a mislabelled middle chunk
            return None
        del self._transmissions[node]
        whole = {k: v for k, v in message.items() if k not in ("transmission", "data")}
        whole["entries"] = [tuple(entry)]
        return whole

    # ---- hazard 1 (and 3 for followers) --------------------------------------------
    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:  # noqa: N802
        kind = message.get("type")
        if kind in heartbeats.KINDS:  # for the host, on this group's connection
            if self.heartbeat_mux is not None:
                self.heartbeat_mux.receive(self, node, message)
            return
        if (
            kind == "append_entries"
            and "transmission" in message
            and message["term"] >= self._SyncObj__raftCurrentTerm
        ):
            whole = self._reassemble(node, message)
            if whole is None:
                self._follow(node, message)
                self._SyncObj__sendNextNodeIdx(node, success=False, reset=False)
                return
            message = whole
        if (
            kind == "append_entries"
            and "prevLogIdx" in message
            and "transmission" not in message
            and message["term"] >= self._SyncObj__raftCurrentTerm
        ):
            before = self._progress()
            self._on_append_entries(node, message)
            self._wake(before)
            return
        if kind == "next_node_idx" and self._SyncObj__raftState == _RAFT_STATE.LEADER:
            before = self._SyncObj__raftMatchIndex.get(node)
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            if self._SyncObj__raftMatchIndex.get(node) != before or not message["success"]:
                self._on_activity()  # the commit index may move: tick now
            return
        self._on_activity()
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _progress(self) -> tuple[Any, ...]:
        return (
            self._SyncObj__raftLog[-1][1],
            self._SyncObj__raftCommitIndex,
            self._SyncObj__raftLeader,
            self._SyncObj__raftCurrentTerm,
        )

    def _wake(self, before: tuple[Any, ...]) -> None:
        """After an AppendEntries: tick if the log, commit index, leader or term
        moved or entries wait to be applied; a bare heartbeat only needs its
        ack flushed. This keeps idle groups cheap (one tick per idle period)."""
        if self._progress() != before or (
            self._SyncObj__raftCommitIndex > self._SyncObj__raftLastApplied
        ):
            self._on_activity()
        else:
            self._on_flush()

    def _follow(self, node: Any, message: dict[str, Any]) -> None:
        """The leader-recognition preamble of pysyncobj's handler, unchanged."""
        if message["term"] > self._SyncObj__raftCurrentTerm:
            self._SyncObj__transferInProgress = False
        if not self._SyncObj__transferInProgress:
            self._SyncObj__raftElectionDeadline = (
                monotonic_time() + self._SyncObj__generateRaftTimeout()
            )
        if self._SyncObj__raftLeader != node:
            self._SyncObj__onLeaderChanged()
        self._SyncObj__raftLeader = node
        if message["term"] > self._SyncObj__raftCurrentTerm:
            self._SyncObj__setCurrentTerm(message["term"], None)
        self._SyncObj__setState(_RAFT_STATE.FOLLOWER)

    def _on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        self._follow(node, message)
        leader_commit = message["commit_index"]
        self._SyncObj__leaderCommitIndex = leader_commit
        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        prev = self._SyncObj__getEntries(prev_idx, 1)
        if not prev:
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return
        if prev[0][2] != prev_term:
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_idx, success=False, reset=True)
            return
        entries = message.get("entries", [])
        self._merge_entries(entries)
        # Raft: acknowledge what this message proved, not our whole log.
        match = entries[-1][1] if entries else prev_idx
        self._pending_acks.append((node, match + 1))
        # Only entries proven to match the leader's log may be committed.
        commit = min(leader_commit, match, self._SyncObj__getCurrentLogIndex())
        if commit > self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = commit
            self._SyncObj__raftLog.setRaftCommitIndex(commit)

    def _merge_entries(self, entries: list[tuple[bytes, int, int]]) -> None:
        """Append ``entries`` after the matching prefix; truncate only from the
        first entry whose term conflicts (Raft §5.3, receiver rule 3)."""
        last = self._SyncObj__getCurrentLogIndex()
        for k, entry in enumerate(entries):
            idx = entry[1]
            if idx > last:
                self._append_new(entries[k:])
                return
            local = self._SyncObj__getEntries(idx, 1)
            if local and local[0][2] == entry[2]:
                continue
            self._truncate_from(idx)
            self._append_new(entries[k:])
            return

    def _truncate_from(self, idx: int) -> None:
        if self._SyncObj__conf.dynamicMembershipChange:
            for entry in reversed(self._SyncObj__getEntries(idx)):
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change, reverse=True)
        if idx <= self._SyncObj__raftLastApplied:
            log.critical(
                "conflicting entry at %d below last applied %d", idx, self._SyncObj__raftLastApplied
            )
        self._SyncObj__deleteEntriesFrom(idx)

    def _append_new(self, entries: list[tuple[bytes, int, int]]) -> None:
        for entry in entries:
            self._SyncObj__raftLog.add(*entry)
        if self._SyncObj__conf.dynamicMembershipChange:
            for entry in entries:
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change)
