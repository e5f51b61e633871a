"""The one QueueError tree.

Every error the system raises on purpose is a QueueError subclass. Each class
says when it is raised and whether a client may retry it. Only
``server/api/status.py`` maps these to gRPC status codes; the client holds the
reverse map (``client/errors.py``). Library errors are translated where they
enter (``raise ... from exc``).
"""

from __future__ import annotations

from collections.abc import Callable


class QueueError(Exception):
    """Base of every deliberate error. ``retryable``: a retry may succeed."""

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(QueueError):
    """Bad input. ``field`` names the offending field; nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ConfigError(InvalidArgument):
    """A configuration file or value is invalid (raised at load time)."""


class NotFound(QueueError):
    """The named queue, partition, node or message does not exist."""

    # Set (server side) when the miss was read from this node's metadata view,
    # which may be behind its leader: how to look again once caught up. The
    # server answers NOT_FOUND only after vouching for the view
    # (server/control/metadata_barrier.py); never sent over the wire.
    found_now: Callable[[], bool] | None = None
    # The missing QUEUE's name, when the queue itself does not exist here
    # (server side: only such a miss may be redirected, server/control/redirects.py).
    queue: str = ""
    # A redirect: the queue is not in ``cluster``, which the external manager
    # at ``manager`` (gRPC addresses, comma-separated) manages; route through
    # it (trailers raftq-cluster / raftq-manager; the SDK follows them,
    # client/redirect.py). "" when the cluster is unmanaged.
    cluster: str = ""
    manager: str = ""


class AlreadyExists(QueueError):
    """Create of something that already exists with a different definition."""


class FailedPrecondition(QueueError):
    """The request is valid but the state does not allow it (stale receipt, ...)."""


class PartitionSealed(FailedPrecondition):
    """A send placed on a partition that was split (sealed): the sender's
    partition map is older than the queue's. The same request would fail
    again (not retryable as it is); placed again from a fresh map
    (GetPartitions) it succeeds, and the SDK does that by itself."""


class NotLeader(QueueError):
    """This replica is not the leader. ``leader`` is the leader's gRPC address if known.

    Retryable: the client re-routes to ``leader`` (or rediscovers).
    """

    retryable = True

    def __init__(self, message: str, leader: str = "") -> None:
        super().__init__(message)
        self.leader = leader


class Unavailable(QueueError):
    """No quorum, no leader yet, or a node is unreachable. Retryable."""

    retryable = True


class OutcomeUnknown(QueueError):
    """The command may or may not have been applied (timed out after it was sent).

    Retryable only for idempotent requests (sends carry dedup ids, so they are).
    """

    retryable = True


class OutOfRange(QueueError):
    """Read below the earliest retained offset (as Kafka's OffsetOutOfRange)."""


class ResourceExhausted(QueueError):
    """A limit was hit (rate, queue full, message too large in aggregate)."""

    retryable = True


class OverQuota(ResourceExhausted):
    """A principal's quota is spent (docs/operations.md "Quotas and usage").
    Nothing was applied; ``retry_after_ms`` says when the same request would
    pass (the ``retry-after-ms`` trailer; the SDK waits that long and retries)."""

    def __init__(self, message: str, retry_after_ms: int = 0) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class Internal(QueueError):
    """A bug or an unexpected library failure; logged with its traceback."""


class OldEntryFormat(Internal):
    """A Raft entry or journal in another entry format (a pickle from before
    entry format 2, replication/entries.py): refused, never unpickled."""


class VersionMismatch(QueueError):
    """A dependency is not the exact version our fixes depend on."""


class Unauthenticated(QueueError):
    """The caller did not prove who it is: a client without a valid bearer
    token (none, invalid, rotated or deleted), or a node-to-node call without
    a valid node signature. Nothing was read or written."""


class PermissionDenied(QueueError):
    """The caller's grants do not allow this operation on this queue; the
    message names both. Nothing was read or written."""
