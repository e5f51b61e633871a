"""Usage data (pure): counters per principal x queue x hour x operation.

A node counts what it serves in memory (server/api/usage.py: a dict
increment per request) and flushes a batch to the metadata group as one
``RecordUsage`` command carrying its node id and a flush sequence number.
The machine remembers the last sequence applied per node and ignores a batch
whose sequence is not newer, so a retried flush is never counted twice.
Hours older than ``KEEP_HOURS`` before the newest hour recorded are dropped
(deterministically: by the data, not a clock).
"""

from __future__ import annotations

from collections.abc import Iterable

from raft_queue import errors

SEND, RECEIVE, ACK, READ = "send", "receive", "ack", "read"
REJECTED_AUTH, REJECTED_QUOTA = "rejected_auth", "rejected_quota"
OPERATIONS = (SEND, RECEIVE, ACK, READ, REJECTED_AUTH, REJECTED_QUOTA)
HOUR_MS = 3_600_000
KEEP_HOURS = 24 * 31

#: (principal, queue, hour start in ms since the epoch, operation)
Key = tuple[str, str, int, str]
#: [requests, messages, bytes]
Counts = list[int]
#: A flushed row: (principal, queue, hour_ms, op, requests, messages, bytes)
Row = tuple[str, str, int, str, int, int, int]


def hour_of(now_ms: int) -> int:
    return now_ms - now_ms % HOUR_MS


def to_rows(counts: dict[Key, Counts]) -> tuple[Row, ...]:
    return tuple((*k, *v) for k, v in sorted(counts.items()))  # type: ignore[misc]


def check_rows(rows: Iterable[Row]) -> None:
    for row in rows:
        if len(row) != 7 or row[3] not in OPERATIONS or any(int(n) < 0 for n in row[4:]):
            raise errors.InvalidArgument("rows", f"bad usage row {row!r}")


def merge(table: dict[Key, Counts], rows: Iterable[Row]) -> None:
    """Add ``rows`` into ``table`` (in place), then drop hours older than
    KEEP_HOURS before the newest hour in the table."""
    for principal, queue, hour, op, requests, messages, nbytes in rows:
        counts = table.setdefault((principal, queue, int(hour), op), [0, 0, 0])
        counts[0] += int(requests)
        counts[1] += int(messages)
        counts[2] += int(nbytes)
    if table:
        newest = max(k[2] for k in table)
        for key in [k for k in table if k[2] < newest - KEEP_HOURS * HOUR_MS]:
            del table[key]


def select(
    table: dict[Key, Counts], principal: str = "", queue: str = "", since_ms: int = 0
) -> list[Row]:
    """Rows matching the filters ("" = any), by principal, queue, hour, op.
    Copies the table in one C call first (another thread may be merging)."""
    return [
        (*k, *v)  # type: ignore[misc]
        for k, v in sorted(list(table.items()))
        if (not principal or k[0] == principal)
        and (not queue or k[1] == queue)
        and k[2] + HOUR_MS > since_ms
    ]
