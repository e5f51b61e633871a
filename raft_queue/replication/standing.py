"""Standing leases: long polls that ride on the entry that wakes them.

A Receive that found nothing on a local leader *stands*: it leaves a lease
request (consumer, max records, visibility) with the partition. When the
leader next proposes a command that may make records visible (an Append, a
Nack, ...), every standing request goes into the same Raft entries as a
Lease command right after it (``riders``). When the entry applies, the
Lease's result resolves the standing request's future, and the long poll
answers. A message sent to a waiting consumer therefore costs one Raft round
(append and lease together), not two (append; wake; lease), as a push
consumer of NATS or RabbitMQ gets it without a second trip.

A *lingering* request (server/dataplane/lingering.py) is one left for a consumer
between two of its Receives; ``claim`` puts those after every request of a
poll waiting now, so a lingering lease never takes a message from a
consumer that is there.

The Lease is an ordinary command: it is stamped with the leader's clock when
proposed, every replica applies it in log order right after the Append, and
it may find nothing (a FIFO key still in flight, a delay): the future then
resolves to an empty result and the poll stands again.

Bounds (docs/operations.md "Limits"): at most ``max_per_partition``
requests stand here, at most ``max_per_consumer`` of one named consumer;
one more is refused with ResourceExhausted naming the limit. And a waking
entry takes along only as many as it can feed (``claim``'s budget: no more
requests than the records it may make visible, and few enough to share its
one Raft entry), so 2,000 standing polls do not turn one Send into 2,000
Lease commands; the rest keep standing (and are woken by the apply as any
long poll is).

Threads: ``stand`` and ``withdraw`` run on the asyncio loop (any thread);
``claim`` runs on the driver thread. A request is claimed at most once; after
``withdraw`` returned False its lease was (or is being) taken, and the caller
must give back what the future brings (see server/dataplane/receiving.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from raft_queue import errors
from raft_queue.core import commands
from raft_queue.observability import metrics


@dataclass(eq=False)
class Standing:
    consumer: str
    max_records: int
    visibility_ms: int
    deadline: float  # monotonic: the claim is not proposed after this
    lingering: bool = False  # left for the consumer's next Receive: claimed last
    future: Future[Any] = field(default_factory=Future)


class StandingLeases:
    def __init__(self, max_per_partition: int = 4096, max_per_consumer: int = 64) -> None:
        self._lock = threading.Lock()
        # Insertion-ordered, O(1) withdraw (a waiting poll re-stands every
        # RECHECK_S: thousands of stands and withdraws a second).
        self._waiting: dict[Standing, None] = {}
        self._per_consumer: dict[str, int] = {}
        self.max_per_partition = max_per_partition
        self.max_per_consumer = max_per_consumer
        # Called after a request stands (on its thread): the partition may
        # want to propose it at once (PartitionReplica._stood).
        self.on_stand: Callable[[], None] | None = None

    def stand(
        self,
        consumer: str,
        max_records: int,
        visibility_ms: int,
        timeout_s: float,
        lingering: bool = False,
    ) -> Standing:
        deadline = time.monotonic() + timeout_s
        request = Standing(consumer, max_records, visibility_ms, deadline, lingering)
        with self._lock:
            self._check_room(consumer)
            self._waiting[request] = None
            if consumer:
                self._per_consumer[consumer] = self._per_consumer.get(consumer, 0) + 1
        hook = self.on_stand
        if hook is not None:
            hook()
        return request

    def _check_room(self, consumer: str) -> None:
        """Under the lock: refuse one more request over a bound."""
        if len(self._waiting) >= self.max_per_partition:
            metrics.count_rejection("limits")
            raise errors.ResourceExhausted(
                f"{len(self._waiting)} long polls stand on this partition "
                f"(limits.max_standing_polls_per_partition {self.max_per_partition})"
            )
        if consumer:
            mine = self._per_consumer.get(consumer, 0)
            if mine >= self.max_per_consumer:
                metrics.count_rejection("limits")
                raise errors.ResourceExhausted(
                    f"consumer {consumer!r} has {mine} long polls standing on this partition "
                    f"(limits.max_standing_polls_per_consumer {self.max_per_consumer})"
                )

    def withdraw(self, request: Standing) -> bool:
        """True if ``request`` was still waiting (no lease will be taken for it)."""
        with self._lock:
            try:
                del self._waiting[request]
            except KeyError:
                return False
            self._gone(request)
        request.future.cancel()
        return True

    def __len__(self) -> int:
        return len(self._waiting)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def claim(
        self,
        now_ms: Callable[[], int],
        max_requests: int | None = None,
        max_records: int | None = None,
    ) -> list[tuple[commands.Lease, Future[Any], float]]:
        """Driver thread: live requests as (Lease, its future, deadline), at
        most ``max_requests`` of them and no more once their max_records add
        up to ``max_records``; the rest keep standing, in order."""
        now = time.monotonic()
        out: list[tuple[commands.Lease, Future[Any], float]] = []
        with self._lock:
            waiting = sorted(self._waiting, key=_lingering_last)
            keep: list[Standing] = []
            records = 0
            for r in waiting:
                if r.deadline <= now:
                    r.future.cancel()  # its poll is over: nothing taken
                    continue
                full = (max_requests is not None and len(out) >= max_requests) or (
                    max_records is not None and records >= max_records
                )
                if full:
                    keep.append(r)
                    continue
                if not r.future.set_running_or_notify_cancel():
                    continue
                records += r.max_records
                lease = commands.Lease(r.consumer, r.max_records, r.visibility_ms, now_ms())
                out.append((lease, r.future, r.deadline))
            self._waiting = dict.fromkeys(keep)
            for r in waiting:
                if r not in self._waiting:
                    self._gone(r)
        return out

    def _gone(self, request: Standing) -> None:
        """Under the lock: ``request`` no longer stands."""
        if request.consumer:
            left = self._per_consumer[request.consumer] - 1
            if left:
                self._per_consumer[request.consumer] = left
            else:
                del self._per_consumer[request.consumer]


def _lingering_last(request: Standing) -> bool:
    return request.lingering
