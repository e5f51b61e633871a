"""Updating a managed queue's config through the manager, growing it by
splits included (pure: the checks and the Raft command; the service forwards
the update to the clusters, manager/service.py ``UpdateQueue``).

A split happens inside one cluster (server/control/splits.py: the parent is
sealed, two children take its hash class), so the manager lets a queue grow
only when it is *whole* on one cluster: every global partition ``i`` is
partition ``i`` of that cluster's queue (core/managed_homes.py ``sole_cluster``). The manager then
forwards ``partitions`` to that cluster and records the grown mapping
(``UpdateQueue``: the new partitions are that cluster's, numbered as there),
and ManagedClient hands such a queue's placement and partition numbers to
that cluster's ``Client``, which follows the key ranges itself
(client/managed.py). A queue spanning clusters is refused, naming the field:
its partitions' key classes are the manager's modulus over the clusters,
and a split on one cluster would place keys by ranges the other clusters'
partitions do not share; move it onto one cluster first. A split made on
the cluster directly (``raftq --server ... queue update``) works for
ManagedClient all the same; the manager's mapping learns the count at the
next update through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from raft_queue import errors
from raft_queue.core.managed_homes import sole_cluster


@dataclass(frozen=True, slots=True)
class UpdateQueue:
    """The effective ``config`` after a forwarded update, and the homes
    (grown, for a split: the old ones followed by the new ones)."""

    name: str
    partitions: tuple[Any, ...]  # state.PartitionHome
    config: dict[str, Any] = field(hash=False)


def check_update(view: Any, name: str, changes: dict[str, Any]) -> Any:
    """The ManagedQueue ``name`` if ``changes`` (the fields set) may be
    forwarded; NotFound, or FailedPrecondition naming the field, changing
    nothing: a queue being moved, a queue that spans clusters growing."""
    queue = view.queue(name)
    if queue is None:
        raise errors.NotFound(f"queue {name!r} is not managed")
    move = view.move(name)
    if move is not None and move.active:
        raise errors.FailedPrecondition(
            f"name: queue {name!r} is being moved to {move.target} ({move.phase}): "
            "update it once the move is done or cancelled"
        )
    wanted = changes.get("partitions")
    if wanted is None or wanted == len(queue.partitions):
        return queue
    if sole_cluster(queue.partitions, queue.pinned) is None:
        clusters = queue.clusters()
        why = (
            f"queue spans clusters {','.join(clusters)}; move it onto one cluster first"
            if len(clusters) > 1
            else f"queue {name!r} on {clusters[0]} holds partitions its mapping does not "
            "name (a partial move's); move it whole first"
        )
        raise errors.FailedPrecondition(
            f"partitions: {why} (a split grows a queue inside one cluster)"
        )
    return queue


def forwarded(queue: Any, changes: dict[str, Any]) -> dict[str, Any]:
    """What each cluster is asked to change: a queue spanning clusters keeps
    its per-cluster partition counts (``partitions`` equal to the global
    count is then no change at all)."""
    if sole_cluster(queue.partitions, queue.pinned) is None:
        return {k: v for k, v in changes.items() if k != "partitions"}
    return dict(changes)


def grown_homes(queue: Any, count: int, home: Any) -> tuple[Any, ...]:
    """``queue``'s homes grown to ``count`` on its one cluster (``home(cluster,
    local)`` makes one); unchanged for a queue that spans clusters."""
    cluster = sole_cluster(queue.partitions, queue.pinned)
    if cluster is None or count <= len(queue.partitions):
        return tuple(queue.partitions)
    return tuple(queue.partitions) + tuple(
        home(cluster, i) for i in range(len(queue.partitions), count)
    )


def apply_update(queue: Any, cmd: UpdateQueue) -> Any:
    """The ManagedQueue after ``cmd`` (the machine's apply): homes only ever
    grow (the old ones stay a prefix); InvalidArgument naming the field."""
    old = tuple(queue.partitions)
    if tuple(cmd.partitions[: len(old)]) != old:
        raise errors.InvalidArgument("partitions", "a queue's existing homes never change here")
    config = {**cmd.config, "partitions": len(cmd.partitions)}
    return replace(queue, partitions=tuple(cmd.partitions), config=config)
