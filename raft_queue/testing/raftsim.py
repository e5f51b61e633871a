"""A deterministic, seeded simulation of SafeSyncObj groups (tests only).

Three (or five) real ``SafeSyncObj`` replicas, with their real message
handlers, ticks, pre-vote, journals (files, real fdatasync) and term/vote
files, run in one thread on a simulated clock. Only the transport, the clock
and the sync threads are simulated:

* every message goes through the real wire codec (``codec.encode`` /
  ``decode``), one FIFO queue per direction of each link, delivered after a
  random delay; cutting a link drops what is in flight and tells both ends
  the link is down (as a TCP connection that breaks);
* journal syncs are jobs completed after a random delay (the production
  path through ``on_sync_done``), or at once;
* snapshots: each replica compacts every ``compact_every`` entries and
  sends its snapshot in 512-byte chunks, as a partition's image travels;
* faults: link cuts and heals, node crashes (the process dies: in-flight
  syncs and messages are lost, what was written to the journal file stays,
  as after SIGKILL) and restarts from the same files, pauses (a node neither
  ticks nor reads for a while, then reads its backlog), slow links.

The checker is Raft's State Machine Safety: every replica applies the same
command at each log index, and a command whose proposer was told it
committed at (index, term) is the one every replica applies at that index.
``run(seed)`` returns the violations (empty: safe) and counts. Seeded, but
not exactly replayable: sets of nodes iterate in address order.
"""

from __future__ import annotations

import heapq
import os
import pickle
import random
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pysyncobj import syncobj as _pysyncobj
from pysyncobj.poller import createPoller

from raft_queue.replication import appends, codec, heartbeats, prevote, ticks
from raft_queue.replication import raft as _raft
from raft_queue.replication.raft import SafeSyncObj, make_conf

_CLOCK_MODULES = (_pysyncobj, appends, heartbeats, prevote, ticks, _raft)
_CLOCK_NAMES = ("monotonicTime", "monotonic_time")
ELECTION_S = float(os.environ.get("RAFTSIM_ELECTION_S", "0.1"))


class SimClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        # Time passes while code runs (a microsecond a reading): loops that
        # stop after a period (pysyncobj's send and append loops) end.
        self.now += 1e-6
        return self.now


@contextmanager
def simulated_clock(clock: SimClock) -> Iterator[None]:
    """Point pysyncobj's and our Raft modules' monotonic clock at ``clock``."""
    saved = []
    for module in _CLOCK_MODULES:
        for name in _CLOCK_NAMES:
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, clock)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


