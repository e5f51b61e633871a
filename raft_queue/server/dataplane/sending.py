"""The send path: validate, place, append on each partition leader (or forward).

Used by QueueService.Send and by housekeeping (dead letters moving to their
dead-letter queue), so both get the same validation, placement and
durability reporting.

Placement of an entry: its explicit ``partition``, else the hash of its
``key``, else the hash of its ``dedup_id`` (so a repeated send of the same
dedup id lands on the partition that remembers it, and the duplicate is
found), else round robin. The key rule is core/placement_keys.py's, over
the queue's layout once it was split: a key goes to the open partition whose
range holds its hash, and an explicit partition that is sealed is refused
(PartitionSealed: the sender's partition map is stale) by that partition's
own Raft group, before anything else of the request is appended; the group
answers a retry of an Append it stored before its seal (same request id)
with the first answer, so a lost answer across the seal stores nothing twice.

A request id (``SendRequest.request_id``, the SDK's idempotency key of one
Send RPC) goes into every partition's Append, and with the entries when
they are forwarded: each partition remembers it once per Append, and a retry
of the RPC gets the first attempt's offsets back as duplicates.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.core import commands as cmd
from raft_queue.core.placement_keys import Layout, partition_for_key
from raft_queue.core.segments import Summary
from raft_queue.observability import metrics
from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.server.api import convert
from raft_queue.server.api.packed import PackedEntries
from raft_queue.server.cluster import Cluster

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord


def now_ms() -> int:
    return int(time.time() * 1000)


class Sender:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.limits = cluster.node.config.limits

    def place(self, i: int, entry: Any, partitions: int | Layout) -> int:
        """The partition of ``entries[i]`` (see the module doc): ``partitions``
        is the count of a queue never split, else its layout."""
        if isinstance(partitions, Layout):
            return self._place_split(i, entry, partitions)
        if entry.HasField("partition"):
            return convert.check_range(
                entry.partition, 0, partitions - 1, f"entries[{i}].partition"
            )
        if entry.key:
            return partition_for_key(entry.key, partitions)
        if entry.dedup_id:
            return partition_for_key(entry.dedup_id, partitions)
        return self.cluster.partition_of(i, entry, partitions)

    def _place_split(self, i: int, entry: Any, layout: Layout) -> int:
        """A split queue's placement; an explicit sealed partition is kept
        (``send`` refuses it unless the request may be a retry)."""
        if entry.HasField("partition"):
            return convert.check_range(
                entry.partition, 0, layout.version - 1, f"entries[{i}].partition"
            )
        if entry.key or entry.dedup_id:
            return partition_for_key(entry.key or entry.dedup_id, layout)
        writable = layout.writable()
        return writable[self.cluster.partition_of(i, entry, len(writable))]

    async def send(
        self, q: QueueRecord, entries: Sequence[Any], forwarded: bool, request_id: bytes = b""
    ) -> Results:
        """Where each entry was stored, in order (``response`` turns them into a
        SendResponse). Every entry is validated before anything is appended
        (bad input writes nothing). Each partition led here is packed into
        record blobs once; the entries of a partition led elsewhere are only
        checked here and travel as they came, packed by their leader."""
        convert.check_request_id(request_id)
        if not entries:
            raise errors.InvalidArgument("entries", "at least one message is required")
        if len(entries) > self.limits.max_batch_messages:
            metrics.count_rejection("limits")
            raise errors.InvalidArgument(
                "packed.lengths" if isinstance(entries, PackedEntries) else "entries",
                f"{len(entries)} messages; at most {self.limits.max_batch_messages}",
            )
        if isinstance(entries, PackedEntries):  # bodies only: checked at once
            entries.check(q.spec)
        by_part = self._place_all(entries, q.layout if q.ranges else q.spec.partitions)
        leaders = {p: self.cluster.local_leader(q.name, p, forwarded) for p in by_part}
        blobs: dict[int, Packed] = {}  # packed for the partitions led here only
        try:
            for p, idx in by_part.items():
                if isinstance(entries, PackedEntries):
                    if leaders[p] is not None:  # checked above; forwarded as they came
                        blobs[p] = entries.blobs()
                elif leaders[p] is not None:
                    blobs[p] = convert.record_blobs(entries, idx, q.spec, self.limits)
                else:
                    _check(entries, idx, q.spec, self.limits)
        except errors.InvalidArgument:
            for i, entry in enumerate(entries):  # report the first bad entry, as in index order
                convert.new_record(i, entry, q.spec, self.limits)
            raise
        results = Results(len(entries))

        def one(part: int) -> Any:
            idx = by_part[part]
            if (replica := leaders[part]) is not None:
                return self._append(q, part, replica, idx, blobs[part], results, request_id)
            return self._forward(q, part, idx, entries, results, request_id)

        sealed = [p for p in by_part if q.sealed(p)] if q.ranges else []
        if sealed:  # a stale sender; or the retry of a send its parent stored
            await self._sealed_first(q, sealed, request_id, one)
        sends = [one(part) for part in by_part if part not in sealed]
        if not sends:
            return results
        if len(sends) == 1:  # the common case: no gather (a task per partition)
            await sends[0]
        else:
            await asyncio.gather(*sends)
        return results

    async def _sealed_first(
        self, q: QueueRecord, sealed: list[int], request_id: bytes, one: Any
    ) -> None:
        """A split partition answers only the retry of an Append it stored
        before its seal (same request id: its first answer, as duplicates);
        anything else is PartitionSealed. They go first, so that a refusal
        stores nothing of the request (the SDK then places it again)."""
        if not request_id:
            raise errors.PartitionSealed(
                f"partition {sealed[0]} of {q.name} was split (sealed); refresh the "
                f"partition map (layout version {q.spec.partitions})"
            )
        await asyncio.gather(*(one(part) for part in sealed))

    def _place_all(self, entries: Sequence[Any], partitions: int | Layout) -> dict[int, list[int]]:
        """Entry indexes by partition, in index order within each."""
        if isinstance(entries, PackedEntries):  # one explicit partition for all
            count = partitions.version if isinstance(partitions, Layout) else partitions
            part = convert.check_range(entries.partition, 0, count - 1, "packed.partition")
            return {part: list(range(len(entries)))}
        if partitions == 1:  # the common case: only an explicit bad partition can fail
            for i, entry in enumerate(entries):
                if entry.partition:
                    self.place(i, entry, partitions)
            return {0: list(range(len(entries)))}
        by_part: dict[int, list[int]] = defaultdict(list)
        for i, entry in enumerate(entries):
            by_part[self.place(i, entry, partitions)].append(i)
        return by_part

    async def _append(
        self,
        q: QueueRecord,
        part: int,
        replica: Any,
        indexes: list[int],
        blobs: Packed,
        results: Results,
        request_id: bytes,
    ) -> None:
        """Append ``blobs`` (packed: ``part`` is led here) on ``replica``."""
        node = self.cluster.node
        node.disk.check_send(q.name, part, node.partition_replicas(q.name, part))
        sealed, summary = self.cluster.crypto.seal(q, part, *blobs)  # before the Raft log
        command = cmd.AppendBlobs(sealed, now_ms(), request_id, summary)
        _stage("s.submit")
        res, reached = await self.cluster.submit_append(replica, command)
        _stage("s.resumed")
        metrics.count_sent(q.name, part, len(indexes))
        durability = convert.DURABILITY[reached]
        if res.listed is None:  # the usual result: consecutive offsets, one flag
            if res.count != len(indexes):
                raise errors.Internal(f"{q.name}[{part}]: {res.count} results for {len(indexes)}")
            results.put_run(indexes, part, res.first, res.duplicate, durability)
        else:
            for i, item in zip(indexes, res.listed, strict=True):
                results.put(i, (part, item.offset, item.duplicate, durability))

    async def _forward(
        self,
        q: QueueRecord,
        part: int,
        indexes: list[int],
        entries: Sequence[Any],
        results: Results,
        request_id: bytes,
    ) -> None:
        """Send ``part``'s entries to its leader (one hop), as they came: a
        queue of one partition forwards them in one copy without touching
        each; otherwise each carries its partition (round robin is not
        repeatable on the leader). The answer comes back as runs."""
        sub = queue_pb2.SendRequest(queue=q.name, request_id=request_id, results_as_runs=True)
        if isinstance(entries, PackedEntries):  # all of one partition: as they came
            sub.packed.CopyFrom(entries.pb)
        elif q.spec.partitions == 1:
            sub.entries.extend(entries)
        else:
            for i in indexes:
                entry = sub.entries.add()
                entry.CopyFrom(entries[i])
                entry.partition = part
        resp = await self.cluster.forward_to_leader(q.name, part, "Send", sub)
        results.put_response(indexes, resp, f"{q.name}[{part}]")


# One entry's result: (partition, offset, duplicate, durability enum).
Result = tuple[int, int, bool, int]


class Results:
    """``Sender.send``'s answer: where each of ``size`` entries was stored, as
    runs of entries stored at consecutive offsets of one partition with one
    duplicate flag and durability: an Append of consecutive entries (a queue
    of one partition, the SDK's packed bodies) is one run, not a tuple per
    entry built and then merged again by ``response``."""

    __slots__ = ("_runs", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._runs: list[list[Any]] = []  # [start, count, partition, offset, dup, durability]

    def put_run(
        self, indexes: Sequence[int], part: int, first: int, dup: bool, durability: int
    ) -> None:
        """Entries ``indexes`` (increasing) stored from offset ``first`` on."""
        if indexes and indexes[-1] - indexes[0] + 1 == len(indexes):  # consecutive entries
            self._runs.append([indexes[0], len(indexes), part, first, dup, durability])
            return
        for k, i in enumerate(indexes):
            self._runs.append([i, 1, part, first + k, dup, durability])

    def put(self, i: int, result: Result) -> None:
        part, offset, dup, durability = result
        self._runs.append([i, 1, part, offset, dup, durability])

    def put_response(self, indexes: Sequence[int], resp: Any, what: str) -> None:
        """A leader's SendResponse (runs, or one result each) for the
        entries ``indexes`` it was forwarded, in order."""
        counted = sum(r.count for r in resp.runs) if resp.runs else len(resp.results)
        if counted != len(indexes):
            raise errors.Internal(f"{what}: {counted} results for {len(indexes)}")
        if not resp.runs:
            for i, r in zip(indexes, resp.results, strict=True):
                self.put(i, (r.partition, r.offset, r.duplicate, r.durability))
            return
        pos = 0
        for run in resp.runs:
            here = indexes[pos : pos + run.count]
            self.put_run(here, run.partition, run.offset, run.duplicate, run.durability)
            pos += run.count

    def runs(self) -> list[list[Any]]:
        """[partition, offset, count, duplicate, durability] in entry order,
        neighbours merged where their offsets run on; Internal if an entry
        has no result."""
        out: list[list[Any]] = []
        covered = 0
        for start, count, part, offset, dup, durability in sorted(self._runs):
            if start != covered:
                break
            covered += count
            last = out[-1] if out else None
            if last and (last[0], last[1] + last[2], last[3], last[4]) == (
                part,
                offset,
                dup,
                durability,
            ):
                last[2] += count
            else:
                out.append([part, offset, count, dup, durability])
        if covered != self.size:
            raise errors.Internal(f"send results for entries 0..{covered - 1} of {self.size}")
        return out

    def __iter__(self) -> Iterator[Result]:
        for part, offset, count, dup, durability in self.runs():
            for o in range(offset, offset + count):
                yield (part, o, dup, durability)

    @classmethod
    def of(cls, results: Sequence[Result]) -> Results:
        """One result per entry, in order (``response`` of a list: tests)."""
        out = cls(len(results))
        for i, result in enumerate(results):
            out.put(i, result)
        return out


# A partition's record blobs and their summary (convert.record_blobs).
Packed = tuple[tuple[bytes, ...], Summary]


def _check(entries: Sequence[Any], indexes: Sequence[int], spec: Any, limits: Any) -> None:
    """Validate entries that are forwarded, as ``record_blobs`` would, without
    packing them (their leader packs them)."""
    max_body = spec.max_message_bytes
    keyless_ok = spec.ordering != "fifo"
    for i in indexes:
        entry = entries[i]
        if (
            keyless_ok
            and len(entry.body) <= max_body
            and not (entry.key or entry.dedup_id or entry.delay_ms or entry.headers)
        ):
            continue
        convert.new_record(i, entry, spec, limits)


def response(results: Results | Sequence[Result], as_runs: bool = False) -> Any:
    """The SendResponse for ``Sender.send``'s results: one SendResult per
    entry, or (``as_runs``, as the SDK asks) SendRuns of consecutive entries
    stored at consecutive offsets."""
    if not isinstance(results, Results):
        results = Results.of(results)
    out = queue_pb2.SendResponse()
    if not as_runs:
        add = out.results.add
        for part, offset, dup, durability in results:
            add(partition=part, offset=offset, duplicate=dup, durability=durability)
        return out
    add_run = out.runs.add
    for part, offset, count, dup, durability in results.runs():
        add_run(partition=part, offset=offset, count=count, duplicate=dup, durability=durability)
    return out
