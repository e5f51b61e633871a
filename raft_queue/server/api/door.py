"""What the gRPC door serves besides our services, and which guards stand at
it: the node-identity interceptor (always, so an insecure node still routes
NodeService the same way), health (always open: load balancers and
orchestrators probe it without credentials) and reflection (only with
``[api] reflection = true``; never for NodeService).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from grpc_reflection.v1alpha import reflection

from raft_queue.config import ApiConfig
from raft_queue.security.node_identity import NodeSigner, NodeVerifier
from raft_queue.server.api.node_identity import NodeIdentityInterceptor


def node_signer(secret: bytes | None, node_id: str) -> NodeSigner | None:
    """What signs this node's calls to other nodes (None: insecure)."""
    return NodeSigner(secret, node_id) if secret is not None else None


def interceptors(secret: bytes | None) -> list[grpc.aio.ServerInterceptor]:
    """This room's guards, for ``grpc.aio.server(interceptors=[...])``."""
    verifier = NodeVerifier(secret) if secret is not None else None
    return [NodeIdentityInterceptor(verifier)]


def maybe_reflection(api: ApiConfig, server: Any, service_names: Sequence[str]) -> bool:
    """Serve reflection of ``service_names`` (and of reflection itself) when
    configured; whether it is served."""
    if not api.reflection:
        return False
    reflection.enable_server_reflection((*service_names, reflection.SERVICE_NAME), server)
    return True
