"""ManagedClient: the SDK for queues the external cluster manager maps
(docs/operations.md "Two levels of manager").

It bootstraps from the manager (``manager="h:p,..."``), learns the versioned
mapping (GetMapping), caches it, and sends every call straight to the right
cluster through one ordinary ``Client`` per cluster (which finds that
cluster's partition leaders itself). A queue may span clusters: global
partition ``i`` is partition ``local`` of the queue of the same name on
``cluster`` (manager/state.py ``PartitionHome``).

- Placement of a message over the GLOBAL partitions is the one rule of
  ``calls._prepare``: the explicit ``partition``, else the hash of ``key``,
  else of ``dedup_id``, else round robin. So a FIFO key always lands on the
  same partition (hence the same cluster).
- A batch is split by cluster and the shares are sent in parallel. As with
  ``Client.send_batch``, if one share fails the others may be stored: give
  messages dedup ids to re-send without duplicates.
- Results and messages carry GLOBAL partition numbers; a receipt is prefixed
  with its cluster (``c1@<receipt>``), so ack/nack/change_visibility find
  their way back without a lookup.
- Receive visits the queue's clusters in turn (a rotating start); with
  ``wait_ms`` it long-polls them in short slices until the deadline.
- A NotFound from a cluster (the mapping moved on, or was forgotten) refreshes
  the mapping once and retries; nodes never forward to another cluster (a
  plain ``Client`` follows a node's redirect here: client/redirect.py).
- After a move of only some partitions (``pinned`` in the mapping), the
  source's queue keeps the moved partitions, fenced: bare bodies are then
  pinned to their local partition too. The source keeps serving the rest,
  so a receive learns of such a cut-over by asking the manager (on a thread
  of its own, never waiting for it) whether the mapping moved on once its
  copy is ``MAPPING_MAX_AGE_S`` old.
- A queue whole on one cluster (global ``i`` = local ``i`` there, no partial
  move's leftovers: core/managed_homes.py) is handed to that cluster's
  ``Client``: it places messages (its key partitioner follows the key ranges
  of a split, client/partitioner.py) and numbers partitions, a split's
  children included, so global numbers are that cluster's. A split inside
  the cluster (``update_queue(Q, partitions=N)``, which the manager
  forwards, or one made on the cluster directly) is followed at once, and a
  FIFO key's messages in a child wait for the parent's (the cluster's gate).
  Receipts keep their cluster prefix. A queue spanning clusters is not split
  (the manager refuses it, naming ``partitions``).
- A queue being moved to another cluster (manager/moves.py) is fenced on its
  source: a send there is refused (PartitionSealed, nothing stored) and a
  receive finds nothing. A send then refreshes the mapping and waits, in
  ``FENCE_POLL_S`` steps up to the client's ``timeout_s``, for the cut-over
  to name the new cluster, and sends there; a receive refreshes the mapping
  and answers what the other clusters had. Acks of receipts from the source
  still go to the source (it keeps the fenced queue).

Thread-safe as ``Client`` is; the mapping cache is swapped whole.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from raft_queue import errors
from raft_queue.client.client import Client
from raft_queue.client.credentials import resolve_token
from raft_queue.client.managed_mapping import Home, Mapping_, MappingCache
from raft_queue.client.manager_admin import ManagerAdmin
from raft_queue.client.models import (
    Message,
    OutgoingMessage,
    PartitionInfo,
    QueueInfo,
    ReadResult,
    ReceiptResult,
    SendResult,
)
from raft_queue.client.partitioner import RoundRobin, partition_for_key
from raft_queue.core.managed_homes import sole_cluster

T = TypeVar("T")
Receipts = str | Message | Iterable[str | Message]
RECEIPT_SEP = "@"  # cluster names never hold it (config.check_name)
POLL_SLICE_MS = 200  # a long poll over several clusters waits this long on each in turn
SEND_THREADS = 8  # a batch's shares for different clusters are sent in parallel
TLS_ARGUMENTS = ("tls", "ca_file", "cert_file", "key_file")  # to the manager too
FENCE_POLL_S = 0.1  # a send to a queue fenced for a move asks for the new mapping this often


class ManagedClient:
    """``manager``: the manager's gRPC addresses. ``token``: the bearer token for
    the manager and, unless ``cluster_tokens`` names one, for every cluster.
    Other keyword arguments go to each cluster's ``Client``; the TLS ones
    (``tls``, ``ca_file``, ``cert_file``, ``key_file``) to the manager's
    channels too (one CA for the fleet)."""

    def __init__(
        self,
        manager: str | Sequence[str],
        token: str | None = None,
        cluster_tokens: Mapping[str, str] | None = None,
        timeout_s: float = 10.0,
        **client_kwargs: Any,
    ) -> None:
        self._token = resolve_token(token)
        tls = {k: client_kwargs[k] for k in TLS_ARGUMENTS if k in client_kwargs}
        self.manager = ManagerAdmin(manager, token=self._token or "", timeout_s=timeout_s, **tls)
        kwargs = {"timeout_s": timeout_s, **client_kwargs}
        self._map = MappingCache(self.manager, self._token, cluster_tokens or {}, kwargs)
        self._fence_wait_s = timeout_s
        self._lock = threading.Lock()
        self._round_robin = RoundRobin()
        self._turn = 0
        self._executor: ThreadPoolExecutor | None = None  # sends to several clusters at once

    # ---- the mapping -----------------------------------------------------------------------
    def refresh(self) -> int:
        """Fetch the mapping if it changed; its version."""
        return self._map.refresh()

    @property
    def _mapping(self) -> Mapping_:
        return self._map.current

    @property
    def mapping_version(self) -> int:
        return self._map.current.version

    def homes(self, queue: str) -> tuple[Home, ...]:
        """The queue's partitions (index = global partition), refreshing once if unknown."""
        return self._map.homes(queue)

    def client_for(self, cluster: str) -> Client:
        return self._map.client_for(cluster)

    def _routed(self, queue: str, fn: Any) -> Any:
        """``fn(homes)``; on NotFound, refresh the mapping once and retry; on
        PartitionSealed (the queue is fenced for a move), refresh the mapping
        until it changes (the cut-over), for up to ``timeout_s``."""
        deadline = time.monotonic() + self._fence_wait_s
        while True:
            try:
                return fn(self.homes(queue))
            except errors.NotFound:
                before = self._mapping.version
                if self.refresh() == before:
                    raise
                return fn(self.homes(queue))
            except errors.PartitionSealed:
                before = self._mapping.version
                if self.refresh() != before:
                    continue
                if time.monotonic() >= deadline:
                    raise
                time.sleep(FENCE_POLL_S)

    # ---- queues --------------------------------------------------------------------------------
    def create_queue(
        self, name: str, partitions: int = 1, clusters: Sequence[str] = (), **config: Any
    ) -> QueueInfo:
        """Create ``name`` through the manager: on the least-loaded healthy cluster,
        or spread over ``clusters`` (``homes(name)`` says where each partition went)."""
        self.manager.create_queue(name, partitions, clusters, **config)
        self.refresh()
        return self.get_queue(name)

    def update_queue(self, name: str, **config: Any) -> QueueInfo:
        """Change the given config fields through the manager (on every cluster
        of the queue); ``partitions`` grows a queue whole on one cluster by
        splits there (refused for one spanning clusters)."""
        self.manager.update_queue(name, **config)
        self.refresh()
        return self.get_queue(name)

    def sole_cluster(self, queue: str, homes: tuple[Home, ...]) -> str | None:
        """The cluster ``queue`` is whole on (its ``Client`` then places and
        numbers everything), or None."""
        return sole_cluster(homes, queue in self._mapping.pinned)

    def get_queue(self, name: str) -> QueueInfo:
        """The global config, depth counters summed over the queue's clusters."""

        def run(homes: tuple[Home, ...]) -> QueueInfo:
            whole = self.sole_cluster(name, homes)
            if whole is not None:  # that cluster's own answer (a split's counts too)
                return self.client_for(whole).get_queue(name)
            infos = [self.client_for(c).get_queue(name) for c in _clusters(homes)]
            sums = {f: sum(getattr(i, f) for i in infos)
                    for f in ("messages", "in_flight", "delayed", "dead", "bytes")}  # fmt: skip
            oldest = max(i.oldest_message_age_ms for i in infos)
            config = self._mapping.configs.get(name, infos[0].config)
            return QueueInfo(name, config, infos[0].created_ms, oldest_message_age_ms=oldest,
                             **sums)  # fmt: skip

        return self._routed(name, run)  # type: ignore[no-any-return]

    def partitions(self, queue: str) -> list[PartitionInfo]:
        """Every global partition (its number), as its cluster describes it."""

        def run(homes: tuple[Home, ...]) -> list[PartitionInfo]:
            whole = self.sole_cluster(queue, homes)
            if whole is not None:  # a split's children and states too
                return self.client_for(whole).partitions(queue)
            local = {c: {p.partition: p for p in self.client_for(c).partitions(queue)}
                     for c in _clusters(homes)}  # fmt: skip
            return [dataclasses.replace(local[h.cluster][h.local], partition=g)
                    for g, h in enumerate(homes)]  # fmt: skip

        return self._routed(queue, run)  # type: ignore[no-any-return]

    # ---- send ----------------------------------------------------------------------------------
    def send(self, queue: str, body: bytes | str, key: str = "", **fields: Any) -> SendResult:
        return self.send_batch(queue, [OutgoingMessage(body, key, **fields)])[0]

    def send_batch(
        self, queue: str, messages: Iterable[OutgoingMessage | bytes | str], create: bool = False
    ) -> list[SendResult]:
        """As ``Client.send_batch``, over the global partitions. ``create`` is
        refused: queues are created through the manager (``create_queue``)."""
        if create:
            raise errors.InvalidArgument("create", "create managed queues with create_queue")
        pending = list(messages)

        def run(homes: tuple[Home, ...]) -> list[SendResult]:
            whole = self.sole_cluster(queue, homes)
            if whole is not None:  # its Client places keys by the key ranges
                return self.client_for(whole).send_batch(queue, pending)
            # A bare body only picks its cluster here (round robin over the global
            # partitions, so each cluster gets its share); that cluster's Client
            # picks the local partition, on its fast path for bare bodies (a
            # per-message OutgoingMessage halved W2's rate).
            placed = [self._place(queue, len(homes), m) for m in pending]
            back = {(h.cluster, h.local): g for g, h in enumerate(homes)}
            results: list[SendResult | None] = [None] * len(pending)
            groups: list[tuple[str, list[int]]] = []
            for cluster in _clusters(homes):
                idx = [i for i, g in enumerate(placed) if homes[g].cluster == cluster]
                if idx:
                    groups.append((cluster, idx))

            pin = queue in self._mapping.pinned

            def send(cluster: str, idx: list[int]) -> None:
                local = [_localized(pending[i], homes[placed[i]].local, pin) for i in idx]
                got = self.client_for(cluster).send_batch(queue, local)
                for i, r in zip(idx, got, strict=True):
                    results[i] = dataclasses.replace(r, partition=back[(cluster, r.partition)])

            if len(groups) == 1:
                send(*groups[0])
            else:  # the clusters' shares in parallel; the first error is raised
                for f in [self._pool().submit(send, c, idx) for c, idx in groups]:
                    f.result()
            return [r for r in results if r is not None]

        return self._routed(queue, run)  # type: ignore[no-any-return]

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(SEND_THREADS, "managed-send")
            return self._executor

    def _place(self, queue: str, count: int, m: OutgoingMessage | bytes | str) -> int:
        if not isinstance(m, OutgoingMessage):
            return self._round_robin.next(queue, count) if count > 1 else 0
        if m.partition is not None:
            if not 0 <= m.partition < count:
                raise errors.InvalidArgument("partition", f"must be in [0, {count})")
            return m.partition
        if m.key:
            return partition_for_key(m.key, count)
        if m.dedup_id:
            return partition_for_key(m.dedup_id, count)
        return self._round_robin.next(queue, count) if count > 1 else 0

    # ---- receive and receipts -------------------------------------------------------------
    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        visibility_ms: int | None = None,
        wait_ms: int = 0,
        consumer: str = "",
    ) -> list[Message]:
        def run(homes: tuple[Home, ...]) -> list[Message]:
            clusters = _clusters(homes)
            back = {(h.cluster, h.local): g for g, h in enumerate(homes)}
            self._turn += 1
            order = clusters[self._turn % len(clusters) :] + clusters[: self._turn % len(clusters)]
            deadline = time.monotonic() + wait_ms / 1000
            waits = [0] if len(order) > 1 or not wait_ms else [wait_ms]
            fenced: set[str] = set()  # clusters refusing: the queue is moving away
            while True:
                for wait in waits:
                    for cluster in order:
                        if cluster in fenced:
                            continue
                        try:
                            got = self.client_for(cluster).receive(
                                queue, max_messages, visibility_ms, wait, consumer
                            )
                        except errors.PartitionSealed:
                            fenced.add(cluster)
                            continue
                        if got:
                            return [_global(m, cluster, back) for m in got]
                if fenced:  # a move's fence: has the cut-over happened?
                    self.refresh()
                    if self._mapping.queues.get(queue) != homes:
                        return run(self.homes(queue))
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0 or len(order) == 1 or len(fenced) == len(order):
                    if fenced and left_ms > 0:  # wait out the poll, as an empty queue would
                        time.sleep(min(left_ms, POLL_SLICE_MS) / 1000)
                    return []
                waits = [min(left_ms // len(order) + 1, POLL_SLICE_MS)]

        # a partial move's cut-over raises nothing at the source: ask now and then
        self._map.refresh_if_old(self.refresh)
        return self._routed(queue, run)  # type: ignore[no-any-return]

    def ack(self, queue: str, receipts: Receipts) -> list[ReceiptResult]:
        return self._settle(queue, receipts, lambda c, r: c.ack(queue, r))

    def nack(
        self, queue: str, receipts: Receipts, delay_ms: int = 0, release: bool = False
    ) -> list[ReceiptResult]:
        return self._settle(queue, receipts, lambda c, r: c.nack(queue, r, delay_ms, release))

    def change_visibility(
        self, queue: str, receipts: Receipts, visibility_ms: int
    ) -> list[ReceiptResult]:
        return self._settle(
            queue, receipts, lambda c, r: c.change_visibility(queue, r, visibility_ms)
        )

    def _settle(self, queue: str, given: Receipts, fn: Any) -> list[ReceiptResult]:
        """Group receipts by their cluster prefix; results in the order given."""
        items = [given] if isinstance(given, str | Message) else list(given)
        receipts = [r.receipt if isinstance(r, Message) else r for r in items]
        self.homes(queue)  # the mapping knows its clusters
        out: list[ReceiptResult | None] = [None] * len(receipts)
        by_cluster: dict[str, list[int]] = {}
        for i, receipt in enumerate(receipts):
            cluster, sep, _ = receipt.partition(RECEIPT_SEP)
            if not sep:
                raise errors.InvalidArgument(f"receipts[{i}]", "not a receipt of ManagedClient")
            by_cluster.setdefault(cluster, []).append(i)
        for cluster, idx in by_cluster.items():
            inner = [receipts[i].partition(RECEIPT_SEP)[2] for i in idx]
            for i, r in zip(idx, fn(self.client_for(cluster), inner), strict=True):
                out[i] = dataclasses.replace(r, receipt=receipts[i])
        return [r for r in out if r is not None]

    # ---- offset reads ----------------------------------------------------------------------------
    def read(
        self, queue: str, partition: int, offset: int = 0, max_messages: int = 100, **kw: Any
    ) -> ReadResult:
        def run(homes: tuple[Home, ...]) -> ReadResult:
            whole = self.sole_cluster(queue, homes)
            if whole is not None and partition >= len(homes):  # a split's child
                homes = (*homes, *(Home(whole, p) for p in range(len(homes), partition + 1)))
            if not 0 <= partition < len(homes):
                raise errors.InvalidArgument("partition", f"must be in [0, {len(homes)})")
            home = homes[partition]
            got = self.client_for(home.cluster).read(queue, home.local, offset, max_messages, **kw)
            back = {(home.cluster, home.local): partition}
            msgs = [_global(m, home.cluster, back, receipt=False) for m in got.messages]
            return dataclasses.replace(got, messages=msgs)

        return self._routed(queue, run)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        """What the manager does not route (history, offsets of groups, admin
        calls): say so, instead of an AttributeError."""
        if name.startswith("_"):
            raise AttributeError(name)
        raise errors.FailedPrecondition(
            f"{name} is not routed through the manager: call the cluster directly "
            "(client_for(cluster), raftq --server)"
        )

    def close(self) -> None:
        self._map.close()
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=False)
                self._executor = None
        self.manager.close()

    def __enter__(self) -> ManagedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _localized(
    m: OutgoingMessage | bytes | str, local: int, pin: bool = False
) -> OutgoingMessage | bytes | str:
    """``m`` for its cluster: an OutgoingMessage pinned to its local partition,
    a bare body as it is (that cluster's round robin places it), unless
    ``pin``: the cluster's queue has partitions the mapping does not name
    (a partial move's fenced leftovers), so it is pinned too."""
    if isinstance(m, OutgoingMessage):
        return dataclasses.replace(m, partition=local)
    return OutgoingMessage(m, partition=local) if pin else m


def _clusters(homes: tuple[Home, ...]) -> list[str]:
    return list(dict.fromkeys(h.cluster for h in homes))


def _global(
    m: Message, cluster: str, back: dict[tuple[str, int], int], receipt: bool = True
) -> Message:
    """A cluster's message with its global partition and a cluster-prefixed receipt."""
    partition = back.get((cluster, m.partition), m.partition)
    tagged = f"{cluster}{RECEIPT_SEP}{m.receipt}" if receipt and m.receipt else m.receipt
    return dataclasses.replace(m, partition=partition, receipt=tagged)
