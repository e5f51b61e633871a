"""Who is calling: bearer token -> Identity, cached so the hot path costs a
dict lookup.

Identities come from three places, checked in this order:

- a node's signature (security/node_identity.py), checked by the node door
  before this one: a signed call without a token is the built-in
  ``node:<id>`` (work a node forwards on its own, such as dead letters);
- the admin tokens file (security/tokens.py): the superuser ``admin``;
- a principal of the metadata view (core/metadata_principals.py), with its grants;
- with ``[tls] client_cert_principals``, a call without a token: the
  principal its verified client certificate names (``authenticate_certificate``).
  A node forwarding such a call vouches for it with ``Certificate <name>``
  in place of a token, which only a node-signed call may carry.

With ``[security] insecure = true`` a call without a token is ``anonymous``,
a superuser allowed the node-to-node calls too; a token that is given is
still checked.

The cache maps the presented token to the identity it proved under one
metadata version; any metadata change (a rotation, a deletion, a grant)
bumps the version and so re-checks every token at its next use.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from raft_queue.core import access
from raft_queue.core.metadata import MetadataMachine
from raft_queue.errors import PermissionDenied, Unauthenticated
from raft_queue.security.tokens import token_hash

CACHE_MAX = 10_000  # distinct tokens remembered; cleared when full (tokens are few)
BEARER = "bearer "
#: The ``authorization`` value a node forwards for a caller its door admitted
#: by client certificate (server/api/auth.py); honoured on node-signed calls only.
CERTIFIED = "Certificate "


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller. ``superuser``: every operation on every queue."""

    name: str
    grants: tuple[access.Grant, ...] = ()
    superuser: bool = False
    node: bool = False

    def allows(self, operation: str, queue: str) -> bool:
        if operation == access.NODE:
            return self.node
        return self.superuser or access.allows(self.grants, operation, queue)

    def sees(self, queue: str) -> bool:
        """Any grant on ``queue`` (what ListQueues shows it)."""
        return self.allows(access.DESCRIBE, queue)

    def check(self, operation: str, queue: str) -> None:
        """PermissionDenied naming the operation and the queue, unless allowed."""
        if not self.allows(operation, queue):
            if operation == access.DESCRIBE:  # not grantable itself: any grant allows it
                raise PermissionDenied(f"principal {self.name!r} has no grant on queue {queue!r}")
            where = f"queue {queue!r}" if queue else "the cluster"
            raise PermissionDenied(f"principal {self.name!r} may not {operation} on {where}")


# Insecure mode is today's open cluster: node-to-node calls too (a node
# without the secret has no node token to show).
ANONYMOUS = Identity("anonymous", superuser=True, node=True)
ADMIN = Identity("admin", superuser=True)


class Authenticator:
    """Token -> Identity for one node (asyncio thread only: no locks)."""

    def __init__(
        self,
        view: Callable[[], MetadataMachine],
        admin_hashes: frozenset[str] = frozenset(),
        secret: bytes | None = None,
        insecure: bool = False,
    ) -> None:
        self._view = view
        self._admin_hashes = admin_hashes
        self._secret = secret
        self._insecure = insecure
        self.insecure = insecure
        self._cache: dict[str, tuple[int, Identity]] = {}
        self._by_hash: dict[str, str] = {}
        self._by_hash_version = -1

    def authenticate(self, authorization: str | None, node_id: str | None = None) -> Identity:
        """The identity an ``authorization`` metadata value proves, else
        Unauthenticated (nothing about why: no oracle for guessers).
        ``node_id``: the node whose signature the call carried (already
        checked); without a token, the call is that node's own."""
        if node_id and not authorization:
            return Identity(f"node:{node_id}", superuser=True, node=True)
        if node_id and authorization and authorization.startswith(CERTIFIED):
            return self.certified_principal(authorization[len(CERTIFIED) :])
        view = self._view()
        cached = self._cache.get(authorization or "")
        if cached is not None and cached[0] == view.version:
            return cached[1]
        identity = self._verify(authorization, view)
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        self._cache[authorization or ""] = (view.version, identity)
        return identity

    def _verify(self, authorization: str | None, view: MetadataMachine) -> Identity:
        if not authorization:
            if self._insecure:
                return ANONYMOUS
            raise Unauthenticated("a bearer token is required (authorization: Bearer <token>)")
        if authorization[: len(BEARER)].lower() != BEARER:
            raise Unauthenticated("authorization must be 'Bearer <token>'")
        token = authorization[len(BEARER) :].strip()
        digest = token_hash(token)
        if digest in self._admin_hashes:
            return ADMIN
        principal = view.principal(self._principal_by_hash(view).get(digest, ""))
        if principal is None or not hmac.compare_digest(principal.token_hash, digest):
            raise Unauthenticated("invalid token (unknown, rotated or deleted)")
        return Identity(principal.name, principal.grants)

    def _principal_by_hash(self, view: MetadataMachine) -> dict[str, str]:
        if self._by_hash_version != view.version:
            self._by_hash = {p.token_hash: p.name for p in view.principals()}
            self._by_hash_version = view.version
        return self._by_hash

    def authenticate_certificate(self, kind: str, name: str) -> Identity:
        """The caller a verified client certificate names (security/tls.py
        ``CertIdentity``): an existing principal, with its grants; a node
        certificate or an unknown principal is Unauthenticated, saying so."""
        if kind != "principal":
            raise Unauthenticated(
                f"the client certificate names {kind} {name!r}, not a principal; send a token"
            )
        return self.certified_principal(name)

    def certified_principal(self, name: str) -> Identity:
        principal = self._view().principal(name)
        if principal is None:
            raise Unauthenticated(
                f"the client certificate names principal {name!r}, which does not exist"
                " (raftq principal create)"
            )
        return Identity(principal.name, principal.grants)
