"""Which external cluster manager manages this cluster, and under which name
(pure; docs/operations.md "Two levels of manager", Routing).

The manager sets it (``SetManagedBy``, through AdminService) when its health
poll finds the cluster's ClusterStatus saying otherwise, and clears it when
the cluster is removed. A node uses it for one thing: a request for a queue
its cluster does not hold is answered NOT_FOUND with a redirect to the
manager (server/control/redirects.py), which the SDK follows. Unset (None)
means an unmanaged cluster: plain NOT_FOUND, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raft_queue import errors
from raft_queue.config import check_name, parse_host_port

MAX_MANAGERS = 16  # a manager group has 1, 3 or 5; the bound keeps a trailer small


@dataclass(frozen=True, slots=True)
class ManagedBy:
    """This cluster is ``cluster`` to the manager group at ``managers``
    (their gRPC ``host:port`` addresses, in the manager's order)."""

    cluster: str
    managers: tuple[str, ...]


def check(cluster: str, managers: tuple[str, ...]) -> ManagedBy | None:
    """The value ``SetManagedBy(cluster, managers)`` sets: None for both
    empty (unmanaged), else a checked ManagedBy; InvalidArgument naming the
    field otherwise. Used at the API edge and again in ``apply``."""
    if not cluster and not managers:
        return None
    if not cluster:
        raise errors.InvalidArgument("cluster_name", "is required with managers (or clear both)")
    check_name("cluster_name", cluster)
    if not managers:
        raise errors.InvalidArgument("managers", "at least one manager address (or clear both)")
    if len(managers) > MAX_MANAGERS:
        raise errors.InvalidArgument("managers", f"at most {MAX_MANAGERS} addresses")
    for i, address in enumerate(managers):
        if not isinstance(address, str):
            raise errors.InvalidArgument(f"managers[{i}]", "must be host:port")
        parse_host_port(f"managers[{i}]", address)
    return ManagedBy(cluster, tuple(managers))


def to_plain(value: ManagedBy | None) -> dict[str, Any]:
    """Snapshot keys: none when unmanaged, so an unmanaged cluster's image is
    byte for byte what it was before this field existed."""
    if value is None:
        return {}
    return {"managed_by": {"cluster": value.cluster, "managers": list(value.managers)}}


def from_plain(obj: dict[str, Any]) -> ManagedBy | None:
    """Inverse of ``to_plain`` over a whole snapshot; an older image has no key."""
    plain = obj.get("managed_by")
    if not plain:
        return None
    return ManagedBy(str(plain["cluster"]), tuple(str(a) for a in plain["managers"]))
