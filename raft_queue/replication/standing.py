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

A *lingering* request (server/lingering.py) is one left for a consumer
between two of its Receives; ``claim`` puts those after every request of a
poll waiting now, so a lingering lease never takes a message from a
consumer that is there.

The Lease is an ordinary command: it is stamped with the leader's clock when
proposed, every replica applies it in log order right after the Append, and
it may find nothing (a FIFO key still in flight, a delay): the future then
resolves to an empty result and the poll stands again.

Threads: ``stand`` and ``withdraw`` run on the asyncio loop (any thread);
``claim`` runs on the driver thread. A request is claimed at most once; after
``withdraw`` returned False its lease was (or is being) taken, and the caller
must give back what the future brings (see server/receiving.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from raft_queue.core import commands


@dataclass(eq=False)
class Standing:
    consumer: str
    max_records: int
    visibility_ms: int
    deadline: float  # monotonic: the claim is not proposed after this
    lingering: bool = False  # left for the consumer's next Receive: claimed last
    future: Future[Any] = field(default_factory=Future)


class StandingLeases:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Standing] = []
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
            self._waiting.append(request)
        hook = self.on_stand
        if hook is not None:
            hook()
        return request

    def withdraw(self, request: Standing) -> bool:
        """True if ``request`` was still waiting (no lease will be taken for it)."""
        with self._lock:
            try:
                self._waiting.remove(request)
            except ValueError:
                return False
        request.future.cancel()
        return True

    def __len__(self) -> int:
        return len(self._waiting)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def claim(self, now_ms: Callable[[], int]) -> list[tuple[commands.Lease, Future[Any], float]]:
        """Driver thread: every live request as (Lease, its future, deadline)."""
        with self._lock:
            taken, self._waiting = self._waiting, []
        taken.sort(key=_lingering_last)
        now = time.monotonic()
        out = []
        for r in taken:
            if r.deadline <= now:
                r.future.cancel()  # its poll is over: nothing taken
                continue
            if not r.future.set_running_or_notify_cancel():
                continue
            lease = commands.Lease(r.consumer, r.max_records, r.visibility_ms, now_ms())
            out.append((lease, r.future, r.deadline))
        return out


def _lingering_last(request: Standing) -> bool:
    return request.lingering
