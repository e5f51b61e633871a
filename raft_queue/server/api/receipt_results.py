"""The answer to Ack, Nack and ChangeVisibility: one result per receipt, or
only the failed ones (``failures_only``), with a reason a person can act on."""

from __future__ import annotations

from typing import Any

from raft_queue._proto.raft_queue.v1 import queue_pb2

STALE_REASON = "stale receipt: the lease expired and the message was received again since"
NOT_FOUND_REASON = "not found: already acked, dead-lettered, expired or purged"


_REASONS = {"stale": STALE_REASON, "not_found": NOT_FOUND_REASON}


def receipts_response(request: Any, results: list[Any]) -> Any:
    """The ReceiptsResponse for ``Receiver.settle``'s results: in full, or,
    if the request asked for ``failures_only``, the failed receipts only
    (with their indexes): an ack of a whole lease answers with nothing."""
    out = queue_pb2.ReceiptsResponse()
    receipts = request.receipts
    if not request.failures_only:
        out.results.extend(_result_pb(receipts[i], r) for i, r in enumerate(results))
        return out
    out.failures_only = True
    for i, r in enumerate(results):
        if r != "ok" and (type(r) is str or not r.ok):
            out.failed.append(i)
            out.results.append(_result_pb(receipts[i], r))
    return out


def _result_pb(receipt: str, result: Any) -> Any:
    return receipt_result(receipt, result) if type(result) is str else result


def receipt_result(receipt: str, outcome: str) -> Any:
    if outcome == "ok":  # the usual case first: one per acked message
        return queue_pb2.ReceiptResult(receipt=receipt, ok=True)
    lowered = outcome.lower()
    if lowered == "ok":
        return queue_pb2.ReceiptResult(receipt=receipt, ok=True)
    return queue_pb2.ReceiptResult(receipt=receipt, ok=False, error=_REASONS.get(lowered, outcome))
