"""Pure partition logic: commands and their codec, the state machine, the KV seam.

Nothing here does I/O or reads a clock: the leader stamps time into commands
and ``storage/`` supplies the ``KVTxn``. The public names are re-exported here.
"""

from raft_queue.core.codec import decode, encode
from raft_queue.core.commands import (
    Ack,
    Append,
    Batch,
    ChangeVisibility,
    Command,
    CommitOffset,
    Configure,
    Expire,
    ForgetDead,
    Lease,
    Nack,
    NewRecord,
    PartitionConfig,
    Purge,
    ReceiptRef,
    ReceiptRun,
    Release,
)
from raft_queue.core.partition import PartitionMachine
from raft_queue.core.records import StoredRecord
from raft_queue.core.results import (
    NOT_FOUND,
    OK,
    STALE,
    AppendItem,
    AppendResult,
    ExpireResult,
    LeasedMessage,
    LeasedSpan,
    LeaseResult,
    PartitionStats,
    ReadResult,
    ReceiptsResult,
    Result,
)

__all__ = [
    "NOT_FOUND",
    "OK",
    "STALE",
    "Ack",
    "Append",
    "AppendItem",
    "AppendResult",
    "Batch",
    "ChangeVisibility",
    "Command",
    "CommitOffset",
    "Configure",
    "Expire",
    "ExpireResult",
    "ForgetDead",
    "Lease",
    "LeaseResult",
    "LeasedMessage",
    "LeasedSpan",
    "Nack",
    "NewRecord",
    "PartitionConfig",
    "PartitionMachine",
    "PartitionStats",
    "Purge",
    "ReadResult",
    "ReceiptRef",
    "ReceiptRun",
    "ReceiptsResult",
    "Release",
    "Result",
    "StoredRecord",
    "decode",
    "encode",
]
