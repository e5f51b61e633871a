"""One recorded consume loop for the tests and campaigns that check a queue
under faults with ``chaos.checker``: receive, record what came, ack it, record
which acks took, until told to stop. A call that fails is ``info`` (it may
have landed) and the next call starts a new logical process (chaos.history).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from chaos.history import History


def delivery(m: Any) -> dict[str, Any]:
    """What a receive records of one message (the checker's fields)."""
    return {"partition": m.partition, "offset": m.offset, "payload": m.body.decode(),
            "key": m.key, "receipt": m.receipt}  # fmt: skip


def consume_recorded(
    history: History,
    client: Any,
    queue: str,
    stop: threading.Event,
    max_messages: int = 10,
    seen: Callable[[Any], dict[str, Any]] = delivery,
    f: str = "receive",
) -> int:
    """Receive (recorded as ``f``) and ack until ``stop``; how many acks took."""
    process, acked = history.new_process_id(), 0
    while not stop.is_set():
        op = history.invoke(process, f, queue=queue)
        try:
            got = client.receive(queue, max_messages=max_messages, visibility_ms=5000, wait_ms=200)
        except Exception as exc:
            history.complete(op, "info", error=repr(exc))
            process = history.new_process_id()
            continue
        value = [seen(m) for m in got]
        history.complete(op, "ok", value)
        if not got:
            continue
        op = history.invoke(process, "ack", value, queue=queue)
        try:
            results = client.ack(queue, got)
        except Exception as exc:
            history.complete(op, "info", error=repr(exc))
            process = history.new_process_id()
            continue
        done = [v for v, r in zip(value, results, strict=True) if r.ok]
        history.complete(op, "ok", done)
        acked += len(done)
    return acked
