"""The audit log: one JSON line per manage or admin operation and per
refused call (failed authentication or authorization), as Kafka's
authorizer log and RabbitMQ's ``rabbitmq_event_exchange`` give operators.

Line: ``{"time": ISO-8601 UTC, "principal", "operation", "method", "queue",
"result": "ok" | "denied" | "unauthenticated" | <gRPC code name>, "peer",
"target"}`` (``target``: what an audited call names, e.g. the principal of
a CreatePrincipal).

Off the hot path: ``record`` only puts a dict on a queue; one writer thread
formats, appends and flushes (no fsync: an audit line is not worth a disk
sync per call, and sends are not audited at all). The file is created 0600.

Each event also goes through the node's logging, on the logger
``raft_queue.audit`` (observability/logs.py ``AUDIT``) with the event as
``extra={"audit": ...}``: with ``log_format = "json"`` it is one structured
line beside the node's other logs, for a log shipper to pick up.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
# observability/logs.py AUDIT: the structured log's audit events.
audit_log = logging.getLogger("raft_queue.audit")

FILE_NAME = "audit.log"


class AuditLog:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.chmod(self.path, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_forever, name="audit", daemon=True)
        self._thread.start()

    def record(
        self, principal: str, operation: str, method: str, queue_name: str, result: str,
        peer: str, target: str = "",
    ) -> None:  # fmt: skip
        """Queue one line (any thread; never blocks on disk)."""
        now = time.time()
        millis = f".{int(now * 1000) % 1000:03d}Z"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + millis
        event = {
            "time": stamp,
            "principal": principal, "operation": operation, "method": method,
            "queue": queue_name, "result": result, "peer": peer, "target": target,
        }  # fmt: skip
        self._queue.put(event)
        audit_log.info(
            "audit %s %s %s: %s", principal or "-", operation, queue_name or "-", result,
            extra={"audit": event},
        )  # fmt: skip

    def _write_forever(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                break
            lines = [item]
            while not self._queue.empty():  # a burst: one flush for all of it
                nxt = self._queue.get()
                if nxt is None:
                    self._queue.put(None)
                    break
                lines.append(nxt)
            try:
                self._file.write("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
                self._file.flush()
            except OSError as exc:
                log.error("audit log write failed: %s", exc)

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued, then stop the writer."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._file.close()
