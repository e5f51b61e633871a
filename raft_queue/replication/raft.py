"""pysyncobj 0.3.17, made safe: the one module that subclasses its internals.

Each fix names the hazard of shared/PYSYNCOBJ.md it closes; tests in
``tests/unit/test_raft_hazards.py`` fail against plain ``SyncObj`` and pass
against ``SafeSyncObj``.

1. AppendEntries never truncates entries that do not conflict (Raft §5.3):
   ``_SyncObj__onMessageReceived`` handles regular append_entries itself.
2. The log can never be emptied by compaction (``_SyncObj__deleteEntriesTo``
   keeps the last entry).
3. The journal is synced before a follower acknowledges entries and before
   the leader counts its own copy: followers queue their acks, and each
   waits for a sync that covers what it claims (``flush_durable`` begins
   one sync for everything written so far; entries written while it runs
   wait for the next); the leader counts its copy only up to the journal's
   synced index (ticks.py), so a commit needs any majority of synced
   copies. With the host's I/O threads (syncs.py) the fdatasync runs off the
   driver thread; without them (``syncer`` None) inline, as before. Term and
   vote are fsynced (file and directory) before a vote is sent; snapshots
   are durable before the journal is compacted or cleared for them;
   compaction writes a new journal file (see journal.py).
4. Waiters are never lost: ``_SyncObj__loadDumpFile`` resolves every callback
   waiting for an index the snapshot skipped with UNKNOWN_OUTCOME (our caller
   also bounds every wait with a timeout).
5. A leader cut off from its quorum steps down: ``leaderFallbackTimeout`` is
   set to the election timeout by ``make_conf`` and ``has_quorum_contact()``
   lets callers refuse leases on a stale belief.

Also: entries of 64 KiB or more never take pysyncobj's chunked "transmission"
path (it mislabels chunks and skipped fixes 1 and 3):
``_SyncObj__sendAppendEntries`` sends every entry whole; a chunked message
has no wire encoding at all.

6. Nothing from the network or the log is unpickled (hazard 6): messages
   travel in an explicit codec over authenticated, encrypted links
   (``wire.py``, ``codec.py``, ``security/link.py``; ``link_key`` None:
   plaintext, ``security.insecure``), the listener binds to the group's own
   address (or ``bind_address``), and entry commands are explicitly encoded
   (``entries.py``): ``propose`` appends state-machine bytes that
   ``apply_regular`` receives; membership and version entries are parsed,
   never unpickled. A journal holding entries of the old (pickle) format
   is refused at open.

7. A snapshot chunk commits nothing of the follower's own log (pysyncobj
   set commit = min(leader's commit, our last index) on every chunk, so a
   follower applied uncommitted entries of an old term), and a received
   snapshot that fails to load is answered with a reset, not acknowledged
   as installed (pysyncobj logged the error and acknowledged "success"
   with the follower's unchanged log, which the leader counted as copies
   of its own entries): ``_on_snapshot_chunk`` in appends.py. A received
   snapshot is always restored, even behind what the follower's LMDB
   applied (partition.py).
8. An ack names its term (``_SyncObj__sendNextNodeIdx``, codec tag 14) and
   a leader ignores one of another term: pysyncobj's ack had none, and one
   delayed across two elections set the match index of a leader whose log
   had changed meanwhile (seen in raft_queue/testing/raftsim.py).

Elections: pre-vote and prompt elections after a leader's link drops
(``prevote.py``; pysyncobj has neither).

Where: the AppendEntries fixes (1, 3 for followers, large entries) are the
mixin in ``appends.py``; the journal's syncs, term/vote file and compaction
file in ``journal.py``; node identity, links and message frames in
``wire.py``.

Threading: everything here runs on the host's driver thread, except
``submit_command`` (any thread; it only enqueues).
"""

from __future__ import annotations

import logging
import os
import queue
import time
from collections.abc import Callable
from typing import Any

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.node import Node, TCPNode
from pysyncobj.poller import Poller
from pysyncobj.syncobj import _RAFT_STATE, FAIL_REASON

from raft_queue import errors
from raft_queue.observability.metrics import NULL_PROBE
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.replication import entries
from raft_queue.replication.appends import AppendEntriesFixes
from raft_queue.replication.journal import SyncedJournal, SyncJob, fsync_dir
from raft_queue.replication.prevote import PreVote
from raft_queue.replication.syncs import (
    LEADER_INLINE,
    LEADER_INLINE_BYTES,
    LEADER_INLINE_SYNC_S,
    SyncThreads,
)
from raft_queue.replication.ticks import TickFixes
from raft_queue.replication.wire import LinkTransport, ProxiedNode

