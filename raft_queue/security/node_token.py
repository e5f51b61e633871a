"""A node's own credential for the gRPC calls it makes to other nodes
(heartbeats, metadata polls, node status, membership steps, forwarded work
of its own such as dead letters).

Interim design, to be replaced by the node-identity service: the bearer
token ``rqn_<node id>.<hex HMAC-SHA256(derive_key(secret, NODE_RPC), node id)>``.
Only a holder of the cluster secret can make one; the API door
(server/api/auth.py) recognises it as the built-in principal ``node:<id>``,
the one identity allowed the node-to-node RPCs. It is a static bearer
credential: without TLS, a wire sniffer could replay it, as any bearer token.
"""

from __future__ import annotations

import hashlib
import hmac

from raft_queue.security.secret import NODE_RPC, derive_key

PREFIX = "rqn_"


def node_token(secret: bytes, node_id: str) -> str:
    mac = hmac.new(derive_key(secret, NODE_RPC), node_id.encode(), hashlib.sha256).hexdigest()
    return f"{PREFIX}{node_id}.{mac}"


def verify_node_token(secret: bytes | None, token: str) -> str | None:
    """The node id a valid node token names, else None (constant-time MAC check)."""
    if secret is None or not token.startswith(PREFIX):
        return None
    node_id, _, _mac = token[len(PREFIX) :].rpartition(".")
    if not node_id:
        return None
    return node_id if hmac.compare_digest(node_token(secret, node_id), token) else None
