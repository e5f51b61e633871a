"""Who may do what (pure): operations, queue patterns, and the operation each
RPC needs.

A grant gives a principal some ``OPERATIONS`` on the queues a *pattern*
matches: an exact queue name (``orders``), a prefix ending in ``*``
(``orders.*`` matches ``orders.dlq`` but not ``orders``), or ``*`` (every
queue). As Kafka's ACLs with a LITERAL or PREFIXED resource pattern, and
RabbitMQ's per-vhost configure/write/read regexps, a grant only ever adds:
there is no deny. ``admin`` on ``*`` is the superuser: it allows every
operation on every queue (as Kafka's ``super.users``).

The table ``RPC_OPERATIONS`` is the one place that says which operation each
gRPC method needs and which request field names its queue; a method missing
from it needs ``admin`` (closed by default).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from raft_queue import errors

SEND, RECEIVE, READ, MANAGE, ADMIN = "send", "receive", "read", "manage", "admin"
OPERATIONS = (SEND, RECEIVE, READ, MANAGE, ADMIN)
#: What only a node's own identity may do (never a client token). Node-to-node
#: RPCs live on NodeService, which the node-identity door guards, not this table.
NODE = "node"
#: A queue's description and partitions (leaders): any grant on the queue
#: allows it, since a sender or receiver needs them to route its calls.
DESCRIBE = "describe"
ANY_QUEUE = "*"

_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}\*?|\*")

_Q = "raft_queue.v1.QueueService/"
_A = "raft_queue.v1.AdminService/"
#: gRPC method -> (operation, request field naming the queue, "" for none).
RPC_OPERATIONS: dict[str, tuple[str, str]] = {
    **{_Q + m: (MANAGE, "name") for m in ("CreateQueue", "UpdateQueue", "DeleteQueue",
                                          "PurgeQueue")},
    _Q + "GetQueue": (DESCRIBE, "name"),
    _Q + "GetPartitions": (DESCRIBE, "queue"),
    _Q + "ListQueues": (DESCRIBE, ""),
    _Q + "Send": (SEND, "queue"),
    _Q + "SendStream": (SEND, "queue"),  # checked per request (server/api/send_stream.py)
    **{_Q + m: (RECEIVE, "queue") for m in ("Receive", "Ack", "Nack", "ChangeVisibility",
                                            "Subscribe")},
    **{_Q + m: (READ, "queue") for m in ("Read", "CommitOffsets", "GetOffsets", "GetHistory")},
    # Quotas and usage (docs/operations.md): admin, on no queue.
    **{_A + m: (ADMIN, "") for m in ("SetQuota", "RemoveQuota", "ListQuotas", "GetUsage")},
    # Encryption at rest (docs/security.md): a queue's data key is its owner's
    # to rotate; rewrapping every queue's keys under a new master is admin.
    _A + "RotateQueueKey": (MANAGE, "queue"),
    _A + "RotateMasterKey": (ADMIN, ""),
}  # fmt: skip


def rpc_operation(method: str) -> tuple[str, str]:
    """``(operation, queue field)`` for a full gRPC method name
    (``/raft_queue.v1.QueueService/Send``); unknown methods need ``admin``."""
    return RPC_OPERATIONS.get(method.lstrip("/"), (ADMIN, ""))


@dataclass(frozen=True, slots=True)
class Grant:
    """``operations`` (a sorted subset of OPERATIONS) on the queues ``pattern`` matches."""

    pattern: str
    operations: tuple[str, ...]


def check_pattern(pattern: str) -> str:
    """A valid queue pattern, else InvalidArgument naming ``pattern``."""
    if not isinstance(pattern, str) or not _PATTERN.fullmatch(pattern):
        raise errors.InvalidArgument(
            "pattern", f"{pattern!r} must be a queue name, a prefix ending in '*', or '*'"
        )
    return pattern


def check_operations(operations: Iterable[str]) -> tuple[str, ...]:
    """Sorted, deduplicated operations, else InvalidArgument naming ``operations``."""
    ops = tuple(sorted(set(operations)))
    bad = [op for op in ops if op not in OPERATIONS]
    if bad or not ops:
        raise errors.InvalidArgument(
            "operations", f"{bad or 'none'}: each must be one of {', '.join(OPERATIONS)}"
        )
    return ops


def matches(pattern: str, queue: str) -> bool:
    """Does ``pattern`` cover ``queue``? (``queue`` "" is the cluster: only ``*``.)"""
    if pattern.endswith("*"):
        return pattern == ANY_QUEUE or (bool(queue) and queue.startswith(pattern[:-1]))
    return pattern == queue


def allows(grants: Iterable[Grant], operation: str, queue: str) -> bool:
    """Do ``grants`` allow ``operation`` on ``queue``? ``admin`` on ``*``
    allows everything but ``node``; an admin operation has no queue, so
    only a ``*`` grant allows it; any grant on ``queue`` allows ``describe``."""
    for g in grants:
        if g.pattern == ANY_QUEUE and ADMIN in g.operations and operation != NODE:
            return True
        if operation == DESCRIBE and matches(g.pattern, queue):
            return True
        if operation in g.operations and matches(g.pattern, queue):
            return True
    return False


def add_grant(grants: tuple[Grant, ...], pattern: str, ops: tuple[str, ...]) -> tuple[Grant, ...]:
    """``grants`` with ``ops`` added on ``pattern`` (sorted by pattern)."""
    current = {g.pattern: set(g.operations) for g in grants}
    current.setdefault(pattern, set()).update(ops)
    return tuple(Grant(p, tuple(sorted(current[p]))) for p in sorted(current))


def remove_grant(
    grants: tuple[Grant, ...], pattern: str, ops: tuple[str, ...]
) -> tuple[Grant, ...]:
    """``grants`` without ``ops`` on ``pattern`` (every op when ``ops`` is
    empty); NotFound when there is no grant on ``pattern``."""
    current = {g.pattern: set(g.operations) for g in grants}
    if pattern not in current:
        raise errors.NotFound(f"no grant on {pattern!r}")
    current[pattern] -= set(ops) if ops else current[pattern]
    return tuple(Grant(p, tuple(sorted(o))) for p, o in sorted(current.items()) if o)
