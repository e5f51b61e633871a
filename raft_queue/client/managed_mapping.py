"""ManagedClient's copy of the manager's mapping, and its per-cluster Clients.

``MappingCache`` fetches the versioned mapping (GetMapping with the known
version: "unchanged", or the new mapping), swaps it whole (readers never see
half of one), refreshes it behind a receive on a thread of its own (a
manager down must not stop the clusters' data plane), and keeps one plain
``Client`` per cluster, made again when the cluster's bootstrap addresses
change. The routing decisions themselves stay in client/managed.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from raft_queue import errors
from raft_queue.client.client import Client
from raft_queue.client.manager_admin import ManagerAdmin
from raft_queue.client.models import config_from_pb

# A receive asks the manager whether the mapping moved on when its copy is
# older than this: a partial move's source keeps serving, so no error tells a
# consumer that some partitions now live on another cluster.
MAPPING_MAX_AGE_S = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class Home:
    cluster: str
    local: int


@dataclasses.dataclass(frozen=True, slots=True)
class Mapping_:
    version: int
    bootstrap: dict[str, tuple[str, ...]]
    queues: dict[str, tuple[Home, ...]]
    configs: dict[str, Any]
    pinned: frozenset[str] = frozenset()  # queues whose sends all go pinned (a partial move)


class MappingCache:
    """The mapping (``current``, swapped whole) and one Client per cluster."""

    def __init__(
        self,
        manager: ManagerAdmin,
        token: str | None,
        cluster_tokens: Mapping[str, str],
        client_kwargs: dict[str, Any],
    ) -> None:
        self._manager = manager
        self._token = token
        self._cluster_tokens = dict(cluster_tokens)
        self._client_kwargs = client_kwargs
        self._lock = threading.Lock()
        self._clients: dict[str, tuple[tuple[str, ...], Client]] = {}
        self.current = Mapping_(0, {}, {}, {})
        self.fetched_at = 0.0  # time.monotonic() of the last GetMapping
        self._refreshing = False  # a refresh behind a receive is running

    def refresh(self) -> int:
        """Fetch the mapping if it changed; its version."""
        answer = self._manager.get_mapping(self.current.version)
        self.fetched_at = time.monotonic()
        if answer.unchanged:
            return self.current.version
        bootstrap = {c.name: tuple(c.bootstrap) for c in answer.clusters}
        queues = {
            q.name: tuple(Home(h.cluster, h.local_partition) for h in q.partitions)
            for q in answer.queues
        }
        configs = {q.name: config_from_pb(q.config) for q in answer.queues}
        pinned = frozenset(q.name for q in answer.queues if q.pinned)
        self.current = Mapping_(int(answer.version), bootstrap, queues, configs, pinned)
        return self.current.version

    def refresh_if_old(self, refresh: Callable[[], int]) -> None:
        """``refresh()`` (ManagedClient.refresh, which ends in ``self.refresh``)
        behind the caller, one at a time, once the copy is
        ``MAPPING_MAX_AGE_S`` old; the caller goes on with the cached copy."""
        if time.monotonic() - self.fetched_at <= MAPPING_MAX_AGE_S:
            return
        with self._lock:
            if self._refreshing:
                return
            self._refreshing = True

        def run() -> None:
            try:
                refresh()
            except Exception:  # the manager unreachable: the cached mapping serves on
                self.fetched_at = time.monotonic()
            finally:
                self._refreshing = False

        threading.Thread(target=run, name="managed-mapping", daemon=True).start()

    def homes(self, queue: str) -> tuple[Home, ...]:
        """The queue's partitions (index = global partition), refreshing once if unknown."""
        homes = self.current.queues.get(queue)
        if homes is None:
            self.refresh()
            homes = self.current.queues.get(queue)
        if homes is None:
            raise errors.NotFound(f"queue {queue!r} is not mapped by the manager")
        return homes

    def client_for(self, cluster: str) -> Client:
        bootstrap = self.current.bootstrap.get(cluster)
        if bootstrap is None:
            raise errors.NotFound(f"cluster {cluster!r} is not in the manager's mapping")
        with self._lock:
            cached = self._clients.get(cluster)
            if cached is not None and cached[0] == bootstrap:
                return cached[1]
            token = self._cluster_tokens.get(cluster, self._token or "")
            # never following redirects itself: NotFound refreshes the mapping instead
            client = Client(list(bootstrap), token=token, follow_redirects=False,
                            **self._client_kwargs)  # fmt: skip
            self._clients[cluster] = (bootstrap, client)
        if cached is not None:
            cached[1].close()
        return client

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for _, client in clients:
            client.close()
