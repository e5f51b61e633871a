"""Where the manager places a new queue's partitions among its clusters
(the one placement rule of the second level; a cluster's own metadata group
places replicas on its nodes, core/placement.py)."""

from __future__ import annotations

from raft_queue import errors
from raft_queue.manager.state import ManagerMachine, PartitionHome


def plan_homes(
    machine: ManagerMachine, partitions: int, named: tuple[str, ...]
) -> tuple[PartitionHome, ...]:
    """Where a new queue's ``partitions`` go: spread round-robin over the
    ``named`` clusters (partition i on ``named[i % k]``, local index i // k),
    or all on the least-loaded healthy cluster that is not draining (ties:
    by name). NotFound / FailedPrecondition naming the cluster; Unavailable
    when no cluster is healthy."""
    if partitions < 1:
        raise errors.InvalidArgument("partitions", "must be at least 1")
    clusters = machine.clusters()
    if named:
        if len(set(named)) != len(named):
            raise errors.InvalidArgument("clusters", "names a cluster twice")
        for name in named:
            c = clusters.get(name)
            if c is None:
                raise errors.NotFound(f"cluster {name!r} is not registered")
            if c.draining:
                raise errors.FailedPrecondition(f"cluster {name!r} is draining")
        if len(named) > partitions:
            raise errors.InvalidArgument("clusters", "more clusters than partitions")
        chosen = named
    else:
        healthy = [c for c in clusters.values() if c.health == "healthy" and not c.draining]
        if not healthy:
            raise errors.Unavailable("no healthy cluster that is not draining to place on")
        chosen = (min(healthy, key=lambda c: (c.load, c.name)).name,)
    k = len(chosen)
    return tuple(PartitionHome(chosen[i % k], i // k) for i in range(partitions))
