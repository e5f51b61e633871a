"""Redrive: move messages from a dead-letter queue back to a queue, rate-limited.

As SQS's StartMessageMoveTask: each message is received from the DLQ, sent
to the target with its body, key and headers (minus the ``raftq-dlq-*``
headers the move to the DLQ added), then acked on the DLQ. The send carries
the dedup id ``redrive:<the DLQ message's dedup id>``, so a redrive that is
interrupted and run again does not duplicate what it already moved (within
the target's dedup window). A message whose send fails stays in the DLQ
(its lease expires).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raft_queue.client.models import Message, OutgoingMessage
from raft_queue.errors import InvalidArgument

if TYPE_CHECKING:
    from raft_queue.client.client import Client

DLQ_HEADER_PREFIX = "raftq-dlq-"
BATCH = 100
LEASE_MS = 60_000


@dataclass(frozen=True, slots=True)
class RedriveProgress:
    moved: int
    remaining: int  # messages the DLQ still reports (best effort)
    elapsed_s: float


def back_to_source(message: Message) -> OutgoingMessage:
    """The message as it was before it died: DLQ headers dropped, same key."""
    headers = {k: v for k, v in message.headers.items() if not k.startswith(DLQ_HEADER_PREFIX)}
    dedup = f"redrive:{message.dedup_id or f'{message.partition}:{message.offset}'}"
    return OutgoingMessage(message.body, message.key, headers, dedup)


def redrive(
    client: Client,
    dlq: str,
    to: str,
    rate_per_s: float,
    max_messages: int | None = None,
    on_progress: Callable[[RedriveProgress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Move up to ``max_messages`` (all when None) from ``dlq`` to ``to`` at
    most ``rate_per_s`` messages per second; returns how many moved. Stops
    when the DLQ has nothing visible for a second."""
    if not rate_per_s > 0:
        raise InvalidArgument("rate", f"must be > 0 messages per second, got {rate_per_s}")
    client.get_queue(to)  # NotFound before anything is received
    start, moved = clock(), 0
    while max_messages is None or moved < max_messages:
        want = min(BATCH, max(1, int(rate_per_s)))
        if max_messages is not None:
            want = min(want, max_messages - moved)
        batch = client.receive(dlq, want, visibility_ms=LEASE_MS, wait_ms=1000, consumer="redrive")
        if not batch:
            break
        client.send_batch(to, [back_to_source(m) for m in batch])
        client.ack(dlq, batch)
        moved += len(batch)
        ahead = moved / rate_per_s - (clock() - start)
        if ahead > 0:
            sleep(ahead)
        if on_progress is not None:
            remaining = client.get_queue(dlq).messages
            on_progress(RedriveProgress(moved, remaining, clock() - start))
    return moved
