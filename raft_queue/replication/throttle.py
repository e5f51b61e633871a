"""A bytes-per-second limit on catching up one member of a group (``raftq
partitions move/rebalance --throttle``), as Kafka's replication throttle.

A new replica catches up from the leader in two ways, both limited here:
chunks of the snapshot file (``serializer.getTransmissionData``, 64 KiB
each) and AppendEntries carrying log entries. The limit counts the payload
(snapshot bytes, entry commands), not the codec or TCP framing.

How it hooks in, without editing ``appends.py``: pysyncobj's sender loop
(``SafeSyncObj._SyncObj__sendAppendEntries``) calls ``_send_entries`` and
``_send_snapshot_chunk`` per message; ``install`` shadows both on the group
*instance* (and wraps the serializer to count snapshot bytes exactly).
When the destination's bucket cannot pay for the next message, nothing is
read or sent; an empty AppendEntries per ``appendEntriesPeriod`` keeps the
member from starting elections and the connection alive (see ``_probe``).
To leave the loop for that member without spinning until its time budget
runs out, its next index is parked past the log end for the rest of the
call and put back afterwards
(``_SyncObj__sendAppendEntries`` is shadowed too, to restore it).
Nothing is lost by a refusal: the snapshot stream keeps its file position,
and entries are re-read from the next index on a later call.

The hook appends.py could offer instead (one check in its sender loop):
``if not self._may_send(node, nxt): heartbeat; break``. Until then the
names shadowed here are checked by tests/unit/test_throttle.py, which fails
if the sender loop stops calling them.

Limits are per (group, member address), live only on the node that leads
(the mover renews them with every progress poll) and expire ``ttl_s`` after
the last renewal, so a limit never outlives its move for long, and a new
partition leader is limited from the mover's next poll on.

Threading: everything runs on the host's driver thread.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

BURST_S = 0.25  # a bucket holds at least this many seconds of its rate ...
DEFAULT_TTL_S = 10.0
MIN_BATCH_BYTES = 64 << 10  # entries per message under a limit: at least this much


class TokenBucket:
    """Pay before sending: ``try_take(n)`` succeeds once ``n`` bytes have
    accrued at ``rate`` since the bucket started empty (it may hold more than
    its burst while a message larger than the burst waits). So the bytes
    taken by time t never exceed ``rate * t``: a transfer of S bytes takes at
    least S / rate seconds."""

    def __init__(
        self, rate: int, burst_s: float = BURST_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        self.rate = rate
        self.burst_s = burst_s
        self._clock = clock
        self._tokens = 0.0
        self._last = clock()

    def try_take(self, n: int) -> bool:
        now = self._clock()
        cap = max(self.rate * self.burst_s, n)  # ... or one message's worth
        self._tokens = min(cap, self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens < n:
            return False
        self._tokens -= n
        return True

    def refund(self, n: int) -> None:
        self._tokens += n


@dataclass(slots=True)
class Limit:
    """One member's limit and what was sent under it."""

    bucket: TokenBucket
    expires: float
    bytes_sent: int = 0
    last_probe: float = 0.0  # last message the member answers (entries, probe)

    @property
    def rate(self) -> int:
        return self.bucket.rate


@dataclass(slots=True)
class _State:
    limits: dict[str, Limit] = field(default_factory=dict)  # member address -> limit
    parked: dict[Any, int] = field(default_factory=dict)  # node -> its real next index
    charged: dict[str, int] = field(default_factory=dict)  # address -> paid for this chunk


_ATTR = "_raftq_throttle"


def set_limit(group: Any, address: str, rate: int, ttl_s: float = DEFAULT_TTL_S) -> None:
    """Limit catch-up of member ``address`` to ``rate`` bytes/s (0: no limit)
    for ``ttl_s`` from now; renewing keeps the bytes sent and the bucket."""
    if rate <= 0:  # lifting a limit never installs the hooks
        installed: _State | None = getattr(group, _ATTR, None)
        if installed is not None:
            installed.limits.pop(address, None)
        return
    state = _install(group)
    now = time.monotonic()
    limit = state.limits.get(address)
    if limit is None or limit.rate != rate:
        sent = limit.bytes_sent if limit is not None else 0
        # Sends are attempted about once per heartbeat period when idle: hold
        # two periods' worth so the rate is reached, not just approached.
        burst_s = max(BURST_S, 2 * group._SyncObj__conf.appendEntriesPeriod)
        state.limits[address] = Limit(TokenBucket(rate, burst_s), now + ttl_s, bytes_sent=sent)
    else:
        limit.expires = now + ttl_s


def limit_of(group: Any, address: str) -> Limit | None:
    """The live limit on ``address`` (None: none, or expired)."""
    state: _State | None = getattr(group, _ATTR, None)
    return _live(state, address) if state is not None else None


def snapshot_bytes(group: Any) -> int:
    """Size of the group's snapshot file (what a member far behind receives); 0: none."""
    path = group._SyncObj__conf.fullDumpFile
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def _live(state: _State, address: str) -> Limit | None:
    limit = state.limits.get(address)
    if limit is not None and limit.expires < time.monotonic():
        del state.limits[address]
        return None
    return limit


