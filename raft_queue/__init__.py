"""raft_queue: a distributed message queue where every partition is a Raft group.

``from raft_queue import Client`` is the SDK entry point; the error classes
are re-exported so callers can ``except raft_queue.NotLeader``.

The SDK names are imported lazily (PEP 562): ``raft_queue.core`` and
``raft_queue.storage`` are pure and must not pull grpc in just because
their parent package is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raft_queue.errors import (
    AlreadyExists,
    ConfigError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    NotLeader,
    OutcomeUnknown,
    OutOfRange,
    QueueError,
    ResourceExhausted,
    Unavailable,
    VersionMismatch,
)

if TYPE_CHECKING:
    from raft_queue.client import (
        Client,
        ClusterStatus,
        Message,
        OutgoingMessage,
        PartitionInfo,
        QueueConfig,
        QueueInfo,
        ReadResult,
        ReceiptResult,
        SendResult,
    )

_SDK_NAMES = frozenset(
    {
        "Client",
        "ClusterStatus",
        "Message",
        "OutgoingMessage",
        "PartitionInfo",
        "QueueConfig",
        "QueueInfo",
        "ReadResult",
        "ReceiptResult",
        "SendResult",
    }
)


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        from raft_queue import client

        return getattr(client, name)
    raise AttributeError(f"module 'raft_queue' has no attribute {name!r}")


__all__ = [
    "AlreadyExists",
    "Client",
    "ClusterStatus",
    "ConfigError",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "Message",
    "NotFound",
    "NotLeader",
    "OutOfRange",
    "OutcomeUnknown",
    "OutgoingMessage",
    "PartitionInfo",
    "QueueConfig",
    "QueueError",
    "QueueInfo",
    "ReadResult",
    "ReceiptResult",
    "ResourceExhausted",
    "SendResult",
    "Unavailable",
    "VersionMismatch",
]
