"""The metadata view of a node that is not a metadata voter (``controller =
false``), e.g. a node added to a running cluster.

Such a node has no metadata replica; it polls a voter's ``GetMetadata``
(the voter's own view: committed state, possibly a little behind its leader)
and adopts any newer image, which wakes its reconciler as a local metadata
change would. Voters are found through ``seeds`` (gRPC addresses), then the
leader address each answer carries. The metadata leader learns about the
node from its heartbeats (``admin_service.registration_loop``), as for any
node. Chosen over a pysyncobj non-voting member, which 0.3.17 does not have.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta

log = logging.getLogger(__name__)


async def follow_metadata(cluster: Any, period_s: float = 0.3) -> None:
    """Forever: poll a voter for a newer metadata image and adopt it."""
    node = cluster.node
    seeds = [s for s in node.config.seeds if s != node.address]
    k = 0
    while True:
        address = node.metadata_leader_hint or (seeds[k % len(seeds)] if seeds else "")
        k += 1
        try:
            req = admin_pb2.GetMetadataRequest(known_version=node.view.version)
            ans = await cluster.peers.admin(address).GetMetadata(req, timeout=3.0)
            node.metadata_leader_hint = ans.leader_address
            if ans.image and ans.version > node.view.version:
                node.adopt_view(meta.MetadataMachine.from_bytes(ans.image))
        except Exception as exc:  # try the next seed
            log.debug("metadata poll of %s failed: %s", address, exc)
            node.metadata_leader_hint = ""
        await asyncio.sleep(period_s)
