"""The metadata machine's rules for principals and grants (pure).

Each function checks one command against the current principals and returns
the principal's new value (None: deleted) or raises a QueueError, in which
case nothing changes. Tokens never reach the log: only their SHA-256.
"""

from __future__ import annotations

import re
from dataclasses import replace

from raft_queue import errors
from raft_queue.config import check_name
from raft_queue.core import access
from raft_queue.core.metadata_commands import (
    CreatePrincipal,
    DeletePrincipal,
    GrantAccess,
    RevokeAccess,
    RotatePrincipal,
)
from raft_queue.core.metadata_records import Principal

#: Names of built-in identities (security/identity.py): no principal may take them.
RESERVED = ("admin", "anonymous", "node")
_HASH = re.compile(r"[0-9a-f]{64}")

Principals = dict[str, Principal]


def check_principal_name(name: str) -> str:
    check_name("name", name)
    if name.lower() in RESERVED:
        raise errors.InvalidArgument("name", f"{name!r} is reserved for a built-in identity")
    return name


def _check_hash(token_hash: str) -> None:
    if not isinstance(token_hash, str) or not _HASH.fullmatch(token_hash):
        raise errors.InvalidArgument("token_hash", "must be 64 lowercase hex digits (SHA-256)")


def _get(principals: Principals, name: str) -> Principal:
    found = principals.get(name)
    if found is None:
        raise errors.NotFound(f"principal {name!r} does not exist")
    return found


def _check_unused(principals: Principals, token_hash: str, name: str) -> None:
    if any(p.token_hash == token_hash and p.name != name for p in principals.values()):
        raise errors.AlreadyExists("another principal holds this token")


def create(principals: Principals, cmd: CreatePrincipal) -> Principal:
    check_principal_name(cmd.name)
    _check_hash(cmd.token_hash)
    old = principals.get(cmd.name)
    if old is not None:
        if old.token_hash == cmd.token_hash:
            return old
        raise errors.AlreadyExists(f"principal {cmd.name!r} exists")
    _check_unused(principals, cmd.token_hash, cmd.name)
    return Principal(cmd.name, cmd.token_hash, cmd.now_ms, cmd.now_ms)


def rotate(principals: Principals, cmd: RotatePrincipal) -> Principal:
    old = _get(principals, cmd.name)
    _check_hash(cmd.token_hash)
    _check_unused(principals, cmd.token_hash, cmd.name)
    return replace(old, token_hash=cmd.token_hash, rotated_ms=cmd.now_ms)


def delete(principals: Principals, cmd: DeletePrincipal) -> Principal:
    return _get(principals, cmd.name)


def grant(principals: Principals, cmd: GrantAccess) -> Principal:
    old = _get(principals, cmd.principal)
    pattern = access.check_pattern(cmd.pattern)
    ops = access.check_operations(cmd.operations)
    return replace(old, grants=access.add_grant(old.grants, pattern, ops))


def revoke(principals: Principals, cmd: RevokeAccess) -> Principal:
    old = _get(principals, cmd.principal)
    pattern = access.check_pattern(cmd.pattern)
    ops = access.check_operations(cmd.operations) if cmd.operations else ()
    return replace(old, grants=access.remove_grant(old.grants, pattern, ops))


def to_plain(p: Principal) -> dict[str, object]:
    return {"name": p.name, "token_hash": p.token_hash, "created_ms": p.created_ms,
            "rotated_ms": p.rotated_ms,
            "grants": [[g.pattern, list(g.operations)] for g in p.grants]}  # fmt: skip


def from_plain(obj: dict[str, object]) -> Principal:
    grants = tuple(access.Grant(str(pat), tuple(ops)) for pat, ops in obj["grants"])  # type: ignore[attr-defined]
    return Principal(str(obj["name"]), str(obj["token_hash"]), int(obj["created_ms"]),  # type: ignore[call-overload]
                     int(obj["rotated_ms"]), grants)  # type: ignore[call-overload]  # fmt: skip
