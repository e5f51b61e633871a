"""Receipts: Ack, Nack and ChangeVisibility of leased records (as SQS's
DeleteMessage, ChangeMessageVisibility with 0, and ChangeMessageVisibility).

A receipt names a record and the lease epoch it was given; only the current
epoch's receipt acts. Receipts come in runs (``commands.ReceiptRun``: one
lease's records in order are one run), and a run is settled as one range
per run of records in one state (``runs``), with outcomes run-length
encoded in receipt order: a whole lease acked is a couple of rows.
"""

from __future__ import annotations

from collections.abc import Callable

from raft_queue.core import runs
from raft_queue.core.commands import ReceiptRun
from raft_queue.core.delivery import exhausted, kill, later, mature, release_range
from raft_queue.core.results import NOT_FOUND, OK, STALE, ReceiptsResult
from raft_queue.core.state import Run, Status, View, without_last_event

# An action on records [lo, hi) of the run (start, run), all of the receipt's epoch.
Action = Callable[[View, int, Run, int, int], None]


class _Outcomes:
    """Outcomes in receipt order, run-length encoded as they come."""

    __slots__ = ("runs",)

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []

    def add(self, outcome: str, n: int) -> None:
        if n <= 0:
            return
        if self.runs and self.runs[-1][0] == outcome:
            self.runs[-1] = (outcome, self.runs[-1][1] + n)
        else:
            self.runs.append((outcome, n))


def settle(view: View, receipts: tuple[ReceiptRun, ...], action: Action) -> ReceiptsResult:
    """Apply ``action`` to each receipt that names the record's current lease
    epoch; the others get STALE or NOT_FOUND. A lease whose deadline passed
    but which was not re-leased still counts (as SQS). A receipt run is
    settled as one range per run of records it covers."""
    mature(view)
    out = _Outcomes()
    for receipt in receipts:
        _settle_run(view, receipt, action, out)
    return ReceiptsResult(tuple(out.runs))


def _settle_run(view: View, receipt: ReceiptRun, action: Action, out: _Outcomes) -> None:
    c = view.c
    lo, hi = receipt.start, receipt.start + receipt.count
    a, b = max(lo, c.earliest), min(hi, c.cursor)
    if a >= b:
        out.add(NOT_FOUND, receipt.count)
        return
    out.add(NOT_FOUND, a - lo)
    pos, hits = a, []
    for start, run in runs.overlapping(view, a, b):
        s, e = max(start, a), min(start + run.length, b)
        out.add(NOT_FOUND, s - pos)  # in no run: finished
        if run.status == Status.DEAD or run.epoch == 0:
            out.add(NOT_FOUND, e - s)
        elif run.epoch != receipt.epoch:
            out.add(STALE, e - s)
        else:
            out.add(OK, e - s)
            hits.append((s, e))
        pos = e
    out.add(NOT_FOUND, hi - pos)
    for s, e in hits:
        # Looked up again: an earlier action may have merged this run away
        # (into one of the very same state), never changed its records.
        held = runs.at(view, s)
        if held is not None:
            action(view, held[0], held[1], s, e)


def ack(view: View, start: int, run: Run, lo: int, hi: int) -> None:
    if lo == start and hi == start + run.length:  # the usual ack: the whole run
        runs.drop(view, start, run)
    else:
        runs.reshape(view, start, run, lo, hi, None)
    view.c.done += hi - lo
    release_range(view, lo, hi)


def nack_action(delay_ms: int) -> Action:
    """End the lease now; visible again after ``delay_ms``. A record that has
    used its ``max_receives`` leases dies instead (a nack ends its last lease)."""

    def nack(view: View, start: int, run: Run, lo: int, hi: int) -> None:
        if exhausted(view, run):
            kill(view, start, run, lo, hi)
        elif delay_ms == 0:
            runs.reshape(view, start, run, lo, hi, run.becomes(Status.READY))
        else:
            new = run.becomes(Status.WAITING, later(view.now, delay_ms))
            runs.reshape(view, start, run, lo, hi, new)

    return nack


def release(view: View, start: int, run: Run, lo: int, hi: int) -> None:
    """Undo the lease (still running): READY, with the receive count and
    history it had before. The epoch still moves on, so the undone lease's
    receipts are stale from now on and no receipt is ever issued twice. A
    lease already ended keeps its count."""
    if run.status != Status.LEASED:
        return
    new = Run(
        Status.READY,
        run.epoch + 1,
        max(0, run.receive_count - 1),
        0,
        run.length,
        without_last_event(run.history),
    )
    runs.reshape(view, start, run, lo, hi, new)


def visibility_action(visibility_ms: int) -> Action:
    """Leased until ``now + visibility_ms`` (0: the lease ends now)."""

    def change(view: View, start: int, run: Run, lo: int, hi: int) -> None:
        new = run.becomes(Status.LEASED, later(view.now, visibility_ms))
        runs.reshape(view, start, run, lo, hi, new)

    return change
