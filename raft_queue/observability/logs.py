"""Logging: ``log_format = "text"`` (human) or ``"json"`` (one object a line).

A JSON line carries the time, level, logger, message, the node id, and,
where the code runs on behalf of a request, its request id, queue and
partition. Those come from context variables the RPC interceptor
(server/api/metrics.py) sets for the task serving each call, so every log
call below it (the servicers, the send and receive paths) carries them with
no extra argument. The audit log (security) is the logger ``AUDIT`` names:
it goes through the same handler and format.

    {"ts": "2026-11-25T21:40:01.123Z", "level": "INFO", "logger": "raft_queue.node",
     "node": "n1", "msg": "node n1 serving gRPC on 127.0.0.1:7001"}
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import time
import traceback
from typing import Any

AUDIT = "raft_queue.audit"  # the audit log's logger name: logging.getLogger(AUDIT)

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
queue: contextvars.ContextVar[str] = contextvars.ContextVar("queue", default="")
partition: contextvars.ContextVar[int | None] = contextvars.ContextVar("partition", default=None)

_json_enabled = False


def json_enabled() -> bool:
    """Whether the interceptor should fill the request context (json logs)."""
    return _json_enabled


class JsonFormatter(logging.Formatter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "logger": record.name,
            "node": self.node_id,
            "msg": record.getMessage(),
        }
        rid = request_id.get()
        if rid:
            out["request_id"] = rid
        q = queue.get()
        if q:
            out["queue"] = q
        part = partition.get()
        if part is not None:
            out["partition"] = part
        extra = getattr(record, "audit", None)
        if isinstance(extra, dict):  # audit events: logger AUDIT, extra={"audit": {...}}
            out["audit"] = extra
        if record.exc_info:
            out["exc"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(out, default=str, separators=(",", ":"))


def _iso(created: float) -> str:
    ms = int(created * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{ms:03d}Z"


def setup(level: str, log_format: str, node_id: str) -> None:
    """Configure the root logger once, at node start."""
    global _json_enabled
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(node_id))
        _json_enabled = True
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    logging.getLogger("pysyncobj").setLevel(logging.ERROR)
