"""Node identity: how one node proves to another that it is a node of this
cluster, and which one.

A node-to-node call (NodeService, a forwarded QueueService call) carries three
gRPC metadata entries:

- ``raftq-node``: the calling node's id;
- ``raftq-node-ts``: the signing time, integer milliseconds since the epoch;
- ``raftq-node-sig``: hex HMAC-SHA256, under ``derive_key(secret, NODE_RPC)``,
  over the node id, the full method name, the timestamp and SHA-256 of the
  serialized request, each length-prefixed so no two tuples share bytes.

The receiver recomputes the MAC (constant-time compare) and refuses a
signature older or newer than ``window_s`` (60 s: clocks of a cluster agree
within that, as Kerberos' 5-minute skew assumes of a realm). A signature binds
the exact request bytes, so a captured call can only be replayed verbatim,
within the window, to the same method: every signed call is idempotent
(heartbeat, status, metadata poll, a membership step that checks the group
first, a forwarded request the receiving node handles as it would the
client's own retry). AWS Signature V4 makes the same trade (15-minute window,
no nonce store).

Pure apart from the clock, which callers pass in; the gRPC side lives in
``server/api/node_identity.py`` (server) and ``server/peers.py`` (client).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import struct
from collections.abc import Iterable, Mapping

from raft_queue.security.secret import NODE_RPC, derive_key

#: The node whose signature the current call carried, once checked (set by
#: server/api/node_identity.py for the call's task; None otherwise). The
#: token door takes a signed call without a token as that node's own work.
VERIFIED_NODE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "raftq_verified_node", default=None
)

NODE_KEY = "raftq-node"
TIME_KEY = "raftq-node-ts"
SIG_KEY = "raftq-node-sig"
WINDOW_S = 60.0

Metadata = tuple[tuple[str, str], ...]


class NodeAuthError(Exception):
    """A call's node identity is missing, malformed, wrong or stale; ``reason``
    says which (for the node's log and the UNAUTHENTICATED status)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _field(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


def _mac(key: bytes, node_id: str, method: str, ts_ms: int, request: bytes) -> str:
    msg = b"".join(
        (
            b"raftq-node-rpc/v1",
            _field(node_id.encode()),
            _field(method.encode()),
            _field(str(ts_ms).encode()),
            hashlib.sha256(request).digest(),
        )
    )
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


class NodeSigner:
    """Signs this node's outgoing node-to-node calls."""

    def __init__(self, secret: bytes, node_id: str) -> None:
        self._key = derive_key(secret, NODE_RPC)
        self.node_id = node_id

    def metadata(self, method: str, request: bytes, now_s: float) -> Metadata:
        """The metadata entries proving this node sends ``request`` to ``method``
        (the full gRPC path, ``/raft_queue.v1.NodeService/Heartbeat``)."""
        ts_ms = int(now_s * 1000)
        sig = _mac(self._key, self.node_id, method, ts_ms, request)
        return ((NODE_KEY, self.node_id), (TIME_KEY, str(ts_ms)), (SIG_KEY, sig))


class NodeVerifier:
    """Checks incoming node-to-node calls (any thread: no mutable state)."""

    def __init__(self, secret: bytes, window_s: float = WINDOW_S) -> None:
        self._key = derive_key(secret, NODE_RPC)
        self.window_s = window_s

    def verify(
        self, metadata: Iterable[tuple[str, str | bytes]], method: str, request: bytes, now_s: float
    ) -> str:
        """The signing node's id; NodeAuthError when the signature is missing,
        malformed, does not match, or is outside the freshness window."""
        found = claims(metadata)
        node_id, ts_raw, sig = found.get(NODE_KEY), found.get(TIME_KEY), found.get(SIG_KEY)
        if not (node_id and ts_raw and sig):
            raise NodeAuthError("no node signature")
        try:
            ts_ms = int(ts_raw)
        except ValueError:
            raise NodeAuthError("malformed node signature timestamp") from None
        want = _mac(self._key, node_id, method, ts_ms, request)
        if not hmac.compare_digest(want.encode(), sig.encode()):
            raise NodeAuthError(f"bad node signature (claimed node {node_id!r})")
        if abs(now_s - ts_ms / 1000) > self.window_s:
            raise NodeAuthError(f"stale node signature from {node_id!r}: check the clocks")
        return node_id


def claims(metadata: Iterable[tuple[str, str | bytes]]) -> Mapping[str, str]:
    """The node-identity entries of ``metadata``, as text; NodeAuthError if one
    is given twice (which of two would the handler believe?)."""
    out: dict[str, str] = {}
    for key, value in metadata:
        if key in (NODE_KEY, TIME_KEY, SIG_KEY):
            if key in out:
                raise NodeAuthError(f"{key} given twice")
            out[key] = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return out
