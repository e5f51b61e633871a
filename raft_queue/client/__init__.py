"""The raft_queue SDK: ``Client`` and the values it returns.

Errors raised are the ``raft_queue.errors`` tree (re-exported by
``raft_queue``), never ``grpc.RpcError``.
"""

from raft_queue.client.aio import AsyncClient
from raft_queue.client.client import MAX_BATCH, Client
from raft_queue.client.consumer import Consumer
from raft_queue.client.managed import ManagedClient  # queues mapped by the external manager
from raft_queue.client.models import (
    ClusterStatus,
    Message,
    NodeInfo,
    OutgoingMessage,
    PartitionInfo,
    QueueConfig,
    QueueInfo,
    ReadResult,
    ReceiptResult,
    Received,
    ReplicaStatus,
    SendResult,
)
from raft_queue.client.partitioner import partition_for_key
from raft_queue.client.producer import Producer
from raft_queue.client.retry import Backoff

__all__ = [
    "MAX_BATCH",
    "AsyncClient",
    "Backoff",
    "Client",
    "Consumer",
    "ManagedClient",
    "ClusterStatus",
    "Message",
    "NodeInfo",
    "OutgoingMessage",
    "PartitionInfo",
    "Producer",
    "QueueConfig",
    "QueueInfo",
    "ReadResult",
    "ReceiptResult",
    "Received",
    "ReplicaStatus",
    "SendResult",
    "partition_for_key",
]
