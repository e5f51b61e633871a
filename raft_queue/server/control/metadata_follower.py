"""The metadata view of a node that is not a metadata voter (``controller =
false``), e.g. a node added to a running cluster.

Such a node has no metadata replica; it polls a voter's ``GetMetadata``
(the voter's own view: committed state, possibly a little behind its leader)
and adopts any newer image, which wakes its reconciler as a local metadata
change would. Voters are found through ``seeds`` (gRPC addresses) and the
recorded voters, then the leader address each answer carries. It also runs
on voters: it idles while the node has its own metadata replica, and
serves a voter removed from the group (server/control/controllers.py) or one still
catching up after being added. The metadata leader learns about the
node from its heartbeats (``node_service.registration_loop``), as for any
node. Chosen over a pysyncobj non-voting member, which 0.3.17 does not have.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)


async def follow_metadata(cluster: Cluster, period_s: float = 0.3) -> None:
    """Forever: poll a voter for a newer metadata image and adopt it."""
    node = cluster.node
    k = 0
    while True:
        if _own_view_suffices(node):
            await asyncio.sleep(period_s)  # a voter: its own replica is its view
            continue
        seeds = _seeds(node)
        address = node.metadata_leader_hint or (seeds[k % len(seeds)] if seeds else "")
        k += 1
        try:
            req = admin_pb2.GetMetadataRequest(known_version=node.view.version)
            ans = await cluster.peers.node(address).GetMetadata(req, timeout=3.0)
            node.metadata_leader_hint = ans.leader_address
            if ans.image and ans.version > node.view.version:
                node.adopt_view(meta.MetadataMachine.from_bytes(ans.image))
        except Exception as exc:  # try the next seed
            log.debug("metadata poll of %s failed: %s", address, exc)
            node.metadata_leader_hint = ""
        await asyncio.sleep(period_s)


def _own_view_suffices(node: Node) -> bool:
    """A voter whose replica knows a leader needs no poll. One that knows none
    polls: it may have been removed as a voter while it was down (its replica
    then never hears of it); the newer view tells it to leave
    (server/control/controllers.py)."""
    md = node.metadata
    return md is not None and not node.metadata_joining and bool(md.leader_address())


def _seeds(node: Node) -> list[str]:
    """The config's seeds, then the gRPC addresses of the recorded voters
    (the seeds may all have stopped being controllers)."""
    nodes = node.view.nodes()
    voters = [nodes[n].address for n in node.view.controllers() if n in nodes]
    return [a for a in dict.fromkeys([*node.config.seeds, *voters]) if a != node.address]
