"""Disk nemeses: a full disk and a disk returning EIO, each on one replica.

They need the node's data directory on a mount the campaign controls
(``ChaosCluster(disks=...)``, chaos/disks.py): node n1 on a tmpfs, node n2 on
the EIO FUSE passthrough. Without those mounts (not root, no FUSE) a disk
nemesis is skipped and says so in the report.

- ``disk-full``: the tmpfs is shrunk to what is used plus half the
  watermark, so the node is below ``[storage] min_free_bytes``: sends to every
  partition with a replica there are refused (RESOURCE_EXHAUSTED), acks,
  receives and reads go on, leadership moves away. Healed by growing the
  tmpfs back: the node recovers by itself (no restart).
- ``disk-eio``: every write and sync under n2's data directory fails with EIO:
  its replicas stop (fail-stop, never skip an entry), the other two carry on.
  Healed by ending the errors and restarting n2 (SIGKILL + start), which
  re-reads its state from disk.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.nemesis import Context, Nemesis
from raft_queue.errors import QueueError

# The watermark every node of a campaign with disk faults runs with, and the
# tmpfs under the disk-full node (big enough for a long campaign's data).
WATERMARK_BYTES = 64 << 20
TMPFS_BYTES = 2 << 30


class DiskFull(Nemesis):
    name = "disk-full"

    def inject(self, ctx: Context) -> str:
        fs = ctx.cluster.tmpfs
        if fs is None:
            return "skipped: no tmpfs under a node (needs root)"
        fs.fill(WATERMARK_BYTES // 2)
        node = ctx.cluster.disk_node("tmpfs")
        return f"n{node + 1}'s disk full: tmpfs shrunk to {fs.size_bytes >> 20} MiB"

    def heal(self, ctx: Context) -> None:
        fs = ctx.cluster.tmpfs
        if fs is None:
            return
        fs.grow(TMPFS_BYTES)
        node = ctx.cluster.disk_node("tmpfs")
        if failed_replicas(ctx, node):  # the disk filled before the watermark acted
            ctx.log(f"  disk-full: n{node + 1} had failed replicas; restarting it")
            ctx.cluster.kill(node)
            ctx.cluster.start_node(node)


def failed_replicas(ctx: Context, node: int) -> list[str]:
    """Replicas of ``node`` in role "failed" (fail-stop), as cluster status shows."""
    try:
        replicas = ctx.client.cluster_status().replicas
    except QueueError:
        return []
    me = ctx.cluster.node_id(node)
    return [f"{r.queue}/{r.partition}" for r in replicas if r.node == me and r.role == "failed"]


class DiskEio(Nemesis):
    name = "disk-eio"

    def __init__(self) -> None:
        self.injected = False

    def inject(self, ctx: Context) -> str:
        fs = ctx.cluster.eio
        if fs is None:
            return "skipped: no FUSE mount under a node (needs root, /dev/fuse, mfusepy)"
        fs.fail()
        self.injected = True
        node = ctx.cluster.disk_node("eio")
        return f"every write and sync under n{node + 1}'s data directory fails with EIO"

    def heal(self, ctx: Context) -> None:
        fs = ctx.cluster.eio
        if fs is None or not self.injected:
            return
        fs.heal()
        node = ctx.cluster.disk_node("eio")
        ctx.cluster.kill(node)  # its failed replicas come back only by re-reading the disk
        ctx.cluster.start_node(node)


DISK_FACTORIES: dict[str, Callable[[], Nemesis]] = {"disk-full": DiskFull, "disk-eio": DiskEio}