class SimTransport:
    """Stands in for LinkTransport: ``send`` hands the message to the net."""

    ready = True

    def __init__(self, net: Net, me: str, group: Any) -> None:
        self.net, self.me = net, me
        self._nodeAddrToNode = {n.address: n for n in group._SyncObj__otherNodes}
        self._connections: dict[Any, Any] = {}

    def send(self, node: Any, message: Any) -> bool:
        return self.net.send(self.me, node.address, message)

    def tryGetReady(self) -> None:  # noqa: N802
        pass

    def destroy(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # anything else pysyncobj may touch: no-op
        return lambda *a, **k: None


class SimSyncer:
    """Journal syncs complete after a random delay (``net.step`` runs them)."""

    def __init__(self, net: Net, me: str) -> None:
        self.net, self.me = net, me

    def submit(self, job: Any, done: Any) -> None:
        rng = self.net.rng
        delay = rng.uniform(0.0005, 0.004) if rng.random() < 0.8 else rng.uniform(0.005, 0.3)
        self.net.schedule(delay, "sync", self.me, (job, done))

    def would_inline(self) -> bool:
        """Whether ``run_inline`` may run a sync (a leader then sends its
        AppendEntries first: ticks.py); it still decides by its draw."""
        return self.net.inline_share > 0

    def run_inline(self, job: Any, done: Any) -> bool:
        """A sync on its driver thread (syncs.SyncThreads), a follower's or a
        leader's after its sends, for ``net.inline_share`` of them: done at
        once, acks with it."""
        if self.net.inline_share <= 0 or self.net.rng.random() >= self.net.inline_share:
            return False
        job.run()
        done(job)
        return True


class SimGroup(SafeSyncObj):
    """A replica whose state machine records what it applied, by log index."""

    def __init__(self, net: Net, address: str, peers: list[str], path: str) -> None:
        conf = make_conf(
            journal_file=os.path.join(path, "journal"),
            dump_file=os.path.join(path, "dump"),
            election_timeout_min_s=ELECTION_S,
            election_timeout_max_s=ELECTION_S * 2,
            serializer=self._serialize,
            deserializer=self._deserialize,
            log_compaction_min_entries=net.compact_every,
            log_compaction_min_time_s=ELECTION_S * 3,
        )
        # Snapshots travel in many chunks, as a real partition's image does
        # (a follower sees the first chunks long before the last).
        conf.logCompactionBatchSize = 512
        self.net, self.address = net, address
        self.applied: dict[int, bytes] = {}
        super().__init__(
            address,
            peers,
            conf,
            createPoller("poll"),
            on_activity=lambda: net.wake(address),
            on_flush=lambda: net.flush(address),
        )
        real: Any = getattr(self, "_SyncObj__transport")  # noqa: B009 (mypy: set in a base)
        real.destroy()
        self._SyncObj__transport = SimTransport(net, address, self)
        self._SyncObj__connectedNodes = {
            n for n in self._SyncObj__otherNodes if net.linked(address, n.address)
        }
        self.syncer = SimSyncer(net, address)  # type: ignore[assignment]

    # Snapshots: the state is what was applied, by index (pickled: a test
    # file of our own, never read from the network).
    def _serialize(self, path: str, data: Any) -> None:
        with open(path, "wb") as f:
            pickle.dump((data, dict(self.applied)), f)

    def _deserialize(self, path: str) -> Any:
        with open(path, "rb") as f:
            data, applied = pickle.load(f)  # noqa: S301
        self.applied = applied
        if not self._loading_at_start:
            self.net.report.installs += 1
        for idx, command in applied.items():
            self.net.applied(self.address, idx, command, installed=True)
        return data

    def apply_regular(self, data: bytes) -> Any:
        idx = self._SyncObj__raftLastApplied + 1  # pysyncobj applies in order
        self.applied[idx] = data
        self.net.applied(self.address, idx, data)
        return idx

    def node(self, address: str) -> Any:
        return self._SyncObj__transport._nodeAddrToNode[address]


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    kind: str = field(compare=False)
    dst: str = field(compare=False)
    payload: Any = field(compare=False)


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    committed: int = 0
    acked: int = 0
    elections: int = 0
    crashes: int = 0
    installs: int = 0  # snapshots received from a leader and loaded


class Net:
    """The simulated network, clock and fault schedule of one run."""

    def __init__(
        self, seed: int, nodes: int, base: str, compact_every: int = 40, inline_share: float = 0.0
    ) -> None:
        self.rng = random.Random(seed)
        self.compact_every = compact_every
        self.inline_share = inline_share  # syncs run inline (SimSyncer)
        self.clock = SimClock()
        self.base = base
        self.addresses = [f"127.0.0.1:{30000 + i}" for i in range(nodes)]
        self.groups: dict[str, SimGroup] = {}
        self.cut: set[tuple[str, str]] = set()  # directed links that drop everything
        # Directed links that swallow every byte without breaking the
        # connection (Toxiproxy's timeout toxic): nobody is told.
        self.silent: set[tuple[str, str]] = set()
        self.slow: dict[tuple[str, str], float] = {}  # extra latency per directed link
        self.paused: dict[str, float] = {}  # address -> until
        self.link_free: dict[tuple[str, str], float] = {}  # FIFO: last delivery time
        self.events: list[_Event] = []
        self.seq = 0
        self.epoch: dict[tuple[str, str], int] = {}  # bumps when a link breaks
        self.woken: set[str] = set()
        self.report = Report()
        self.truth: dict[int, bytes] = {}  # log index -> command applied there
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.next_cmd = 0

    # ---- network -------------------------------------------------------------------
    def linked(self, a: str, b: str) -> bool:
        return (
            a in self.groups
            and b in self.groups
            and (a, b) not in self.cut
            and (b, a) not in self.cut
        )

    def send(self, src: str, dst: str, message: Any) -> bool:
        if not self.linked(src, dst):
            return False
        data = codec.encode(message)  # the real wire encoding, both ways
        key = (src, dst)
        if key in self.silent:
            return True
        delay = self.rng.uniform(0.0001, 0.002) + self.slow.get(key, 0.0)
        at = max(self.clock.now + delay, self.link_free.get(key, 0.0))
        self.link_free[key] = at
        self.schedule_at(at, "msg", dst, (src, self.epoch.get(key, 0), data))
        return True

    def schedule(self, delay: float, kind: str, dst: str, payload: Any) -> None:
        self.schedule_at(self.clock.now + delay, kind, dst, payload)

    def schedule_at(self, at: float, kind: str, dst: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, _Event(at, self.seq, kind, dst, payload))

    def break_link(self, a: str, b: str) -> None:
        """The TCP connection between a and b breaks: in flight is lost, both
        ends see the disconnect."""
        for key in ((a, b), (b, a)):
            self.epoch[key] = self.epoch.get(key, 0) + 1
            self.link_free.pop(key, None)
        for x, y in ((a, b), (b, a)):
            g = self.groups.get(x)
            if g is not None and y in g._SyncObj__transport._nodeAddrToNode:
                g._SyncObj__onNodeDisconnected(g.node(y))

    def join_link(self, a: str, b: str) -> None:
        if not self.linked(a, b):
            return
        for x, y in ((a, b), (b, a)):
            g = self.groups[x]
            g._SyncObj__onNodeConnected(g.node(y))

    def wake(self, address: str) -> None:
        self.woken.add(address)

    def flush(self, address: str) -> None:
        self.woken.add(address)

    # ---- the state machine check ----------------------------------------------------
    def applied(self, address: str, idx: int, data: bytes, installed: bool = False) -> None:
        seen = self.truth.get(idx)
        if seen is None:
            self.truth[idx] = data
            self.report.committed += 1
        elif seen != data:
            self.report.violations.append(
                f"t={self.clock.now:.3f} {address} applied {data!r} at {idx}, "
                f"another replica applied {seen!r} there"
            )
        want = self.acked.get(data)
        if want is not None and want[0] != idx and not installed:
            self.report.violations.append(
                f"t={self.clock.now:.3f} {address} applied acked {data!r} at {idx}, "
                f"acked at {want[0]}"
            )

    def _acked(self, data: bytes, result: Any, error: Any) -> None:
        if error == 0 and result is not None:  # FAIL_REASON.SUCCESS
            self.report.acked += 1
            self.acked[data] = (result, 0)
            seen = self.truth.get(result)
            if seen is not None and seen != data:
                self.report.violations.append(f"{data!r} acked at {result}, which holds {seen!r}")

    # ---- nodes ---------------------------------------------------------------------
    def start(self, address: str) -> None:
        path = os.path.join(self.base, address.replace(":", "_"))
        os.makedirs(path, exist_ok=True)
        peers = [a for a in self.addresses if a != address]
        self.groups[address] = SimGroup(self, address, peers, path)
        for other in peers:
            self.join_link(address, other)

    def crash(self, address: str) -> None:
        g = self.groups.pop(address, None)
        if g is None:
            return
        self.report.crashes += 1
        g._closed = True
        g._SyncObj__raftLog._destroy()
        for other in self.addresses:
            if other != address:
                self.break_link(address, other)
        self.paused.pop(address, None)

    def propose(self) -> None:
        live = [a for a in self.groups if a not in self.paused]
        if not live:
            return
        g = self.groups[self.rng.choice(live)]
        self.next_cmd += 1
        data = b"c%d" % self.next_cmd
        g.propose(data, lambda res, err, d=data: self._acked(d, res, err))
        self.woken.add(g.address)

    # ---- the run ---------------------------------------------------------------------
    def step(self) -> None:
        self.clock.now += self.rng.uniform(0.0005, 0.003)
        now = self.clock.now
        for address, until in list(self.paused.items()):
            if until <= now:
                del self.paused[address]
        while self.events and self.events[0].at <= now:
            ev = heapq.heappop(self.events)
            g = self.groups.get(ev.dst)
            if g is None:
                continue
            if ev.dst in self.paused:  # read later, in order
                self.schedule_at(self.paused[ev.dst], ev.kind, ev.dst, ev.payload)
                continue
            if ev.kind == "sync":
                job, done = ev.payload
                if done.__self__ is not g:  # a sync of a crashed incarnation
                    continue
                job.run()
                done(job)
            else:
                src, epoch, data = ev.payload
                if epoch != self.epoch.get((src, ev.dst), 0) or not self.linked(src, ev.dst):
                    continue
                g._SyncObj__onMessageReceived(g.node(src), codec.decode(data))
                g.flush_durable()
        for address, g in list(self.groups.items()):
            if address in self.paused:
                continue
            due = address in self.woken or self.rng.random() < 0.3
            if due:
                self.woken.discard(address)
                g._onTick(0.0)
                if g._SyncObj__raftState == 2 and g._seen_term != g._SyncObj__raftCurrentTerm:
                    g._seen_term = g._SyncObj__raftCurrentTerm
                    self.report.elections += 1

    def fault(self) -> None:
        rng, addrs = self.rng, self.addresses
        roll = rng.random()
        if roll < 0.25:  # cut a random set of links (a partition, maybe one-way)
            a, b = rng.sample(addrs, 2)
            keys = ((a, b), (b, a)) if rng.random() < 0.8 else ((a, b),)
            if rng.random() < 0.5:  # bytes swallowed, connections stay up
                self.silent.update(keys)
            else:
                self.cut.update(keys)
                self.break_link(a, b)
        elif roll < 0.45:  # heal everything (a swallowing link is closed, then re-dialed)
            cut, self.cut = self.cut | self.silent, set()
            for a, b in self.silent:
                self.break_link(a, b)
            self.silent = set()
            for a, b in cut:
                self.join_link(a, b)
            self.slow.clear()
        elif roll < 0.6:  # crash a node (and maybe another)
            self.crash(rng.choice(addrs))
        elif roll < 0.75:  # restart every crashed node
            for a in addrs:
                if a not in self.groups:
                    self.start(a)
        elif roll < 0.88:  # pause a node
            a = rng.choice(addrs)
            self.paused[a] = self.clock.now + rng.uniform(0.05, 0.8)
        else:  # a slow link (messages queue behind each other)
            a, b = rng.sample(addrs, 2)
            self.slow[(a, b)] = rng.uniform(0.01, 0.5)


def run(seed: int, steps: int = 20000, nodes: int = 3, inline_share: float = 0.0) -> Report:
    """One seeded run; the report's ``violations`` are safety failures.
    ``inline_share``: the share of syncs run inline (SimSyncer), leaders' too."""
    with tempfile.TemporaryDirectory(prefix="raftsim-") as base:
        random.seed(seed)  # pysyncobj's election timeouts and pre-vote's jitter
        net = Net(seed, nodes, base, inline_share=inline_share)
        with simulated_clock(net.clock):
            for a in net.addresses:
                net.start(a)
            for i in range(steps):
                net.step()
                if net.rng.random() < 0.3:
                    net.propose()
                if i % 100 == 0 and net.rng.random() < 0.6:
                    net.fault()
                if net.report.violations:
                    break
            for a in list(net.groups):
                net.crash(a)
        return net.report
