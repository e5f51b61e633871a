"""Pre-vote (Raft thesis §9.6) and prompt elections: a mixin of ``SafeSyncObj``.

**Pre-vote.** pysyncobj 0.3.17 starts an election by bumping its term at
once, and any node stepping down on a request_vote of a higher term (the
leader included). A node whose timer ran out because *it* was cut off,
paused or starved of CPU therefore deposes a healthy leader when it comes
back: an election nobody needed, and writes refused meanwhile. With
pre-vote, a node whose election timer runs out (a follower, or a candidate
whose election failed: a split vote) first asks every other
member whether it *would* vote for it in term + 1, changing no state
anywhere (no term, no vote is written). A member grants only if

* the asker's term + 1 is above its own term,
* the asker's log is at least as up to date as its own (§5.4.1), and
* it has no live leader: it is not the leader itself and, as a follower,
  it knows no leader, or its link to that leader is down, or its own
  election timer ran out too (it has not heard from the leader for at
  least a minimum election timeout).

Only with grants from a majority (itself included) does the node start
the real election (pysyncobj's, ``TickFixes._campaign``). A node cut off
from a healthy group thus never raises its term, and rejoins as a follower.
A leadership transfer (``timeout_now``) skips the pre-vote: the leader
asked for the election, and the followers, still hearing it, would refuse.

**Prompt elections.** A process killed (kill -9, a crash, an OOM kill) has
its sockets closed by the kernel: its followers see their Raft links to it
drop at once. A follower whose link to its leader drops moves its election
deadline to a random point within ``PROMPT_FRACTION`` of the minimum
election timeout, instead of waiting out the whole timeout (0.8-1.6 s by
default). It is safe because of the pre-vote: if the leader is alive and
the others still hear it, they refuse. A host that dies without closing
its sockets (power, a network cut) is still found by the timeout. The jitter
makes the two followers of a 3-node group rarely campaign in the same few
milliseconds (a split vote costs a full election timeout).

Messages (codec.py): ``pre_vote`` (term = the asker's term + 1, last log
index and term) and ``pre_vote_response`` (that term, granted). A node
without pre-vote (``pre_vote`` False, e.g. while a cluster is upgraded from
a version that lacks these two message types) neither sends them nor is
prompt; it still answers them. Driver thread only.
"""

from __future__ import annotations

import random
from typing import Any

from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.syncobj import _RAFT_STATE

PRE_VOTE = "pre_vote"
PRE_VOTE_RESPONSE = "pre_vote_response"
KINDS = frozenset((PRE_VOTE, PRE_VOTE_RESPONSE))
# A follower that lost its leader's link campaigns within this fraction of
# the minimum election timeout (0.2 s at the default 0.8 s).
PROMPT_FRACTION = 0.25


class PreVote(SyncObj):
    """The election half of SafeSyncObj: see the module doc. ``pre_vote``:
    set per group from ``raft.pre_vote`` (True by default)."""

    pre_vote = True
    _campaign: Any  # TickFixes's (later in SafeSyncObj's MRO); annotation only
    _prevote_term: int | None = None  # the term we asked about; None: not asking
    _prevote_grants: frozenset[Any] = frozenset()

    def _start_election(self) -> None:
        """The election timer ran out (tick): ask first, unless pre-vote is off,
        the leader asked for this election, or there is no one to ask."""
        if not self.pre_vote or self._SyncObj__transferInProgress or not self._SyncObj__otherNodes:
            self._prevote_term = None
            self._campaign()
            return
        self._SyncObj__raftElectionDeadline = (
            monotonic_time() + self._SyncObj__generateRaftTimeout()
        )
        if self._SyncObj__raftLeader is not None:
            self._SyncObj__raftLeader = None
            self._SyncObj__onLeaderChanged()
        term = self._SyncObj__raftCurrentTerm + 1
        self._prevote_term = term
        self._prevote_grants = frozenset()
        message = {
            "type": PRE_VOTE,
            "term": term,
            "last_log_index": self._SyncObj__getCurrentLogIndex(),
            "last_log_term": self._SyncObj__getCurrentLogTerm(),
        }
        for node in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(node, message)

    def _on_prevote_message(self, node: Any, message: dict[str, Any]) -> None:
        if message["type"] == PRE_VOTE:
            granted = self.grants_pre_vote(message)
            reply = {"type": PRE_VOTE_RESPONSE, "term": message["term"], "granted": granted}
            self._SyncObj__transport.send(node, reply)
            return
        if not message["granted"] or message["term"] != self._prevote_term:
            return
        if (
            self._SyncObj__raftState == _RAFT_STATE.LEADER
            # (a candidate asks too: one whose election failed, a split vote)
            or self._SyncObj__raftLeader is not None  # a leader spoke meanwhile
            or self._SyncObj__raftCurrentTerm + 1 != message["term"]
            or node not in self._SyncObj__otherNodes
        ):
            return
        self._prevote_grants = self._prevote_grants | {node}
        if 1 + len(self._prevote_grants) > (len(self._SyncObj__otherNodes) + 1) / 2:
            self._prevote_term = None
            self._campaign()

    def grants_pre_vote(self, message: dict[str, Any]) -> bool:
        """Whether this member would vote for the asker in ``message["term"]``
        (see the module doc); nothing is changed either way."""
        if self._SyncObj__selfNode is None or message["term"] <= self._SyncObj__raftCurrentTerm:
            return False
        if self._SyncObj__raftState == _RAFT_STATE.LEADER or self.hears_leader():
            return False
        my_term = self._SyncObj__getCurrentLogTerm()
        if message["last_log_term"] != my_term:
            return bool(message["last_log_term"] > my_term)
        return bool(message["last_log_index"] >= self._SyncObj__getCurrentLogIndex())

    def hears_leader(self) -> bool:
        """A follower with a leader, its link up and its election timer not run
        out (the leader was heard within an election timeout)."""
        leader = self._SyncObj__raftLeader
        return (
            leader is not None
            and leader in self._SyncObj__connectedNodes
            and monotonic_time() < self._SyncObj__raftElectionDeadline
        )

    def _leader_link_lost(self, node: Any) -> None:
        """``node``'s link dropped: if it was our leader, campaign soon (prompt
        election; only with pre-vote, which makes a wrong guess harmless)."""
        if (
            not self.pre_vote
            or node != self._SyncObj__raftLeader
            or self._SyncObj__raftState != _RAFT_STATE.FOLLOWER
            or self._SyncObj__transferInProgress
        ):
            return
        window = self._SyncObj__conf.raftMinTimeout * PROMPT_FRACTION
        soon = monotonic_time() + random.uniform(0.0, window)
        if soon < self._SyncObj__raftElectionDeadline:
            self._SyncObj__raftElectionDeadline = soon
