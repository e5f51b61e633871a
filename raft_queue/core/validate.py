"""Field checks for command dataclasses: each raises InvalidArgument(field).

They run in ``__post_init__`` on the leader (before a command enters Raft)
and again on decode, so they are cheap: type and range tests only.
"""

from __future__ import annotations

from typing import Any

from raft_queue.config import DAY_MS, MAX_MESSAGE_DELAY_MS
from raft_queue.config import MAX_QUEUE_DELAY_MS as MAX_QUEUE_DELAY_MS
from raft_queue.core.wire import U32_MAX, U64_MAX
from raft_queue.errors import InvalidArgument

# Consumer group names are table keys as they are (LMDB allows 511 bytes);
# consumer ids are kept in each record's delivery history.
MAX_GROUP_BYTES = 255


def uint64(field: str, value: Any) -> None:
    if type(value) is not int or not 0 <= value <= U64_MAX:
        raise InvalidArgument(field, f"must be an integer in [0, 2**64), got {value!r}")


# The delay limits have one home, config.py (a queue's delay is a QueueSpec field).
MAX_DELAY_MS = MAX_MESSAGE_DELAY_MS


def describe_ms(ms: int) -> str:
    """``ms`` for an error text: "3653 days (10 years)", "365 days", "12 h"."""
    if ms % DAY_MS == 0:
        days = ms // DAY_MS
        return f"{days} days (10 years)" if days == 3653 else f"{days} days"
    return f"{ms / 3_600_000:g} h" if ms % 3_600_000 == 0 else f"{ms} ms"


def delay(field: str, value: Any, max_ms: int) -> None:
    """A delay in milliseconds, at most ``max_ms``; the error names the limit."""
    if type(value) is not int or not 0 <= value <= max_ms:
        raise InvalidArgument(
            field, f"must be 0 to {max_ms} ms (at most {describe_ms(max_ms)}), got {value!r}"
        )


def uint32(field: str, value: Any) -> None:
    if type(value) is not int or not 0 <= value <= U32_MAX:
        raise InvalidArgument(field, f"must be an integer in [0, 2**32), got {value!r}")


def boolean(field: str, value: Any) -> None:
    if type(value) is not bool:
        raise InvalidArgument(field, f"must be a bool, got {value!r}")


def string(field: str, value: Any) -> None:
    if type(value) is not str:
        raise InvalidArgument(field, f"must be a str, got {type(value).__name__}")


def text(field: str, value: Any, max_bytes: int) -> None:
    """A str of at most ``max_bytes`` bytes of UTF-8."""
    string(field, value)
    if len(value) > max_bytes // 4 and len(value.encode()) > max_bytes:
        raise InvalidArgument(field, f"longer than {max_bytes} bytes of UTF-8")


def headers(value: Any, max_count: int) -> None:
    if type(value) is not tuple:
        raise InvalidArgument("headers", "must be a tuple of (str, bytes) pairs")
    if len(value) > max_count:
        raise InvalidArgument("headers", f"more than {max_count}")
    for pair in value:
        if (
            type(pair) is not tuple
            or len(pair) != 2
            or type(pair[0]) is not str
            or type(pair[1]) is not bytes
        ):
            raise InvalidArgument("headers", f"not a (str, bytes) pair: {pair!r}")


def tuple_of(field: str, value: Any, kinds: type | tuple[type, ...]) -> None:
    if type(value) is not tuple:
        raise InvalidArgument(field, f"must be a tuple, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, kinds) or isinstance(item, bool):
            raise InvalidArgument(field, f"unexpected element {type(item).__name__}")
