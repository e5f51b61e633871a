"""Where a managed queue's partitions live, as both the SDK and the external
manager read it (pure; client/managed.py, manager/queue_update.py).

Global partition ``i`` of a queue the manager maps is partition ``local`` of
the queue of the same name on ``cluster`` (manager/state.py
``PartitionHome``). A queue is *whole* on a cluster when every global
partition is the partition of the same number there: that cluster's own
``Client`` may then place and number everything, splits included (its key
ranges are the queue's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Home(Protocol):
    @property
    def cluster(self) -> str: ...

    @property
    def local(self) -> int: ...


def sole_cluster(homes: Sequence[Home], pinned: bool = False) -> str | None:
    """The one cluster holding every partition with the same number there
    (global ``i`` = local ``i``), or None: the queue spans clusters, its
    numbers differ, or a partial move left fenced partitions (``pinned``)."""
    if pinned or not homes:
        return None
    cluster = homes[0].cluster
    if all(h.cluster == cluster and h.local == i for i, h in enumerate(homes)):
        return cluster
    return None
