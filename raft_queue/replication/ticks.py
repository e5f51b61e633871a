"""pysyncobj's tick, leaner, counting only synced copies: a mixin of ``SafeSyncObj``.

``_raft_tick`` is pysyncobj 0.3.17's ``_onTick`` (syncobj.py ~605-706) with
four changes:

* **Commit counts synced copies.** pysyncobj counts the leader's own copy
  of every entry at once; it was only safe because the leader synced its
  journal on the driver thread before counting. Now syncs run on I/O
  threads (syncs.py) and the leader's copy counts up to the journal's
  ``durable_index``; a follower's ``matchIndex`` counts because followers
  ack only what a sync covered (hazard 3). So an entry commits as soon as
  ANY majority has it on disk: two synced followers commit it while the
  leader's own sync is still running. Raft's rule stays: only an entry of
  the current term is committed by counting (§5.4.2), earlier ones with it.
* **No commit-only round after every apply.** pysyncobj sends every
  follower an AppendEntries as soon as the leader applies anything (with
  ``appendEntriesUseBatch`` off), and each follower acks it: four messages
  per entry on a 3-node group, only to carry the new commit index. The
  next AppendEntries carries it anyway; when none goes out within
  ``COMMIT_NOTIFY_S``, one is sent then (``next_deadline`` wakes the group
  for it). Nothing a client waits for depends on it: reads, leases and
  results are served by the leader.
* **Per-tick chores only when there is work**: the one-second timer (it
  only stored the commit index, which we do not store: journal.py), the
  command queue's lock and exception when it is empty, the tick callbacks
  (none registered), the poll (the host polls once for all groups).
* Elections start through ``_start_election`` (pre-vote: prevote.py).
* The rest (elections, leader fallback, apply, snapshot load, log
  compaction, heartbeats) is pysyncobj's, in its order.

Driver thread only.
"""

from __future__ import annotations

import contextlib
import os

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.transport import TransportNotReadyError

from raft_queue.observability.stagetrace import mark as _stage

# A commit index not yet carried by any AppendEntries goes out in one this
# long after it moved, unless an entry or heartbeat takes it first.
COMMIT_NOTIFY_S = 0.02


