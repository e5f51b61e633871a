"""AdminService's principal and grant calls (behind ``raftq principal`` and
``raftq grant``), on the metadata leader; another node answers NotLeader with
the leader's address, which the SDK follows.

The token is made here, on the leader, from the OS's random source, and
leaves the cluster once, in the response; the metadata log and every view
hold only its SHA-256 (security/tokens.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.core import metadata as meta
from raft_queue.core.metadata_principals import check_principal_name
from raft_queue.security.identity import Authenticator
from raft_queue.security.tokens import load_admin_hashes, new_token, token_hash

if TYPE_CHECKING:
    from raft_queue.server.node import Node


def principal_pb(p: meta.Principal) -> Any:
    return admin_pb2.PrincipalInfo(
        name=p.name,
        grants=[admin_pb2.GrantInfo(pattern=g.pattern, operations=g.operations) for g in p.grants],
        created_ms=p.created_ms,
        rotated_ms=p.rotated_ms,
    )


class Principals:
    def __init__(self, node: Node) -> None:
        self.node = node
        self._door: Authenticator | None = None  # tokens of this cluster, for introspect

    def _require_leader(self) -> None:
        md = self.node.metadata
        if md is None or not md.is_leader():
            raise errors.NotLeader("not the metadata leader", self.node.metadata_leader_address())

    async def create(self, req: Any) -> Any:
        self._require_leader()
        check_principal_name(req.name)
        token = new_token()
        cmd = meta.CreatePrincipal(req.name, token_hash(token), int(time.time() * 1000))
        principal = await self.node.submit_metadata(cmd)
        return admin_pb2.PrincipalTokenResponse(principal=principal_pb(principal), token=token)

    async def rotate(self, req: Any) -> Any:
        self._require_leader()
        token = new_token()
        cmd = meta.RotatePrincipal(req.name, token_hash(token), int(time.time() * 1000))
        principal = await self.node.submit_metadata(cmd)
        return admin_pb2.PrincipalTokenResponse(principal=principal_pb(principal), token=token)

    def introspect(self, req: Any) -> Any:
        """Who ``req.token`` is on this cluster (the metadata leader's view, so a
        token just rotated or deleted is already inactive); for the external
        manager's callers that are not its admins (manager/principals.py)."""
        self._require_leader()
        if self._door is None:
            security = self.node.config.security
            admins: frozenset[str] = frozenset()
            if security.admin_tokens_file:
                admins = load_admin_hashes(security.admin_tokens_file)
            self._door = Authenticator(lambda: self.node.view, admins)
        try:
            who = self._door.authenticate("Bearer " + req.token) if req.token else None
        except errors.Unauthenticated:
            who = None
        if who is None:
            return admin_pb2.IntrospectResponse(active=False)
        grants = [admin_pb2.GrantInfo(pattern=g.pattern, operations=g.operations)
                  for g in who.grants]  # fmt: skip
        return admin_pb2.IntrospectResponse(
            active=True, principal=who.name, superuser=who.superuser, grants=grants
        )

    async def delete(self, req: Any) -> Any:
        self._require_leader()
        await self.node.submit_metadata(meta.DeletePrincipal(req.name))
        return admin_pb2.DeletePrincipalResponse()

    def list(self, req: Any) -> Any:
        self._require_leader()  # read your own writes, as for quotas
        found = self.node.view.principals()
        if req.name:
            found = [p for p in found if p.name == req.name]
            if not found:
                raise errors.NotFound(f"principal {req.name!r} does not exist")
        return admin_pb2.ListPrincipalsResponse(principals=[principal_pb(p) for p in found])

    async def add_grant(self, req: Any) -> Any:
        self._require_leader()
        cmd = meta.GrantAccess(req.principal, req.pattern, tuple(req.operations))
        return principal_pb(await self.node.submit_metadata(cmd))

    async def remove_grant(self, req: Any) -> Any:
        self._require_leader()
        cmd = meta.RevokeAccess(req.principal, req.pattern, tuple(req.operations))
        return principal_pb(await self.node.submit_metadata(cmd))
