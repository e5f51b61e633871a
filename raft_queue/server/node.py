"""The node: one process hosting a metadata voter and partition replicas.

Owns the RaftHost (driver thread), the metadata replica, the local partition
replicas and the reconciler that makes the set of local replicas match the
metadata assignments. gRPC servicers (``queue_service``, ``admin_service``,
``node_service``) call into it from the asyncio thread.

Thread contract: replicas are created and closed on the driver thread
(``host.call``); ``view`` (a read-only copy of the metadata state) is replaced
atomically after every metadata change, so request handlers never read state
that the driver thread is mutating.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any

from raft_queue import errors
from raft_queue.config import NodeConfig
from raft_queue.core import metadata as meta
from raft_queue.core.commands import Configure
from raft_queue.observability import metrics
from raft_queue.replication import wire
from raft_queue.replication.host import RaftHost
from raft_queue.replication.metadata import MetadataReplica
from raft_queue.replication.partition import PartitionReplica
from raft_queue.replication.raft import check_version
from raft_queue.security.secret import RAFT_LINK, derive_key
from raft_queue.server.api.convert import partition_config
from raft_queue.server.control.controllers import load_role
from raft_queue.server.control.disk import DiskHealth
from raft_queue.server.control.metadata_barrier import view_miss
from raft_queue.server.dataplane.bounds import bound_replica
from raft_queue.server.dataplane.wakeups import Wakeups

log = logging.getLogger(__name__)

PREFER_AFTER_S = 3.0  # a leader keeps leading this long before handing over
PREFER_RETRY_S = 5.0
OPEN_TIMEOUT_S = 30.0  # reconcile waits this long for a replica to open, per round
# Reconcile runs at once on every metadata change, else this often (leader
# preference, Configure on new leaders, retries). Each round visits every
# replica: at 0.2 s it cost ~2 % of a core at 256 replicas.
RESCAN_S = 1.0
# Right after a start the view may be the metadata snapshot only (a voter
# learns the commit index from a leader: server/control/metadata_barrier.py).
# A replica opened from it gets the peers of an assignment a move has since
# changed, and is never re-peered: opened before the move's membership
# entries are known to be committed, it dialled none of its group's current
# members and waited for ever (tests/integration/test_operations_grow.py,
# once in a fresh-clone run). So the first reconcile waits until the view is
# vouched for, this long at most (then it opens from the view it has, as
# before: a metadata outage must not keep the data plane closed).
FIRST_OPEN_WAIT_S = 30.0


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    queue: str
    uid: int
    partition: int

    @property
    def name(self) -> str:
        return f"{self.queue}.{self.uid}.{self.partition}"


# The replicas a view assigns to this node: key -> (own Raft address, peers).
Wanted = dict[ReplicaKey, tuple[str, list[str]]]


class Node:
    def __init__(
        self,
        config: NodeConfig,
        dial: Callable[[str], str | None] = lambda a: None,
        secret: bytes | None = None,
    ) -> None:
        check_version()
        self.config = config
        # The cluster secret (security/secret.py); None only with security.insecure.
        self.secret = secret
        # Encryption at rest (security/keyring.py; server/main.py sets it): None = off.
        self.key_provider: Any = None
        # Raft links prove the secret and seal frames with this (wire.py).
        self.raft_link_key = derive_key(secret, RAFT_LINK) if secret is not None else None
        wire.set_max_request_bytes(config.limits.max_request_bytes)
        self.id = config.node_id
        self.address = config.advertise_address or f"{config.grpc_host}:{config.grpc_port}"
        self._dial = dial
        tuning = config.raft
        self.election_s = (tuning.election_timeout_min_s, tuning.election_timeout_max_s)
        self.host = RaftHost(
            idle_tick_s=tuning.tick_period_s,
            heartbeat_s=tuning.heartbeat_period_s if tuning.coalesce_heartbeats else None,
        )
        self.controllers = _parse_controllers(config.controllers)
        self.view = meta.MetadataMachine()
        self.metadata: MetadataReplica | None = None
        self.metadata_joining = False  # a new voter's replica, not caught up yet
        self.metadata_leader_hint = ""  # non-voters: the leader's gRPC address, polled
        self.replicas: dict[ReplicaKey, PartitionReplica] = {}
        self.configured: dict[ReplicaKey, Any] = {}  # spec last submitted as Configure
        self._keys: dict[str, ReplicaKey] = {}  # replica.key -> its ReplicaKey
        self._opening: dict[ReplicaKey, Future[PartitionReplica]] = {}  # slow opens
        self._leader_since: dict[ReplicaKey, float] = {}
        self._wanted: tuple[Any, Wanted] = (None, {})
        self._changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.wakeups: Wakeups
        self.started_at = time.monotonic()
        # Free-space watermark and fail-stopped replicas (server/control/disk.py).
        self.disk = DiskHealth(self.id, config.data_dir, config.storage)

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.wakeups = Wakeups(loop)
        self.host.start()
        # The role recorded by the last controller change (server/control/controllers.py)
        # wins over the config, whose controller list only bootstraps the group.
        role = load_role(self.config, self.controllers)
        self.controllers = role.peers
        if role.voter:
            me = self.controllers.get(self.id) or (
                f"{self.config.raft_host}:{self.config.metadata_raft_port}"
            )
            peers = [a for nid, a in self.controllers.items() if nid != self.id]
            self.metadata = self.host.call(lambda: self._open_metadata(me, peers)).result(30)

    def _open_metadata(self, me: str, peers: list[str]) -> MetadataReplica:
        replica = MetadataReplica(
            self.host,
            me,
            peers,
            os.path.join(self.config.data_dir, "metadata"),
            election_timeout_s=self.election_s,
            heartbeat_s=self.config.raft.heartbeat_period_s,
            dial=self._dial,
            on_change=self._on_metadata_change,
            bind_host=self.config.raft_host,
            link_key=self.raft_link_key,
        )
        replica.on_failed = self.disk.replica_failed
        replica.pre_vote = self.config.raft.pre_vote  # replication/prevote.py
        # Assigned before the host drives it: replay may apply committed entries
        # (and call _on_metadata_change) before start() gets the return value.
        self.metadata = replica
        replica.set_probe(metrics.probe_for(metrics.METADATA_QUEUE, 0))
        self.host.add(replica)
        self._on_metadata_change()  # publish whatever is already applied
        return replica

    async def join_metadata(self, me: str, peers: list[str]) -> None:
        """Open an empty metadata replica (this node is being added as a voter);
        its view is published once it caught up with the polled one."""
        self.metadata_joining = True
        await _await(self.host.call(lambda: self._open_metadata(me, peers)))

    async def leave_metadata(self) -> None:
        """Close and delete this node's metadata replica (it was removed as a
        voter); from now on the node polls a voter's copy."""
        replica = self.metadata
        if replica is None:
            return
        await _await(self.host.call(lambda: self.host.remove(replica.key)))
        self.metadata = None
        self.metadata_joining = False
        shutil.rmtree(os.path.join(self.config.data_dir, "metadata"), ignore_errors=True)

    def stop(self) -> None:
        self.host.stop()
        self.replicas.clear()

    def _on_metadata_change(self) -> None:
        """Driver thread: publish a read-only copy and wake the reconciler. A
        joining replica's older states are not published (the view only grows)."""
        assert self.metadata is not None
        if self.metadata.machine.version == self.view.version and not self.metadata_joining:
            return  # e.g. a usage batch: no view change, no copy (usage is read live)
        view = meta.MetadataMachine.from_bytes(self.metadata.machine.to_bytes())
        if view.version < self.view.version:
            return
        self.metadata_joining = False
        self._publish(view)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._changed.set)

    def adopt_view(self, view: meta.MetadataMachine) -> None:
        """A non-voter's new metadata copy (asyncio thread; metadata_follower.py)."""
        self._publish(view)
        self._changed.set()

    def _publish(self, view: meta.MetadataMachine) -> None:
        self.view = view
        if self.host.heartbeats is not None:
            # Which node hosts each Raft address: heartbeats are coalesced per node.
            peers = self.raft_address_to_node()
            peers.update({a: nid for nid, a in self.controller_addresses().items()})
            self.host.heartbeats.set_peers(peers)

    # ---- metadata ------------------------------------------------------------------------
    def metadata_leader_id(self) -> str | None:
        if self.metadata is None:
            hint = self.metadata_leader_hint
            return next((n.node_id for n in self.view.nodes().values() if n.address == hint), None)
        leader = self.metadata.leader_address()
        for nid, addr in self.controller_addresses().items():
            if addr == leader:
                return nid
        return None

    def metadata_leader_ready(self) -> bool:
        """This node leads the metadata group and its view holds every change
        committed so far (its own term's first entry applied, Raft section 8)."""
        md = self.metadata
        return md is not None and md.is_leader() and md.can_serve_leader_reads()

    def controller_addresses(self) -> dict[str, str]:
        """Every voter this node knows of (node id -> metadata Raft address):
        recorded, remembered and joining (a joining voter may already lead)."""
        out = {**self.controllers, **self.view.controllers()}
        change = self.view.controller_change()
        if change is not None and change.action == "add":
            out[change.node_id] = change.raft_address
        return out

    def node_address(self, node_id: str) -> str | None:
        if node_id == self.id:
            return self.address
        node = self.view.nodes().get(node_id)
        return node.address if node is not None else None

    async def submit_metadata(self, cmd: Any, timeout_s: float = 10.0) -> Any:
        """Submit to the local metadata replica; NotLeader when it is not leader."""
        if self.metadata is None or not self.metadata.is_leader():
            raise errors.NotLeader("not the metadata leader", self.metadata_leader_address())
        return await _await(self.metadata.submit(cmd, timeout_s))

    def metadata_leader_address(self) -> str:
        if self.metadata is None:
            return self.metadata_leader_hint
        nid = self.metadata_leader_id()
        return (self.node_address(nid) or "") if nid else ""

    # ---- partitions ------------------------------------------------------------------------
    def queue_spec(self, name: str) -> Any:
        queue = self.view.queue(name)
        if queue is None:  # may be behind: vouched for before it is answered
            miss = errors.NotFound(f"queue {name!r} does not exist")
            miss.queue = name  # a managed cluster redirects it (control/redirects.py)
            raise view_miss(miss, lambda: self.view.queue(name) is not None)
        return queue

    def replica(self, queue: str, partition: int) -> PartitionReplica | None:
        q = self.view.queue(queue)
        if q is None:
            return None
        return self.replicas.get(ReplicaKey(queue, q.uid, partition))

    def raft_address_to_node(self) -> dict[str, str]:
        """Raft address of every replica of every partition -> node id."""
        nodes = self.view.nodes()
        out: dict[str, str] = {}
        for q in self.view.queues():
            for a in self.view.assignments(q.name):
                for r in a.replicas:
                    n = nodes.get(r.node_id)
                    if n is not None:
                        out[f"{n.raft_host}:{r.raft_port}"] = r.node_id
        return out

    async def reconcile_forever(self, vouch: Callable[[], Any] | None = None) -> None:
        """Make local replicas match the assignments; react to every change.
        ``vouch`` (the metadata barrier's): awaited before the first round,
        until it returns or FIRST_OPEN_WAIT_S passed (FIRST_OPEN_WAIT_S's note)."""
        if vouch is not None:
            await self._until_vouched(vouch, FIRST_OPEN_WAIT_S)
        while True:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.reconcile)
            except Exception:
                log.exception("reconcile failed")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=RESCAN_S)

    async def _until_vouched(self, vouch: Callable[[], Any], wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(vouch(), left)  # at most wait_s in all
                return
            except Exception as exc:  # Unavailable (not yet), the leader unreachable, timeout
                log.debug("replicas wait for the metadata view: %s", exc)
            await asyncio.sleep(0.2)
        log.warning(
            "metadata view not vouched for after %.0f s: opening replicas from it as it is", wait_s
        )

    def reconcile(self) -> None:
        wanted = self._wanted_replicas()
        for key, (me, peers) in wanted.items():
            if key not in self.replicas:
                self._adopt_opened(key, me, peers)
        for key in [k for k in self._opening if k not in wanted and self._opening[k].done()]:
            with contextlib.suppress(Exception):  # a failed open has nothing to close
                self.replicas[key] = self._opening[key].result()
            del self._opening[key]
        for key in [k for k in self.replicas if k not in wanted]:
            self.host.call(partial(self.host.remove, key.name)).result(30)
            del self.replicas[key]
            self.configured.pop(key, None)
            self._keys.pop(key.name, None)
            shutil.rmtree(self._replica_dir(key), ignore_errors=True)
        self._configure_leaders()
        self._prefer_leaders()

    def _adopt_opened(self, key: ReplicaKey, me: str, peers: list[str]) -> None:
        """Open ``key`` on the driver thread; a slow open (a busy driver) is left
        running and adopted by a later round, never opened twice."""
        fut = self._opening.get(key)
        if fut is None:
            fut = self.host.call(lambda: self._open_replica(key, me, peers))
            self._opening[key] = fut
        try:
            replica = fut.result(OPEN_TIMEOUT_S)
        except TimeoutError:
            log.warning("opening %s takes over %.0f s; adopting it later", key.name, OPEN_TIMEOUT_S)
            return
        except Exception:
            del self._opening[key]
            raise
        del self._opening[key]
        self.replicas[key] = replica
        self._keys[key.name] = key

    def _prefer_leaders(self) -> None:
        """Hand leadership to each partition's preferred replica (the first),
        so leaders stay spread as placement intended, after failovers too.
        pysyncobj only transfers to a fully caught-up follower; we try at most
        every PREFER_RETRY_S per partition, after PREFER_AFTER_S of stable lead.
        A partition with a move in flight is left alone: the mover decides
        who leads it until the move ends."""
        now = time.monotonic()
        for key, replica in list(self.replicas.items()):
            if not replica.is_leader() or self.view.move(key.queue, key.partition) is not None:
                self._leader_since.pop(key, None)
                continue
            since = self._leader_since.setdefault(key, now)
            if self.disk.is_low(self.id):  # short of space: lead nothing (server/control/disk.py)
                away = self._healthy_peer_address(key)
                if away is not None:
                    self.host.call(partial(replica.transferLeadership, away))
                continue
            target = self._preferred_address(key)
            if target is None or now - since < PREFER_AFTER_S:
                continue
            self._leader_since[key] = now + PREFER_RETRY_S - PREFER_AFTER_S
            self.host.call(partial(replica.transferLeadership, target))

    def _is_preferred(self, key: ReplicaKey) -> bool | None:
        """Whether this node holds the preferred (first) replica of ``key``, for a
        partition as created (epoch 1); None once its replicas changed (a replica
        added by a move or a repair must not campaign early)."""
        for a in self.view.assignments(key.queue):
            if a.partition == key.partition and a.replicas and a.epoch == 1:
                return a.replicas[0].node_id == self.id
        return None

    def _preferred_address(self, key: ReplicaKey) -> str | None:
        for a in self.view.assignments(key.queue):
            if a.partition == key.partition and a.replicas:
                first = a.replicas[0]
                node = self.view.nodes().get(first.node_id)
                if first.node_id == self.id or node is None or self.disk.is_low(first.node_id):
                    return None
                return f"{node.raft_host}:{first.raft_port}"
        return None

    def partition_replicas(self, queue: str, partition: int) -> tuple[Any, ...]:
        """The ReplicaRefs of a partition (its assignment), or ()."""
        for a in self.view.assignments(queue):
            if a.partition == partition:
                return tuple(a.replicas)
        return ()

    def _healthy_peer_address(self, key: ReplicaKey) -> str | None:
        """Raft address of another replica of ``key`` on a node not low on disk."""
        nodes = self.view.nodes()
        for ref in self.partition_replicas(key.queue, key.partition):
            node = nodes.get(ref.node_id)
            if node is None or ref.node_id == self.id or node.state != "alive":
                continue
            if not self.disk.is_low(ref.node_id):
                return f"{node.raft_host}:{ref.raft_port}"
        return None

    def _configure_leaders(self) -> None:
        """Every local leader applies its queue's current config once (the
        Configure command is replicated, so followers and later leaders have it).
        Durability is local to each replica: every replica follows the spec."""
        for key, replica in list(self.replicas.items()):
            q = self.view.queue(key.queue)
            if q is not None and replica.durability != q.spec.durability:
                replica.set_durability(q.spec.durability)
            if q is not None and replica.is_leader():
                self._configure(
                    key, replica, q.spec, q.sealed(key.partition), q.is_fenced(key.partition)
                )

    def ensure_configured(self, replica: PartitionReplica) -> None:
        """Before a command goes to a local leader: if its queue's current
        spec was not yet applied here, queue a Configure first. Commands of
        one group are proposed in submission order, so the command sees the
        spec (a queue created fifo never leases a record as "none")."""
        key = self._keys.get(replica.key)
        q = self.view.queue(key.queue) if key is not None else None
        if key is not None and q is not None and q.uid == key.uid:
            self._configure(
                key, replica, q.spec, q.sealed(key.partition), q.is_fenced(key.partition)
            )

    def _configure(
        self,
        key: ReplicaKey,
        replica: PartitionReplica,
        spec: Any,
        sealed: bool = False,
        fenced: bool = False,
    ) -> None:
        """``sealed``: the partition was split (no Append applies any more);
        ``fenced``: its queue is moving to another cluster (no Append, no Lease)."""
        if self.configured.get(key) == (spec, sealed, fenced):
            return
        self.configured[key] = (spec, sealed, fenced)  # one per spec; undone if it fails
        fut = replica.submit(Configure(partition_config(spec, sealed, fenced)))
        fut.add_done_callback(
            lambda f: None if f.exception() is None else self.configured.pop(key, None)
        )

    def _wanted_replicas(self) -> Wanted:
        """The replicas the current view assigns here: (own address, peers).
        Computed once per view (the view object is replaced on every change)."""
        view = self.view
        if self._wanted[0] is not view:
            self._wanted = (view, self._compute_wanted(view))
        return self._wanted[1]

    def _compute_wanted(self, view: meta.MetadataMachine) -> Wanted:
        nodes = view.nodes()
        wanted: Wanted = {}
        for q in view.queues():
            for a in view.assignments(q.name):
                addrs = {}
                for r in a.replicas:
                    n = nodes.get(r.node_id)
                    if n is not None:
                        addrs[r.node_id] = f"{n.raft_host}:{r.raft_port}"
                if len(addrs) != len(a.replicas):
                    continue
                move = view.move(q.name, a.partition)
                if self.id in addrs:
                    me = addrs.pop(self.id)
                    wanted[ReplicaKey(q.name, q.uid, a.partition)] = (me, list(addrs.values()))
                elif move is not None and move.to.node_id == self.id:
                    # The move's new replica: empty, the current members as peers;
                    # kept while a cancel removes it from the group (until DropMove).
                    host = nodes[self.id].raft_host if self.id in nodes else self.config.raft_host
                    me = f"{host}:{move.to.raft_port}"
                    wanted[ReplicaKey(q.name, q.uid, a.partition)] = (me, list(addrs.values()))
        return wanted

    def _replica_dir(self, key: ReplicaKey) -> str:
        return os.path.join(self.config.data_dir, "partitions", key.name)

    def _open_replica(self, key: ReplicaKey, me: str, peers: list[str]) -> PartitionReplica:
        spec = self.view.queue(key.queue)
        durability = "fsync" if spec is None else spec.spec.durability
        replica = PartitionReplica(
            key.name,
            self.host,
            me,
            peers,
            self._replica_dir(key),
            election_timeout_s=self.election_s,
            heartbeat_s=self.config.raft.heartbeat_period_s,
            dial=self._dial,
            durability=durability,
            log_compaction_min_entries=self.config.raft.log_compaction_min_entries,
            log_compaction_min_time_s=self.config.raft.log_compaction_min_time_s,
            preferred=self._is_preferred(key),
            bind_host=self.config.raft_host,
            link_key=self.raft_link_key,
        )
        replica.on_wake = self.wakeups.hook((key.queue, key.partition))
        bound_replica(replica, self.config)
        replica.set_probe(metrics.probe_for(key.queue, key.partition))
        replica.on_failed = self.disk.replica_failed
        replica.pre_vote = self.config.raft.pre_vote  # replication/prevote.py
        self.host.add(replica)
        return replica


def _parse_controllers(entries: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        nid, _, addr = entry.partition("=")
        out[nid.strip()] = addr.strip()
    return out


async def _await(fut: Future[Any]) -> Any:
    return await asyncio.wrap_future(fut)