def _install(group: Any) -> _State:
    """Shadow the sender's per-message hooks on this group instance (once)."""
    state: _State | None = getattr(group, _ATTR, None)
    if state is not None:
        return state
    state = _State()
    cls = type(group)
    send_all = cls._SyncObj__sendAppendEntries
    send_entries = cls._send_entries
    send_chunk = cls._send_snapshot_chunk
    serializer = group._SyncObj__serializer

    def send_append_entries() -> None:
        try:
            send_all(group)
        finally:
            next_index = group._SyncObj__raftNextIndex
            for node, idx in state.parked.items():
                if node in next_index:
                    next_index[node] = idx
            state.parked.clear()

    def throttled_entries(node: Any, nxt: int) -> None:
        limit = _live(state, node.address) if state.limits else None
        if limit is None or nxt > group._SyncObj__getCurrentLogIndex():
            send_entries(group, node, nxt)  # unlimited, or a plain heartbeat
            if limit is not None:
                limit.last_probe = time.monotonic()
            return
        # Messages of about one burst each (not the usual 1 MiB): a slow
        # limit then sends a little often instead of a lot rarely.
        conf = group._SyncObj__conf
        usual = conf.appendEntriesBatchSizeBytes
        batch = min(usual, max(MIN_BATCH_BYTES, int(limit.rate * limit.bucket.burst_s)))
        size = sum(len(e[0]) for e in group._SyncObj__getEntries(nxt, None, batch))
        if not limit.bucket.try_take(size):
            _hold(group, state, node, limit)
            return
        conf.appendEntriesBatchSizeBytes = batch  # read by _send_entries, this thread
        try:
            send_entries(group, node, nxt)
        finally:
            conf.appendEntriesBatchSizeBytes = usual
        limit.bytes_sent += size
        limit.last_probe = time.monotonic()

    def throttled_chunk(node: Any) -> bool:
        limit = _live(state, node.address) if state.limits else None
        if limit is None:
            return bool(send_chunk(group, node))
        _probe_if_due(group, node, limit)  # chunks are not answered
        chunk = group._SyncObj__conf.logCompactionBatchSize
        if not limit.bucket.try_take(chunk):
            _hold(group, state, node, limit)
            return False
        state.charged[node.address] = chunk
        try:
            more = bool(send_chunk(group, node))
        finally:
            unused = state.charged.pop(node.address, 0)  # what the read did not use
            limit.bucket.refund(unused)
        return more

    group._SyncObj__sendAppendEntries = send_append_entries
    group._send_entries = throttled_entries
    group._send_snapshot_chunk = throttled_chunk
    group._SyncObj__serializer = _CountingSerializer(serializer, state)
    setattr(group, _ATTR, state)
    return state


def _hold(group: Any, state: _State, node: Any, limit: Limit) -> None:
    """Out of tokens for ``node``: an empty AppendEntries when a heartbeat is
    due, then park its next index past the log end so the sender loop moves on."""
    _probe_if_due(group, node, limit)
    next_index = group._SyncObj__raftNextIndex
    state.parked.setdefault(node, next_index[node])
    next_index[node] = group._SyncObj__getCurrentLogIndex() + 1


def _probe_if_due(group: Any, node: Any, limit: Limit) -> None:
    now = time.monotonic()
    if now - limit.last_probe >= group._SyncObj__conf.appendEntriesPeriod:
        _probe(group, node)
        limit.last_probe = now


def _probe(group: Any, node: Any) -> None:
    """A heartbeat the member answers. The answer matters: pysyncobj drops a
    connection that received nothing for ``connectionTimeout``, and a member
    receiving a snapshot answers no chunk, so a slow snapshot would time out,
    and a chunk sent while the connection is down is lost without a trace
    (pysyncobj's stream has no offsets; the image arrives corrupt).
    ``prevLogIdx`` is the entry before the member's next index, or the
    leader's first entry while the member needs the snapshot: a member
    without it answers a reset to where it stands, which changes nothing and
    leaves the snapshot stream where it was."""
    nxt = group._SyncObj__raftNextIndex[node]
    first = group._SyncObj__raftLog[0]
    prev_idx, prev_term = (first[1], first[2])
    if nxt > first[1]:
        prev_idx, prev_term = group._SyncObj__getPrevLogIndexTerm(nxt)
    group._SyncObj__transport.send(
        node,
        {
            "type": "append_entries",
            "term": group._SyncObj__raftCurrentTerm,
            "commit_index": group._SyncObj__raftCommitIndex,
            "entries": [],
            "prevLogIdx": prev_idx,
            "prevLogTerm": prev_term,
        },
    )


class _CountingSerializer:
    """pysyncobj's Serializer, counting the snapshot bytes sent to limited
    members (the exact chunk sizes: the last one is short)."""

    def __init__(self, inner: Any, state: _State) -> None:
        self._inner = inner
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def getTransmissionData(self, node: Any) -> Any:  # noqa: N802
        data = self._inner.getTransmissionData(node)
        address = getattr(node, "address", None)
        if address in self._state.charged:
            used = len(data[0]) if data else 0
            self._state.charged[address] -= used
            limit = self._state.limits.get(address)
            if limit is not None:
                limit.bytes_sent += used
        return data
