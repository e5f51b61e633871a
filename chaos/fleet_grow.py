"""The split side of chaos/move_campaign.py: a second FIFO queue of the fleet.

The manager places ``chaos-grows`` (2 partitions, replication 3) on c1 and it
stays there; the ``grow`` nemesis splits it in place (``partitions`` + 2, as
chaos.nemesis ``Grow``), in turn through the manager (``ManagedClient.
update_queue``: the manager forwards it to c1 and records the grown mapping)
and through c1's own UpdateQueue (the manager is not told), while its own
producers and consumers run through ``ManagedClient``, which hands a queue
whole on one cluster to that cluster's ``Client``, whose key partitioner
follows the split ranges (docs/operations.md "Splits of a managed queue").
The checker ranks this queue's partitions by their depth in the split tree
(chaos.campaign ``split_ranks``), the move queue's by mapping version.

``kill-one``: SIGKILL one node of c1 or c2 (seeded), restarted at the heal.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from chaos.nemesis import Context, Grow, Nemesis

GROW_QUEUE = "chaos-grows"
GROW_CLUSTER = "c1"
GROW_KEYS = [f"gkey-{i}" for i in range(12)]


class FleetGrow(Nemesis):
    """One split of the grow queue: through the manager, then on its cluster,
    in turn; nothing to heal."""

    name = "grow"
    turn = 0

    def inject(self, ctx: Context) -> str:
        FleetGrow.turn += 1
        if FleetGrow.turn % 2:
            via, client = "the manager", ctx.cluster.managed(timeout_s=20.0)  # type: ignore[attr-defined]
        else:
            via = GROW_CLUSTER
            client = ctx.cluster.clusters[GROW_CLUSTER].client(timeout_s=20.0)  # type: ignore[attr-defined]
        with client:
            on_it = dataclasses.replace(ctx, client=client, queue=GROW_QUEUE)
            return f"{GROW_QUEUE} on {GROW_CLUSTER} via {via}: " + Grow().inject(on_it)

    def heal(self, ctx: Context) -> None:
        pass


class FleetKillOne(Nemesis):
    """SIGKILL one node of one cluster; heal: start it again."""

    name = "kill-one"
    victim: tuple[str, int] | None = None

    def inject(self, ctx: Context) -> str:
        clusters = ctx.cluster.clusters  # type: ignore[attr-defined]
        name = ctx.rng.choice(sorted(clusters))
        node = ctx.rng.randrange(clusters[name].nodes)
        clusters[name].kill(node)
        self.victim = (name, node)
        return f"SIGKILL {name}/n{node + 1}"

    def heal(self, ctx: Context) -> None:
        if self.victim is not None:
            name, node = self.victim
            ctx.cluster.clusters[name].start(node)  # type: ignore[attr-defined]


def create_grow_queue(managed: Any) -> None:
    managed.create_queue(GROW_QUEUE, partitions=2, clusters=[GROW_CLUSTER], ordering="fifo",
                         replication_factor=3)  # fmt: skip


def grow_client(fleet: Any) -> Any:
    """A client for the grow queue's producers and consumers: a ManagedClient
    (the queue is whole on c1, so it follows the splits)."""
    return fleet.managed(timeout_s=20.0)


def seen_grown(m: Any, _client: Any) -> dict[str, Any]:
    """A delivery of the grow queue as the history records it (its partition
    is c1's: the queue is whole there)."""
    return {"partition": m.partition, "offset": m.offset, "payload": m.body.decode(),
            "key": m.key, "receipt": m.receipt}  # fmt: skip
