"""ManagerAdmin: calls to the external cluster manager's ManagerService.

Every call goes to the manager leader: a follower answers NotLeader naming
it, and the call follows the hint once per attempt. A
manager that does not answer is skipped for the next one. Bounded: at most
``attempts`` tries within ``timeout_s`` (the deadline is what usually ends
it: an election of the manager group takes a few seconds). Errors are the QueueError tree.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import grpc

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import manager_pb2, manager_pb2_grpc
from raft_queue.client.credentials import call_metadata, resolve_token
from raft_queue.client.errors import from_rpc_error
from raft_queue.client.models import config_to_pb
from raft_queue.client.tls import ClientTls, sync_factory

RETRY_PAUSE_S = 0.2


class ManagerAdmin:
    def __init__(
        self,
        managers: str | Sequence[str],
        token: str | None = None,
        timeout_s: float = 10.0,
        attempts: int = 1000,
        tls: bool = False,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> None:
        from raft_queue.client.client import parse_bootstrap

        # A manager with [tls] serves TLS only: the same arguments as Client's
        # (client/tls.py), checked now (a bad file is an InvalidArgument naming it).
        self._dial = sync_factory(ClientTls.of(tls, ca_file, cert_file, key_file))
        self._addresses = parse_bootstrap(managers)
        self._metadata = call_metadata(resolve_token(token))
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._channels: dict[str, tuple[grpc.Channel, Any]] = {}
        self._preferred = self._addresses[0]

    def _stub(self, address: str) -> Any:
        entry = self._channels.get(address)
        if entry is None:
            channel = self._dial(address)
            entry = (channel, manager_pb2_grpc.ManagerServiceStub(channel))
            self._channels[address] = entry
        return entry[1]

    def call(self, rpc: str, request: Any, mutating: bool = True) -> Any:
        deadline = time.monotonic() + self._timeout_s
        address = self._preferred
        last: errors.QueueError = errors.Unavailable("no manager answered")
        for _ in range(self._attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                answer = getattr(self._stub(address), rpc)(
                    request, timeout=min(remaining, 5.0), metadata=self._metadata
                )
                self._preferred = address
                return answer
            except grpc.RpcError as exc:
                last = from_rpc_error(exc, mutating=mutating)
            if isinstance(last, errors.NotLeader) and last.leader:
                address = last.leader
                continue
            if not last.retryable:
                raise last
            address = self._next(address)
            time.sleep(min(RETRY_PAUSE_S, max(0.0, deadline - time.monotonic())))
        raise last

    def _next(self, address: str) -> str:
        """The manager after ``address`` in the list (the first for a leader hint)."""
        if address not in self._addresses:
            return self._addresses[0]
        return self._addresses[(self._addresses.index(address) + 1) % len(self._addresses)]

    # ---- clusters -----------------------------------------------------------------------------
    def add_cluster(self, name: str, bootstrap: Sequence[str], token: str = "") -> Any:
        request = manager_pb2.AddClusterRequest(name=name, bootstrap=list(bootstrap), token=token)
        return self.call("AddCluster", request)

    def remove_cluster(self, name: str) -> Any:
        return self.call("RemoveCluster", manager_pb2.RemoveClusterRequest(name=name))

    def drain_cluster(self, name: str, undrain: bool = False) -> Any:
        request = manager_pb2.DrainClusterRequest(name=name, undrain=undrain)
        return self.call("DrainCluster", request)

    def list_clusters(self) -> Any:
        return self.call("ListClusters", manager_pb2.ListClustersRequest(), mutating=False)

    # ---- queues -------------------------------------------------------------------------------
    def create_queue(
        self, name: str, partitions: int = 1, clusters: Sequence[str] = (), **config: Any
    ) -> Any:
        pb = config_to_pb({"partitions": partitions, **config})
        request = manager_pb2.ManagedCreateQueueRequest(
            name=name, config=pb, clusters=list(clusters)
        )
        return self.call("CreateQueue", request)

    def place_queue(self, name: str, cluster: str, **config: Any) -> Any:
        request = manager_pb2.PlaceQueueRequest(
            name=name, cluster=cluster, config=config_to_pb(config)
        )
        return self.call("PlaceQueue", request)

    def update_queue(self, name: str, **config: Any) -> Any:
        """Change the given config fields on every cluster of ``name``;
        ``partitions`` grows a queue wholly on one cluster by splits there
        (QueueMapping, as recorded after)."""
        request = manager_pb2.ManagedUpdateQueueRequest(name=name, config=config_to_pb(config))
        return self.call("UpdateQueue", request)

    def forget_queue(self, name: str) -> Any:
        return self.call("ForgetQueue", manager_pb2.ForgetQueueRequest(name=name))

    def get_mapping(self, known_version: int = 0) -> Any:
        request = manager_pb2.GetMappingRequest(known_version=known_version)
        return self.call("GetMapping", request, mutating=False)

    # ---- moves between clusters ---------------------------------------------------------------
    def move_queue(
        self, name: str, to: str, dry_run: bool = False, partitions: Sequence[int] = ()
    ) -> Any:
        """Start moving queue ``name`` to cluster ``to`` (``QueueMoveInfo``); with
        ``dry_run``, check and describe it only. ``partitions``: only these
        GLOBAL partitions (all on one cluster); (): the whole queue."""
        request = manager_pb2.MoveQueueRequest(
            name=name, to=to, dry_run=dry_run, partitions=partitions
        )
        return self.call("MoveQueue", request, mutating=not dry_run)

    def move_status(self, name: str = "") -> Any:
        """The last move of ``name`` (of every queue when empty): ``MoveStatusResponse``."""
        return self.call("MoveStatus", manager_pb2.MoveStatusRequest(name=name), mutating=False)

    def cancel_move(self, name: str) -> Any:
        """Cancel ``name``'s move before its cut-over (refused after it)."""
        return self.call("CancelQueueMove", manager_pb2.CancelQueueMoveRequest(name=name))

    def close(self) -> None:
        for channel, _ in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self) -> ManagerAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