__all__ = [
    "ProxiedNode",
    "SafeSyncObj",
    "bind_address_for",
    "check_version",
    "fail_reason_error",
    "make_conf",
]

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


# An idle group is ticked at least this often (see SafeSyncObj.next_deadline):
# log compaction by time (minutes) and reconnects need no more. Heartbeats,
# elections, connection retries, messages and commands have their own
# deadlines or wake the group at once.
MAX_IDLE_S = 5.0

# Bytes of entries per AppendEntries message (pysyncobj's default is 64 KiB;
# an entry at least this long took its broken chunked path).
APPEND_ENTRIES_BATCH_BYTES = 1 << 20
SEND_BUFFER_BYTES = 1 << 20


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
    bind_address: str | None = None,
    heartbeat_s: float | None = None,
) -> SyncObjConf:
    """The SyncObjConf every group uses: manual ticks (the host drives them),
    no pysyncobj-level batching (we batch messages into entries ourselves and
    want each entry sent at once), and a leader that steps down after one
    election timeout without quorum contact (hazard 5). ``bind_address``
    (``host:port``): where the Raft port listens; None: the group's own
    address (never pysyncobj's 0.0.0.0). Links are secured by the group's
    ``link_key`` (SafeSyncObj), not pysyncobj's ``password``."""
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


