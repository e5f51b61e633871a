"""AppendEntries, both directions, fixed (hazard 1 and 3 for followers, and
large entries): a mixin of ``SafeSyncObj`` (raft.py).

Followers never truncate entries that do not conflict (Raft §5.3) and queue
their acks until the journal is synced; an entry always travels whole, never
through pysyncobj's chunked "transmission" path. Driver thread only.
"""

from __future__ import annotations

import logging
from typing import Any

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE

from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.replication import heartbeats, prevote

log = logging.getLogger(__name__)


class AppendEntriesFixes(SyncObj):
    """The AppendEntries half of SafeSyncObj: see the module doc."""

    _defer_sends = False  # see TickFixes._append_commands
    _sends_owed = False

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
        bounded by ``group.MAX_ENTRY_BYTES`` unless one command is larger;
        the frame cap is ``wire.max_frame_bytes()``; a chunked message has
        no wire encoding). Snapshot installs are unchanged."""
        if self._defer_sends:  # appending a tick's commands: one round after (ticks.py)
            self._sends_owed = True
            return
        conf = self._SyncObj__conf
        start = monotonic_time()
        self._SyncObj__newAppendEntriesTime = start + conf.appendEntriesPeriod
        self._sent_round()
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
            _stage("s.ae_tx")
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

    # ---- hazard 1 (and 3 for followers) --------------------------------------------
    def _SyncObj__onMessageReceived(self, node: Any, message: dict[str, Any]) -> None:  # noqa: N802
        kind = message.get("type")
        if kind in heartbeats.KINDS:  # for the host, on this group's connection
            if self.heartbeat_mux is not None:
                self.heartbeat_mux.receive(self, node, message)
            return
        if kind in prevote.KINDS:
            self._on_prevote_message(node, message)
            self._on_activity()  # an election may have started: tick now
            return
        if (
            kind == "append_entries"
            and "prevLogIdx" in message
            and message["term"] >= self._SyncObj__raftCurrentTerm
        ):
            before = self._progress()
            if message.get("entries"):
                _stage("f.ae_rx")
            self._on_append_entries(node, message)
            self._wake(before)
            return
        if (
            kind == "append_entries"
            and "serialized" in message
            and message["term"] >= self._SyncObj__raftCurrentTerm
        ):
            self._on_snapshot_chunk(node, message)
            self._on_activity()
            return
        if kind == "next_node_idx" and self._SyncObj__raftState == _RAFT_STATE.LEADER:
            term = self._SyncObj__raftCurrentTerm
            if message.get("term", term) != term:
                return  # an ack of an earlier term (codec.py, tag 14): not ours
            _stage("s.ack_rx")
            before = self._SyncObj__raftMatchIndex.get(node)
            SyncObj._SyncObj__onMessageReceived(self, node, message)
            if not message["success"] or (
                self._SyncObj__raftMatchIndex.get(node) != before and self.commit_may_move()
            ):
                self._on_activity()  # the commit index moves (or a retry is owed): tick now
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
            if self._pending_acks:
                # Begin the sync of the new entries right after this poll
                # round (host._flush_only), not at the start of the tick:
                # it is on the commit's critical path.
                self._on_flush()
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
        self._pending_acks.append((node, match + 1, self._SyncObj__raftCurrentTerm))
        # Only entries proven to match the leader's log may be committed.
        commit = min(leader_commit, match, self._SyncObj__getCurrentLogIndex())
        if commit > self._SyncObj__raftCommitIndex:
            self._SyncObj__raftCommitIndex = commit
            self._SyncObj__raftLog.setRaftCommitIndex(commit)

    def _on_snapshot_chunk(self, node: Any, message: dict[str, Any]) -> None:
        """A chunk of the leader's snapshot (pysyncobj's install path, fixed):

        * pysyncobj moved the commit index to min(leader's, our last index)
          on EVERY chunk, though a chunk proves nothing about our log: a
          follower holding uncommitted entries of an old term applied them
          (the leader's commit index covered their indexes) until the
          install replaced its state;
        * a snapshot that failed to load (pysyncobj logs it and goes on)
          was acknowledged as installed, "success" with our unchanged last
          index + 1, and the leader counted our stale entries as copies of
          its own: a commit without a quorum. Now the install is answered
          with a reset and the leader sends the snapshot again.
        """
        self._follow(node, message)
        self._SyncObj__leaderCommitIndex = message["commit_index"]
        chunk = message.get("serialized")
        if not chunk or not self._SyncObj__serializer.setTransmissionData(chunk):
            return  # more chunks to come
        if not self.install_received_snapshot():
            log.error("%s: the snapshot received could not be loaded", self._SyncObj__selfNode)
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return
        # The log is now [.., snapshot's last entry]: committed (the leader
        # snapshots only what it applied), and nothing beyond it.
        last = self._SyncObj__getCurrentLogIndex()
        self._SyncObj__raftCommitIndex = last
        self._SyncObj__raftLog.setRaftCommitIndex(last)
        self._SyncObj__sendNextNodeIdx(node, success=True)

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
