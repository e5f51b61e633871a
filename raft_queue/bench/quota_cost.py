"""What quotas and usage cost per request (docs/benchmarks.md, "What quotas
and usage cost"): CPU time of ``Meter.before`` (the quota check) and
``Meter.after`` (the usage count), the two calls the API door adds to a
client's Send, with no quota in the cluster, with quotas for other
principals only, and with a (high) quota on the caller and its queue; for a
1-message Send and a 4,096-message one (W2's batch). The request's size
comes from the deserializer (``REQUEST_BYTES``), as in the node.
``python -m raft_queue.bench.quota_cost [REPEAT]``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import metadata as meta
from raft_queue.server.api.usage import REQUEST_BYTES, Meter

SEND = "/raft_queue.v1.QueueService/Send"


def _view(quotas: list[meta.SetQuota]) -> meta.MetadataMachine:
    view = meta.MetadataMachine()
    for cmd in quotas:
        view.apply(cmd)
    return view


def _per_call_us(meter: Meter, request: Any, response: Any, calls: int) -> float:
    before, after, wire = meter.before, meter.after, request.ByteSize()
    start = time.process_time()
    for _ in range(calls):
        REQUEST_BYTES.set(wire)  # what the door's deserializer does (len of the raw request)
        size = before("alice", SEND, request)
        after("alice", SEND, request, response, size)
    return (time.process_time() - start) / calls * 1e6


def measure(calls: int = 20_000) -> dict[str, dict[str, float]]:
    setups = {
        "no quota in the cluster": [],
        "quotas of other principals": [meta.SetQuota(f"p{i}", "", 100, 0) for i in range(100)],
        "quota on alice and alice/orders": [
            meta.SetQuota("alice", "", 10**9, 10**12),
            meta.SetQuota("alice", "orders", 10**9, 10**12),
        ],
    }
    results: dict[str, dict[str, float]] = {}
    for name, quotas in setups.items():
        view = _view(quotas)
        row = {}
        for batch in (1, 4096):
            entries = [queue_pb2.SendEntry(body=b"x" * 100) for _ in range(batch)]
            request = queue_pb2.SendRequest(queue="orders", entries=entries)
            meter = Meter(lambda view=view: view)  # type: ignore[misc]
            n = calls if batch == 1 else max(calls // 100, 50)
            row[f"batch {batch}"] = _per_call_us(meter, request, queue_pb2.SendResponse(), n)
        results[name] = row
    return results


def main(argv: list[str]) -> None:
    calls = int(argv[0]) if argv else 20_000
    for name, row in measure(calls).items():
        cells = ", ".join(f"{k}: {v:.2f} us" for k, v in row.items())
        print(f"{name}: {cells}")


if __name__ == "__main__":
    main(sys.argv[1:])