class SafeSyncObj(AppendEntriesFixes, PreVote, TickFixes):
    """SyncObj with hazards 1-6 fixed. Subclasses implement ``apply_regular``
    and propose entries with ``propose`` (no ``@replicated`` methods).

    ``shared_poller``: the host's poller (see GroupPoller). ``fsync``: sync the
    journal before acknowledging (durability "fsync"); False for "quorum".
    ``syncer``: the host's I/O threads for journal syncs (set by
    ``RaftHost.add``); None syncs inline on the driver thread.
    ``link_key``: the Raft link key (``derive_key(secret, RAFT_LINK)``);
    None: plaintext links (``security.insecure``).
    """

    syncer: SyncThreads | None = None
    _dump_failed = False  # the last snapshot load raised (see _timed_snapshots)
    # Metrics (observability/metrics.py): a RaftProbe once the node names the group.
    probe: Any = NULL_PROBE

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
        link_key: bytes | None = None,
    ) -> None:
        self.__shared_poller = GroupPoller(shared_poller)
        self.link_key = link_key  # read by LinkTransport in SyncObj.__init__
        if conf.bindAddress is None:
            conf.bindAddress = self_address
        # (leader node, next index to ack, term): each waits for a sync that
        # covers the entries it claims (journal.durable_index >= index - 1).
        self._pending_acks: list[tuple[Any, int, int]] = []
        self._closed = False
        self._on_activity = on_activity or (lambda: None)
        self._on_flush = on_flush or self._on_activity
        self._fsync = fsync
        self._journal_path = conf.journalFile
        self._loading_at_start = False
        self._last_tick = time.monotonic()  # host clock; see next_deadline
        # The host's coalesced heartbeats (heartbeats.Heartbeats), if enabled.
        self.heartbeat_mux: Any = None
        super().__init__(
            self_address, peers, conf, nodeClass=node_factory, transportClass=LinkTransport
        )
        self._check_entry_format()
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
        self._timed_snapshots(serializer)
        self._seen_leader: Any = None
        self._seen_term = 0

    def set_probe(self, probe: Any) -> None:
        """Report to ``probe`` from now on (driver thread)."""
        self.probe = probe
        self._SyncObj__raftLog.probe = probe

    def _timed_snapshots(self, serializer: Any) -> None:
        """Time each snapshot written (serializer) and installed from a
        leader (deserializer, except the load at start) for the probe."""
        write = serializer._Serializer__serializer
        read = serializer._Serializer__deserializer
        if write is not None:

            def timed_write(path: str, data: Any) -> Any:
                start = time.monotonic()
                out = write(path, data)
                self.probe.snapshot("create", time.monotonic() - start)
                return out

            serializer._Serializer__serializer = timed_write
        if read is not None:

            def timed_read(path: str) -> Any:
                start = time.monotonic()
                try:
                    out = read(path)
                except Exception:
                    # pysyncobj logs it and carries on as if loaded; a
                    # received snapshot must then not be acknowledged
                    # (appends.py, _on_snapshot_chunk).
                    self._dump_failed = True
                    raise
                if not self._loading_at_start:
                    self.probe.snapshot("install", time.monotonic() - start)
                return out

            serializer._Serializer__deserializer = timed_read

    # ---- entries (hazard 6) -----------------------------------------------------------
    def _check_entry_format(self) -> None:
        """Refuse a journal (or snapshot) holding entries of another entry
        format (entries.py) rather than misread them at apply."""
        log_ = self._SyncObj__raftLog
        try:
            for i in range(len(log_)):
                entries.kind(log_[i][0])
        except entries.OldEntryFormat as exc:
            self._SyncObj__transport.destroy()
            log_._destroy()
            raise entries.OldEntryFormat(f"{self._journal_path}: {exc.message}") from None

    def propose(self, command: bytes, callback: Any = None) -> None:
        """Append a regular entry carrying ``command`` (state-machine bytes,
        handed to ``apply_regular`` on every replica). Any thread."""
        self._applyCommand(entries.regular(command), callback)

    def apply_regular(self, data: bytes) -> Any:
        """Apply a regular entry's bytes (subclasses); the result goes to
        the proposer's callback."""
        raise NotImplementedError

    def addNodeToCluster(self, node: Any, callback: Any = None) -> None:  # noqa: N802
        self._applyCommand(entries.membership("add", _address(node)), callback)

    def removeNodeFromCluster(self, node: Any, callback: Any = None) -> None:  # noqa: N802
        self._applyCommand(entries.membership("rem", _address(node)), callback)

    def setCodeVersion(self, newVersion: int, callback: Any = None) -> None:  # noqa: N802,N803
        raise errors.FailedPrecondition("raft_queue groups have one code version")

    def _SyncObj__parseChangeClusterRequest(self, command: bytes) -> list[str] | None:  # noqa: N802
        if command[:1] != b"\x02":  # entries.MEMBERSHIP; others are checked at apply
            return None
        try:
            entries.kind(command)
            op, address = entries.parse_membership(command)
        except ValueError:
            log.error("%s: malformed membership entry ignored", self.selfNode)
            return None
        return [op, address]  # pysyncobj makes the node with our node factory

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:  # noqa: N802
        """pysyncobj's apply of one committed entry, with explicit decoding."""
        kind = entries.kind(command)
        if kind == entries.REGULAR:
            return self.apply_regular(entries.regular_payload(command))
        if kind == entries.MEMBERSHIP:
            change = self._SyncObj__parseChangeClusterRequest(command)
            if change is not None:  # after a restart; a no-op otherwise
                self._SyncObj__doChangeCluster(change)
        elif kind == entries.VERSION:
            log.warning(
                "%s: code version entry %d ignored", self.selfNode, entries.parse_version(command)
            )
        return None

    # The poller pysyncobj creates in __init__ is replaced by our shared view.
    @property
    def _poller(self) -> GroupPoller:
        return self.__shared_poller

    @_poller.setter
    def _poller(self, value: Any) -> None:
        pass

    # ---- durability (hazard 3) -------------------------------------------------
    def flush_durable(self, inline: bool = False) -> None:
        """Begin a sync of what was written (or, without a syncer, sync now),
        then send the acks that syncs already cover. A follower's sync may run
        here on the driver (``SyncThreads.run_inline``); a leader's only when
        asked (``inline``: its AppendEntries are out already, ticks.py)."""
        journal = self._SyncObj__raftLog
        if self.syncer is None:
            journal.sync()
        elif journal.inflight is None and journal.dirty:
            job = journal.begin_sync()
            if job is not None:
                _stage("x.sync_begin")
                if (
                    inline or self._SyncObj__raftState == _RAFT_STATE.FOLLOWER
                ) and self.syncer.run_inline(job, self.on_sync_done):
                    return  # on_sync_done sent the acks the sync allows
                self.syncer.submit(job, self.on_sync_done)
        if self._pending_acks:
            self._send_synced_acks()

    def on_sync_done(self, job: SyncJob) -> None:
        """Driver thread, when an I/O thread finished ``job``: send the acks
        it allows, begin the next sync if more was written meanwhile, and
        let a leader tick if its copy makes a majority (commit_may_move)."""
        if self._closed:
            return
        journal = self._SyncObj__raftLog
        _stage("x.sync_done")
        self.probe.synced(job.seconds)
        journal.end_sync(job)
        self.flush_durable()
        if self._SyncObj__raftState == _RAFT_STATE.LEADER and self.commit_may_move():
            self._on_activity()

    def _send_synced_acks(self) -> None:
        """Send, in order, each pending ack whose entries a sync covers; one of
        an earlier term is dropped (its leader is gone; our log may have
        changed since: an ack carries no term)."""
        durable = self._SyncObj__raftLog.durable_index
        term = self._SyncObj__raftCurrentTerm
        keep = []
        for ack in self._pending_acks:
            node, next_idx, ack_term = ack
            if ack_term != term:
                continue
            if next_idx - 1 <= durable:
                _stage("f.ack_tx")
                self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=next_idx, success=True)
            else:
                keep.append(ack)
        self._pending_acks = keep

    def sync_inline_now(self) -> bool:
        """Leader: whether to sync what was appended on the driver, after the
        AppendEntries went out (ticks.py): a small write, a fast disk (the
        last sync), a quiet host (syncs.py)."""
        journal = self._SyncObj__raftLog
        return (
            LEADER_INLINE
            and self.syncer is not None
            and journal.pending_bytes <= LEADER_INLINE_BYTES
            and journal.last_sync_s <= LEADER_INLINE_SYNC_S
            and self.syncer.would_inline()
        )

    def _onTick(self, timeToWait: float = 0.0) -> None:  # noqa: N803
        self.flush_durable()  # acks a completed sync allows; own copy counted up to it
        self._raft_tick()
        self.flush_durable()  # begin the sync of entries appended this tick

    def _SyncObj__sendNextNodeIdx(  # noqa: N802
        self,
        node: Any,
        reset: bool = False,
        nextNodeIdx: int | None = None,  # noqa: N803
        success: bool = False,
    ) -> None:
        """pysyncobj's ack (``next_node_idx``), naming the term of the
        AppendEntries it answers: a pending ack is sent only in the term it
        was made in (``_send_synced_acks``), any other right after the
        handler adopted the message's term. The leader ignores an ack of
        another term (appends.py). Without pre-vote (``raft.pre_vote`` off
        while upgrading from a version that lacks both) the ack has no term,
        as pysyncobj's."""
        if nextNodeIdx is None:
            nextNodeIdx = self._SyncObj__getCurrentLogIndex() + 1
        message = {
            "type": "next_node_idx",
            "next_node_idx": nextNodeIdx,
            "reset": reset,
            "success": success,
        }
        if self.pre_vote:
            message["term"] = self._SyncObj__raftCurrentTerm
        self._SyncObj__transport.send(node, message)

    def install_received_snapshot(self) -> bool:
        """Load the snapshot a leader finished sending (pysyncobj's load,
        journal cleared); False if it could not be loaded (pysyncobj logged
        why and left log and state as they were)."""
        self._dump_failed = False
        self._SyncObj__loadDumpFile(clearJournal=True)
        return not self._dump_failed

    def _SyncObj__onBecomeLeader(self) -> None:  # noqa: N802
        # The new leader appends a no-op; it counts once synced (ticks.py).
        SyncObj._SyncObj__onBecomeLeader(self)
        self.flush_durable()

    def tick(self) -> None:
        """One tick (driver thread). Errors are logged, never propagated: one bad
        group must not stop the driver of every other group."""
        self._last_tick = time.monotonic()
        try:
            self._onTick(0.0)
        except Exception:
            log.exception("tick failed for %s", self.selfNode)
        if self._SyncObj__raftLeader is not self._seen_leader:
            self._seen_leader = self._SyncObj__raftLeader
            if self._seen_leader is not None:
                self.probe.leader_changed()
        if self._SyncObj__raftState == _RAFT_STATE.CANDIDATE:
            term = self._SyncObj__raftCurrentTerm
            if term != self._seen_term:
                self._seen_term = term
                self.probe.election()

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
            (self._pending_acks and self._SyncObj__raftLog.inflight is None)
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
            notify = self.commit_notify_due()
            if notify is not None:
                due = min(due, max(float(notify) + to_host, now))
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
        self._leader_link_lost(node)  # prompt election (prevote.py)
        self._on_activity()

    # ---- command submission (any thread) ------------------------------------------
    def _applyCommand(self, command: Any, callback: Any, commandType: Any = None) -> None:  # noqa: N803
        """pysyncobj's, without its pipe notifier: it wrote a byte to a pipe of
        the group per command (with appendEntriesUseBatch off) for the poll
        to read back, two system calls and a poll event per entry, only to
        wake a tick thread we do not have. The host is woken instead."""
        if commandType is not None:
            command = bytes((commandType,)) + command
        try:
            self._SyncObj__commandsQueue.put_nowait((command, callback))
        except queue.Full:
            self._SyncObj__callErrCallback(FAIL_REASON.QUEUE_FULL, callback)
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

    def in_contact(self, within_s: float) -> bool:
        """Part of a working group: a leader that heard from a quorum within
        ``within_s``, or a follower whose leader was heard from recently (its
        election deadline, pushed forward by each leader message, passed less
        than ``within_s`` ago). Any thread (reads two fields); health checks."""
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            return self.has_quorum_contact(within_s)
        if self._SyncObj__raftLeader is None:
            return False
        return bool(monotonic_time() < self._SyncObj__raftElectionDeadline + within_s)

    def follower_progress(self) -> list[tuple[str, int, float]]:
        """Leader: ``(follower address, entries behind, seconds since heard)``
        per follower; empty on a non-leader. Any thread (metrics): a racing
        change of the peer set gives an empty list, never an error."""
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            return []
        try:
            log_ = self._SyncObj__raftLog
            last = log_[-1][1] if len(log_) else 0
            match = dict(self._SyncObj__raftMatchIndex)
            heard = dict(self._SyncObj__lastResponseTime)
        except (RuntimeError, IndexError):
            return []
        now = monotonic_time()
        return [
            (n.address, max(0, last - idx), now - heard.get(n, 0.0)) for n, idx in match.items()
        ]

    def leader_address(self) -> str:
        leader = self._getLeader()
        return leader.address if leader is not None else ""

    def leader_lost(self) -> bool:
        """A follower whose link to the leader it knows is down: the leader's
        process died (its sockets closed) or the link is cut; an election is
        near (see ``_SyncObj__onNodeDisconnected``). Any thread (reads two
        fields): request routing treats such a leader as unknown rather than
        forwarding to a node that cannot answer."""
        leader = self._SyncObj__raftLeader
        if leader is None or self._SyncObj__raftState == _RAFT_STATE.LEADER:
            return False
        return leader not in self._SyncObj__connectedNodes

    def term(self) -> int:
        """The current Raft term; 0 until this replica has seen an election."""
        return int(self._SyncObj__raftCurrentTerm)

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
        if not clearJournal and self._SyncObj__conf.dynamicMembershipChange:
            self._member_changes_after(applied)
        waiting = self._SyncObj__commandsWaitingCommit
        for idx in [i for i in waiting if i <= applied]:
            for _term, callback in waiting.pop(idx):
                callback(None, FAIL_REASON.UNKNOWN_OUTCOME)

    def _member_changes_after(self, applied: int) -> None:
        """The membership entries of the journal after the snapshot just
        loaded at start, applied to the member set in log order. A follower
        applies such an entry when it is appended (pysyncobj, as Raft: the
        latest configuration in the log counts, committed or not) and undoes
        it if the entry is truncated; but the load reset the member set to the
        snapshot's and nothing applied the tail's again, so a replica
        restarted from a snapshot older than a move forgot the member the move
        added, and refused that member's greeting for good when it led
        (docs/internals.md, "Membership after a restart")."""
        log_ = self._SyncObj__raftLog
        parse, change = self._SyncObj__parseChangeClusterRequest, self._SyncObj__doChangeCluster
        for i in range(len(log_)):
            command, index, _term = log_[i]
            if index > applied:
                request = parse(command)
                if request is not None:
                    change(request)


def bind_address_for(host: str | None, self_address: str) -> str | None:
    """Where a group whose Raft address is ``self_address`` listens: ``host``
    (the node's ``raft_host``) with that address's port; None keeps the
    default (the address itself, see SafeSyncObj)."""
    if host is None:
        return None
    return f"{host}:{self_address.rsplit(':', 1)[1]}"


def _address(node: Any) -> str:
    return node.address if isinstance(node, Node) else str(node)
