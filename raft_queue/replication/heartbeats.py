"""Coalesced heartbeats: one message per node pair per period, not one per group.

A node hosting hundreds of partition replicas spent most of its idle CPU on
Raft heartbeats: every leader sent an AppendEntries to each follower every
heartbeat period and got an ack back, about 1,700 messages a second at 256
replicas per node, each encoded, framed, written, polled, read and dispatched
by Python. As CockroachDB does (coalesced heartbeats), the driver now sends,
once per period, ONE message to each other node listing every *quiet* group
it leads there, and that node answers with ONE message listing the acks.

Quiet (``quiet_peers``): a leader whose whole log is committed and applied,
with no command queued, and every voter connected, caught up (matchIndex =
last index) and hosted by a known node. Nothing but heartbeats is owed to
such a group. Anything else (an entry to send, a follower behind or
disconnected, a snapshot, a member whose node is unknown or that refused a
coalesced heartbeat) takes pysyncobj's own per-group path, unchanged: the
group ticks at its own heartbeat deadline and sends full AppendEntries.

Raft semantics are kept, item by item: each item is exactly the empty
AppendEntries the group would have sent (term, commit index, prevLogIdx/Term
= the follower's matchIndex), handled on the follower by the group's own
message handler (term checks, election timer reset, §5.3 log check, commit
index), and each ack is the group's own ``next_node_idx``, handled by the
leader's handler (lastResponseTime, so ``has_quorum_contact`` and the leader
fallback of hazard 5 see coalesced acks as they saw per-group ones). An ack
is sent only after the follower's journal is synced (hazard 3). A follower
that rejects an item answers through the group's own connection, as before;
a follower that does not host the group (or does not know the leader as a
member) refuses it, and the leader uses the per-group path for that member
for ``REFUSED_S``. Failover is unchanged: when a leader's node dies or is
cut off, its followers stop getting items, their election timers run out and
they campaign through the group's own connections.

Transport: a batch rides on the Raft connection of one of its groups (the
first whose member on that node is connected), so it crosses the same fault
proxies as all Raft traffic between the two nodes and every cut (majority,
bridge, one-way) cuts it too. No new port, no new link. Because a quiet
group's own connection carries nothing for long stretches, every valid item
or ack refreshes that connection's read time, so pysyncobj's connection
timeout does not drop a healthy idle connection (the next real message, a
vote request above all, would otherwise be lost on a reconnect).

Which node hosts a member comes from the metadata (``set_peers``); a wrong
or stale mapping costs only efficiency (the far node refuses what it does not
host). All of this runs on the host's driver thread, except ``set_peers``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping
from typing import Any

from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.tcp_connection import CONNECTION_STATE

log = logging.getLogger(__name__)

BATCH = "hb_batch"
BATCH_ACK = "hb_batch_ack"
KINDS = frozenset((BATCH, BATCH_ACK))
REFUSED_S = 10.0  # a refused (group, member) uses the per-group path this long
REFUSE = -1  # coalesced_heartbeat: this node does not host the group / know the leader
ANSWERED = 0  # coalesced_heartbeat: the group's own handler answered (or ignored) it
CARRIER_TRIES = 3


class Heartbeats:
    """The node-level heartbeat round (one per host). ``groups`` maps a Raft
    address to the local group holding it (the host's registry)."""

    def __init__(self, groups: Mapping[str, Any], period_s: float) -> None:
        self.groups = groups
        self.period_s = period_s
        self.next_round = 0.0
        self._peer_of: Mapping[str, str] = {}
        self._refused: dict[tuple[str, str], float] = {}

    def set_peers(self, peer_of: Mapping[str, str]) -> None:
        """Raft address -> id of the node hosting it (any thread; replaced whole)."""
        self._peer_of = dict(peer_of)

    # ---- leader side ------------------------------------------------------------------
    def quiet_peers(self, group: Any) -> list[tuple[Any, str]] | None:
        """``(member node, its node id)`` for every voter of a quiet leader
        (see the module doc); None if the group needs its own heartbeats."""
        if group._SyncObj__raftState != _RAFT_STATE.LEADER:
            return None
        if group._SyncObj__conf.appendEntriesPeriod < self.period_s:
            return None  # a faster group keeps its own pace
        last = group._SyncObj__raftLog[-1][1]
        if (
            group._SyncObj__raftCommitIndex != last
            or group._SyncObj__raftLastApplied != last
            or group._SyncObj__readonlyNodes
            or group._SyncObj__commandsQueue._FastQueue__queue
            or group._pending_acks
        ):
            return None
        connected = group._SyncObj__connectedNodes
        match, nxt = group._SyncObj__raftMatchIndex, group._SyncObj__raftNextIndex
        peer_of, refused = self._peer_of, self._refused
        out = []
        for node in group._SyncObj__otherNodes:
            peer = peer_of.get(node.address)
            if (
                peer is None
                or node not in connected
                or match.get(node) != last
                or nxt.get(node) != last + 1
            ):
                return None
            if refused and self._is_refused(group, node):
                return None
            out.append((node, peer))
        return out

    def _is_refused(self, group: Any, node: Any) -> bool:
        until = self._refused.get((group._SyncObj__selfNode.address, node.address))
        return until is not None and until > monotonic_time()

    def round(self, groups: Iterable[Any], mark_active: Any) -> None:
        """One period: a batch per node for the quiet leaders; every other
        leader whose heartbeat is due is ticked (its own path). A quiet
        leader without quorum contact is ticked too, so pysyncobj's leader
        fallback (hazard 5) steps it down on time."""
        now = monotonic_time()
        batches: dict[str, list[tuple[Any, ...]]] = {}
        carriers: dict[str, list[tuple[Any, Any]]] = {}
        for group in groups:
            if group._SyncObj__raftState != _RAFT_STATE.LEADER:
                continue
            peers = self.quiet_peers(group)
            if peers is None:
                if group._SyncObj__newAppendEntriesTime <= now:
                    mark_active(group.key)
                continue
            conf = group._SyncObj__conf
            if not group.has_quorum_contact(conf.leaderFallbackTimeout):
                mark_active(group.key)
            me = group._SyncObj__selfNode.address
            term = group._SyncObj__raftCurrentTerm
            _, last, last_term = group._SyncObj__raftLog[-1]
            # Quiet: every member matches the whole log, so prevLogIdx/Term
            # are the last entry's and the commit index is the last index.
            for node, peer in peers:
                batches.setdefault(peer, []).append((me, node.address, term, last, last, last_term))
                carriers.setdefault(peer, []).append((group, node))
            group._SyncObj__newAppendEntriesTime = now + conf.appendEntriesPeriod
        for peer, items in batches.items():
            self._send(carriers[peer], {"type": BATCH, "items": items})

    def _send(self, carriers: list[tuple[Any, Any]], message: dict[str, Any]) -> None:
        tried: set[int] = set()
        for group, node in carriers:
            if id(group) in tried:
                continue
            tried.add(id(group))
            if group._SyncObj__transport.send(node, message):
                return
            if len(tried) >= CARRIER_TRIES:
                return

    # ---- both sides: a batch or its ack arrived on ``carrier``'s connection ------------
    def receive(self, carrier: Any, node: Any, message: dict[str, Any]) -> None:
        try:
            if message.get("type") == BATCH:
                self._on_batch(carrier, node, message["items"])
            else:
                self._on_ack(message["acks"], message["refused"])
        except (KeyError, TypeError, ValueError):  # not ours: answer nothing
            log.warning("malformed %s from %s", message.get("type"), node)

    def _on_batch(self, carrier: Any, node: Any, items: list[tuple[Any, ...]]) -> None:
        acks, refused = [], []
        for leader, member, term, commit, prev_idx, prev_term in items:
            group = self.groups.get(member)
            nxt = REFUSE
            if group is not None:
                nxt = coalesced_heartbeat(group, leader, term, commit, prev_idx, prev_term)
            if nxt == REFUSE:
                refused.append((leader, member))
            elif nxt != ANSWERED:
                acks.append((leader, member, term, nxt))
        carrier._SyncObj__transport.send(
            node, {"type": BATCH_ACK, "acks": acks, "refused": refused}
        )

    def _on_ack(self, acks: list[tuple[Any, ...]], refused: list[tuple[str, str]]) -> None:
        for leader, member, term, nxt in acks:
            group = self.groups.get(leader)
            if group is not None:
                coalesced_ack(group, member, term, nxt)
        until = monotonic_time() + REFUSED_S
        for leader, member in refused:
            log.info("%s refused coalesced heartbeats of %s; using its own", member, leader)
            self._refused[(leader, member)] = until
        if len(self._refused) > 1024:
            now = monotonic_time()
            self._refused = {k: t for k, t in self._refused.items() if t > now}


def coalesced_heartbeat(
    group: Any, leader: str, term: int, commit: int, prev_idx: int, prev_term: int
) -> int:
    """Follower side of one item: the empty AppendEntries it stands for, through
    the group's own handler. The next index to ack in the batch reply (if a
    completed journal sync covers it), ANSWERED if the handler answered on
    the group's connection or ignored it (stale term) or the ack waits for a
    sync (it then goes on the group's connection, as a per-group ack would),
    REFUSE if ``leader`` is not a member here."""
    transport = group._SyncObj__transport
    node = transport._nodeAddrToNode.get(leader)
    if node is None:
        return REFUSE
    if _steady_follower(group, node, term, commit, prev_idx, prev_term):
        # What the handler below would do for this message, minus its checks
        # and bookkeeping (which all find nothing to change).
        conf = group._SyncObj__conf
        group._SyncObj__raftElectionDeadline = monotonic_time() + random.uniform(
            conf.raftMinTimeout, conf.raftMaxTimeout
        )
        group._SyncObj__leaderCommitIndex = commit
        touch(transport, node)
        if group._SyncObj__raftLog.durable_index < prev_idx:  # hazard 3: not yet on disk
            group._pending_acks.append((node, prev_idx + 1, term))
            group._on_flush()  # acked on the group's connection once synced
            return ANSWERED
        return prev_idx + 1
    acks = group._pending_acks
    before = len(acks)
    group._SyncObj__onMessageReceived(
        node,
        {
            "type": "append_entries",
            "term": term,
            "commit_index": commit,
            "entries": [],
            "prevLogIdx": prev_idx,
            "prevLogTerm": prev_term,
        },
    )
    if len(acks) != before + 1 or acks[-1][0] is not node:
        return ANSWERED
    touch(transport, node)
    nxt = acks[-1][1]
    if group._SyncObj__raftLog.durable_index < nxt - 1:  # hazard 3: not yet on disk
        return ANSWERED  # stays pending: acked on the group's connection once synced
    acks.pop()
    return int(nxt)


def _steady_follower(
    group: Any, node: Any, term: int, commit: int, prev_idx: int, prev_term: int
) -> bool:
    """The common case, where the full handler would only reset the election
    timer and ack: a follower of ``node`` in ``term``, no leadership transfer
    pending, holding the entry (prev_idx, prev_term), already committed as
    far as this heartbeat can take it."""
    if (
        group._SyncObj__raftState != _RAFT_STATE.FOLLOWER
        or group._SyncObj__raftCurrentTerm != term
        or group._SyncObj__raftLeader is not node
        or group._SyncObj__transferInProgress
    ):
        return False
    log_ = group._SyncObj__raftLog
    first = log_[0][1]
    last = log_[-1][1]
    if not first <= prev_idx <= last or log_[prev_idx - first][2] != prev_term:
        return False
    return bool(min(commit, prev_idx) <= group._SyncObj__raftCommitIndex)


def coalesced_ack(group: Any, member: str, term: int, nxt: int) -> None:
    """Leader side of one ack: the member's ``next_node_idx``, if this group
    still leads in the term the heartbeat was sent in."""
    if group._SyncObj__raftState != _RAFT_STATE.LEADER or group._SyncObj__raftCurrentTerm != term:
        return
    transport = group._SyncObj__transport
    node = transport._nodeAddrToNode.get(member)
    if node is None:
        return
    if group._SyncObj__raftMatchIndex.get(node, 0) >= nxt - 1:
        # The handler would only note the response time (match index unchanged).
        group._SyncObj__lastResponseTime[node] = monotonic_time()
    else:
        group._SyncObj__onMessageReceived(
            node, {"type": "next_node_idx", "next_node_idx": nxt, "reset": False, "success": True}
        )
    touch(transport, node)


def touch(transport: Any, node: Any) -> None:
    """We heard from ``node`` for this group: keep its idle connection from
    timing out (pysyncobj drops a connection silent for connectionTimeout)."""
    conn = transport._connections.get(node)
    if conn is not None and conn.state == CONNECTION_STATE.CONNECTED:
        conn._TcpConnection__lastReadTime = monotonic_time()