class TickFixes(SyncObj):
    """The tick half of SafeSyncObj: see the module doc."""

    # How long a new commit index may wait for a ride (COMMIT_NOTIFY_S); 0 for a
    # group whose followers serve reads (the metadata group: every node answers
    # from its own replica, so a client reading after its write must find it).
    commit_notify_s = COMMIT_NOTIFY_S
    _commit_sent = 0  # the commit index of the last AppendEntries round
    _commit_notify_at: float | None = None  # pysyncobj's clock
    # While commands are appended (_append_commands): AppendEntries rounds
    # are owed, not sent.
    _defer_sends = False
    _sends_owed = False

    def _raft_tick(self) -> None:
        transport = self._SyncObj__transport
        if not transport.ready:
            with contextlib.suppress(TransportNotReadyError):
                transport.tryGetReady()
            if not transport.ready:
                self._SyncObj__applyLogEntries()
                return
        if self._SyncObj__needLoadDumpFile:
            dump = self._SyncObj__conf.fullDumpFile
            if dump is not None and os.path.isfile(dump):
                self._SyncObj__loadDumpFile(clearJournal=False)
            self._SyncObj__needLoadDumpFile = False
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self._advance_commit()
            self._check_fallback()
        elif (
            self._SyncObj__selfNode is not None
            and self._SyncObj__raftElectionDeadline < monotonic_time()
            and self._SyncObj__connectedToAnyone()
        ):
            self._start_election()
        self._SyncObj__applyLogEntries()
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self._send_if_due()
        if not self._SyncObj__onReadyCalled and (
            self._SyncObj__raftLastApplied == self._SyncObj__leaderCommitIndex
        ):
            if self._SyncObj__conf.onReady:
                self._SyncObj__conf.onReady()
            self._SyncObj__onReadyCalled = True
        if self._SyncObj__commandsQueue._FastQueue__queue:
            self._append_commands()
        self._SyncObj__tryLogCompaction()
        if self._SyncObj__onTickCallbacks:
            with self._SyncObj__onTickCallbacksLock:
                for callback in self._SyncObj__onTickCallbacks:
                    callback()

    def _append_commands(self) -> None:
        """pysyncobj's ``_checkCommandsToApply`` (append the queued commands
        to the log), with its AppendEntries round after each appended entry
        held back (``_defer_sends``) until every queued command is in: then
        the leader's journal sync begins, and only then do the entries go to
        the followers, in one round. The leader's fdatasync thus runs while
        the followers are sent, receive and sync theirs (it used to begin
        after every follower was sent to: ~0.1 ms later per entry on W1's
        path), and N entries of one tick cost one message per follower
        instead of N. A small write on a quiet host is sent first and then
        synced here on the driver (``sync_inline_now``; syncs.py): the
        fdatasync overlaps the followers' work just the same, without the
        I/O thread's hand-off and the driver round its end took."""
        self._defer_sends = True
        try:
            self._checkCommandsToApply()
        finally:
            self._defer_sends = False
        if self._sends_owed:
            self._sends_owed = False
            if self.sync_inline_now():
                self._SyncObj__sendAppendEntries()
                self.flush_durable(inline=True)
            else:
                self.flush_durable()
                self._SyncObj__sendAppendEntries()
            self.after_append()

    def after_append(self) -> None:
        """Leader, after its new entries went out: work that may use the wait
        for the followers' copies (PartitionReplica applies ahead). Default: none."""

    def flush_durable(self, inline: bool = False) -> None:  # SafeSyncObj's (raft.py)
        raise NotImplementedError

    def sync_inline_now(self) -> bool:  # SafeSyncObj's (raft.py)
        raise NotImplementedError

    def _majority_index(self) -> int:
        """The highest index a majority holds on disk (the leader's copy up to
        its journal's durable_index, a follower's up to its matchIndex)."""
        log_ = self._SyncObj__raftLog
        match = self._SyncObj__raftMatchIndex
        copies = [log_.durable_index, *(match.get(n, 0) for n in self._SyncObj__otherNodes)]
        copies.sort(reverse=True)
        return int(min(copies[len(copies) // 2], log_[-1][1]))

    def commit_may_move(self) -> bool:
        """Leader: whether a tick would move the commit index now. An ack or a
        sync that leaves it where it is needs no tick of its own: on W1 the
        leader's own sync and the second follower's ack were two of its four
        rounds per send, and neither commits anything."""
        return self._majority_index() > self._SyncObj__raftCommitIndex

    def _advance_commit(self) -> None:
        """Commit the highest current-term entry that a majority holds on disk."""
        log_ = self._SyncObj__raftLog
        majority = self._majority_index()
        commit = self._SyncObj__raftCommitIndex
        if majority > commit:
            entry = self._SyncObj__getEntries(majority, 1)
            if entry and entry[0][2] == self._SyncObj__raftCurrentTerm:
                self._SyncObj__raftCommitIndex = majority
                _stage("s.commit")
                log_.setRaftCommitIndex(majority)
        self._SyncObj__leaderCommitIndex = self._SyncObj__raftCommitIndex

    def _check_fallback(self) -> None:
        """pysyncobj's leader fallback (hazard 5): without a response from a
        majority within leaderFallbackTimeout, step down."""
        others = self._SyncObj__otherNodes
        deadline = monotonic_time() - self._SyncObj__conf.leaderFallbackTimeout
        last = self._SyncObj__lastResponseTime
        heard = 1 + sum(1 for n in others if last.get(n, 0) > deadline)
        if heard <= (len(others) + 1) / 2:
            self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
            self._SyncObj__raftLeader = None

    def _start_election(self) -> None:
        """The election timer ran out; PreVote (prevote.py) asks first."""
        self._campaign()

    def _campaign(self) -> None:
        """pysyncobj's election start, unchanged."""
        timeout = self._SyncObj__generateRaftTimeout()
        self._SyncObj__raftElectionDeadline = monotonic_time() + timeout
        self._SyncObj__transferInProgress = False
        self._SyncObj__raftLeader = None
        self._SyncObj__setState(_RAFT_STATE.CANDIDATE)
        term = self._SyncObj__raftCurrentTerm + 1
        self._SyncObj__setCurrentTerm(term, self._SyncObj__selfNode.id)
        self._SyncObj__votesCount = 1
        for node in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(
                node,
                {
                    "type": "request_vote",
                    "term": self._SyncObj__raftCurrentTerm,
                    "last_log_index": self._SyncObj__getCurrentLogIndex(),
                    "last_log_term": self._SyncObj__getCurrentLogTerm(),
                },
            )
        self._SyncObj__onLeaderChanged()
        if self._SyncObj__votesCount > (len(self._SyncObj__otherNodes) + 1) / 2:
            self._SyncObj__onBecomeLeader()

    def _send_if_due(self) -> None:
        """AppendEntries to every follower at the heartbeat deadline, or when a
        new commit index has waited COMMIT_NOTIFY_S for a ride."""
        now = monotonic_time()
        if self._SyncObj__raftCommitIndex <= self._commit_sent:
            self._commit_notify_at = None
        elif self._commit_notify_at is None:
            self._commit_notify_at = now + self.commit_notify_s
        notify = self._commit_notify_at
        if now > self._SyncObj__newAppendEntriesTime or (notify is not None and now >= notify):
            self._SyncObj__sendAppendEntries()

    def _sent_round(self) -> None:
        """An AppendEntries round to every follower is going out now."""
        self._commit_sent = self._SyncObj__raftCommitIndex
        self._commit_notify_at = None

    def commit_notify_due(self) -> float | None:
        """When (pysyncobj's clock) the leader owes its followers a commit index."""
        if self._SyncObj__raftState != _RAFT_STATE.LEADER:
            return None
        return self._commit_notify_at
