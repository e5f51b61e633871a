"""A request for a queue of another cluster: the redirect (issue 16, Routing;
docs/operations.md "Routing").

A cluster under an external manager records the manager's claim
(``SetManagedBy``: this cluster's name there, the manager group's gRPC
addresses; core/metadata_manager.py), which the manager's health poller
sets and keeps current. When such a cluster's node finds that a queue does
not exist here, it answers NOT_FOUND saying so and naming the manager, with
the trailers ``raftq-manager`` (the addresses, comma-separated) and
``raftq-cluster`` (server/api/status.py); the SDK follows them through the
manager's mapping (client/redirect.py). Nodes never forward across clusters:
they know no other cluster, only the manager does.

Only a missing QUEUE is redirected (``NotFound.queue`` set, by
``Node.queue_spec``), and only once the miss is vouched for
(metadata_barrier.py): the view that says "not here" is then current, and
so is the claim read beside it. Missing principals, nodes, messages or a
partition of an existing queue stay plain NOT_FOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.core import metadata_manager

if TYPE_CHECKING:
    from raft_queue.server.node import Node


def redirected(exc: errors.NotFound, view: meta.MetadataMachine) -> errors.NotFound:
    """``exc``, or for a missing queue in a managed cluster a NotFound that
    names the manager (and carries the hint the trailers are made from)."""
    claim = view.managed_by()
    if not exc.queue or claim is None:
        return exc
    managers = ",".join(claim.managers)
    out = errors.NotFound(
        f"queue {exc.queue!r} is not in cluster {claim.cluster!r}; that cluster is managed "
        f"by the manager at {managers}: route through it (ManagedClient, raftq --manager)"
    )
    out.queue, out.cluster, out.manager = exc.queue, claim.cluster, managers
    return out


async def set_managed_by(node: Node, request: Any) -> Any:
    """AdminService.SetManagedBy on the metadata leader (another node answers
    NotLeader naming it): checked before anything is written."""
    md = node.metadata
    if md is None or not md.is_leader():
        raise errors.NotLeader("not the metadata leader", node.metadata_leader_address())
    managers = tuple(a.strip() for a in request.managers)
    metadata_manager.check(request.cluster_name, managers)
    claim = await node.submit_metadata(meta.SetManagedBy(request.cluster_name, managers))
    return admin_pb2.SetManagedByResponse(
        cluster_name=claim.cluster if claim else "",
        managers=list(claim.managers) if claim else [],
        metadata_version=node.view.version,
    )
