"""Leases carried across a queue move (docs/operations.md "Moving a queue
between clusters"): the ``CarryLeases`` command that leases copied records
on the target until their source leases' deadlines.

A record leased at the source when the fence came is copied to the target
and, by this command, is in flight there too: until the source lease's
deadline, with the source's receive count, as epoch 1 of the target (nobody
holds a target receipt; the mover settles it with ``ReceiptRef(offset, 1)``
as the source consumer settles the source lease). On a FIFO queue it is its
key's head, so the key's later copies wait behind it as they did at the
source.

The target takes no Lease before the cut-over, so the carried offsets lie at
or after the cursor. The command walks the cursor to just past the last of
them as a Lease would, leasing the carried ones with their own deadlines and
leaving the others as a Lease walk sets aside what it does not lease: READY
(visible), BLOCKED (FIFO, its key has a head) or WAITING (delayed). A
carried offset below the cursor (the command applied before) or past the log
is skipped: carrying twice changes nothing. Pure: the command and its
codec here (codec imports it), its apply in ``core/carrying.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from raft_queue.core import validate as v
from raft_queue.core.wire import Reader, put_uvarint
from raft_queue.errors import InvalidArgument

#: Leases in one CarryLeases (one Raft entry).
MAX_CARRIED = 10_000
#: The consumer a carried lease's history names.
CARRIED_BY = "moved"
#: The epoch of a carried lease on the target (the record's first lease there).
CARRIED_EPOCH = 1


@dataclass(frozen=True, slots=True)
class CarriedLease:
    offset: int  # the copy's offset on the target
    deadline_ms: int  # the source lease's deadline (wall clock, ms)
    receive_count: int  # the source's, this lease included (>= 1)


@dataclass(frozen=True, slots=True)
class CarryLeases:
    """Lease the copies at ``leases`` (ascending offsets) until their deadlines."""

    leases: tuple[CarriedLease, ...]
    now_ms: int

    def __post_init__(self) -> None:
        v.tuple_of("leases", self.leases, CarriedLease)
        if len(self.leases) > MAX_CARRIED:
            raise InvalidArgument("leases", f"at most {MAX_CARRIED} per command")
        last = -1
        for i, lease in enumerate(self.leases):
            v.uint64(f"leases[{i}].offset", lease.offset)
            v.uint64(f"leases[{i}].deadline_ms", lease.deadline_ms)
            v.uint32(f"leases[{i}].receive_count", lease.receive_count)
            if lease.offset <= last:
                raise InvalidArgument(f"leases[{i}].offset", "offsets must be ascending, unique")
            if lease.receive_count < 1:
                raise InvalidArgument(f"leases[{i}].receive_count", "must be >= 1")
            last = lease.offset
        v.uint64("now_ms", self.now_ms)


def encode_carry(buf: bytearray, c: CarryLeases) -> None:
    put_uvarint(buf, c.now_ms)
    put_uvarint(buf, len(c.leases))
    for x in c.leases:
        put_uvarint(buf, x.offset)
        put_uvarint(buf, x.deadline_ms)
        put_uvarint(buf, x.receive_count)


def decode_carry(r: Reader) -> CarryLeases:
    now_ms, count = r.uvarint(), r.uvarint()
    if count > MAX_CARRIED:
        raise InvalidArgument("leases", f"at most {MAX_CARRIED} per command")
    leases = tuple(CarriedLease(r.uvarint(), r.uvarint(), r.uvarint()) for _ in range(count))
    return CarryLeases(leases, now_ms)
