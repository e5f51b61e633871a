"""Limits that mean what they say: the checks of ``[limits]`` that are not
a plain range on one request field (docs/operations.md "Limits").

Every refusal names its limit (``limits.<key>`` or the queue's field) and is
counted as a ``limits`` rejection. Nothing here does I/O: the callers check
before anything is submitted, so an over-limit request writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from raft_queue import errors
from raft_queue.config import Limits, NodeConfig, QueueSpec
from raft_queue.observability import metrics
from raft_queue.server.api.answer import answer_bytes


def refuse(exc: errors.QueueError) -> errors.QueueError:
    """``exc``, counted as a ``limits`` rejection (raise what it returns)."""
    metrics.count_rejection("limits")
    return exc


def bound_replica(replica: Any, config: NodeConfig) -> None:
    """A new partition replica's bounds from the node config: its pending
    commands and entry bytes (replication/group.py) and its standing polls
    (replication/standing.py)."""
    replica.max_pending = config.raft.commands_queue_size
    replica.max_entry_bytes = config.raft.append_entries_batch_bytes
    replica.standing.max_per_partition = config.limits.max_standing_polls_per_partition
    replica.standing.max_per_consumer = config.limits.max_standing_polls_per_consumer


def check_queue_spec(spec: QueueSpec, limits: Limits, field: str = "config") -> None:
    """A queue may not allow larger messages than the node does."""
    if spec.max_message_bytes > limits.max_message_bytes:
        raise refuse(
            errors.InvalidArgument(
                f"{field}.max_message_bytes",
                f"{spec.max_message_bytes} is over this node's limits.max_message_bytes "
                f"{limits.max_message_bytes}",
            )
        )


def check_headers(field: str, entry: Any, spec: QueueSpec, limits: Limits) -> None:
    """Headers count toward the message size, and have their own caps:
    ``limits.max_headers`` per message and ``limits.max_header_name_bytes``
    per name. ``entry`` is a SendEntry (its ``headers`` a name -> bytes map)."""
    headers = entry.headers
    if len(headers) > limits.max_headers:
        raise refuse(
            errors.InvalidArgument(
                f"{field}.headers",
                f"{len(headers)} headers; at most limits.max_headers {limits.max_headers}",
            )
        )
    size = len(entry.body)
    for name, value in headers.items():
        name_bytes = len(name.encode())
        if name_bytes > limits.max_header_name_bytes:
            raise refuse(
                errors.InvalidArgument(
                    f"{field}.headers",
                    f"a name of {name_bytes} bytes; at most limits.max_header_name_bytes "
                    f"{limits.max_header_name_bytes}",
                )
            )
        size += name_bytes + len(value)
    cap = min(spec.max_message_bytes, limits.max_message_bytes)
    if size > cap:
        raise refuse(
            errors.InvalidArgument(
                f"{field}.headers",
                f"body and headers are {size} bytes; over the queue's max_message_bytes {cap}",
            )
        )


def message_bytes(message: Any) -> int:
    """What one delivered message costs an answer: body, key, headers."""
    size = len(message.body) + len(message.key)
    for name, value in message.headers.items():
        size += len(name) + len(value)
    return size


def within_bytes(messages: Sequence[Any], cap: int) -> int:
    """How many of ``messages`` (Message protobufs or answer.RunItems, in order) fit in ``cap``
    bytes; at least one, so a message that alone is over the cap (it passed
    max_message_bytes) still gets delivered."""
    if answer_bytes(messages) <= cap:  # the usual answer: all fit (a bound of
        return len(messages)  # body, key, headers by C loops, 1/4 of the walk below)
    total = 0
    for i, message in enumerate(messages):
        total += message_bytes(message)
        if total > cap and i > 0:
            return i
    return len(messages)
