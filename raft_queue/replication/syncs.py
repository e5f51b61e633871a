"""Journal syncs off the driver thread: a few I/O threads per host.

One driver thread runs every Raft group of a node (host.py). An fdatasync on
it (1.6 ms median on this disk, 23 ms at p99 under load) stopped every group
of the node for its whole length: their messages, acks and commits waited
behind one slow sync. Here the driver only begins a sync
(``SyncedJournal.begin_sync``: what it covers is fixed then) and hands it to
an I/O thread, which runs ``fdatasync`` (the GIL is released meanwhile) and
posts the end back to the driver thread (``RaftHost.post``); only there do
the journal's synced marks move and the acks they allow go out
(``SafeSyncObj.on_sync_done``). So the contract of hazard 3 is unchanged: an
ack never precedes the sync that covers what it claims.

A group has at most one sync in flight; entries written meanwhile are
covered by the next, begun when that one ends (group commit). Syncs of
different groups run concurrently on up to ``threads`` threads.

Inline (``run_inline``): a follower whose sync would be the only work of the
host runs it on the driver thread itself, and its acks go out at once: the
two thread hand-offs (driver -> I/O thread -> driver, 0.1-0.3 ms on W1's path)
are gone. Only when no sync is in flight on the threads and the host has no
other group's work queued (``quiet``, the host's view); otherwise the sync
goes to the threads as above, so one group's fdatasync never holds up
another's messages when there is anything else to do. ``RAFTQ_SYNC_INLINE=0``
turns it off (for A/B measurements: docs/benchmarks.md, "W1: fewer hand-offs
on the commit path"). Hazard 3 is the same: the acks wait for ``done(job)``,
which runs after ``job.run()`` returned, on the same driver thread.

A leader syncs inline too when what it appended is small
(``LEADER_INLINE_BYTES``), but after its AppendEntries went out
(ticks.py, ``_append_commands``): its fdatasync then overlaps the followers'
receive, sync and ack as the I/O thread's did, and its end needs no
hand-off and no driver round of its own (W1: rounds per send 3.9 -> 2.9).
A large entry (W2's batches) still goes to the threads, begun before the
sends, and so does every sync while the last one took over
``LEADER_INLINE_SYNC_S``: the driver is never held by a long sync (tried
without that bound on 2026-11-26, on a slower disk under load, the leader's
inline sync delayed the acks behind it: docs/benchmarks.md).
``RAFTQ_LEADER_INLINE=0`` turns this part off (A/B). The bound looks at
the last sync only: the first slow sync after fast ones still runs on the
driver and holds every group of the host for its length, as a follower's
inline sync does; a long poll whose claim window is shorter than that sync
may then expire unclaimed (nothing leased: tests/integration/
test_standing_leases.py, "sync-inline").
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from raft_queue.observability.stagetrace import mark as _stage
from raft_queue.replication.journal import SyncJob

log = logging.getLogger(__name__)

Done = Callable[[SyncJob], None]

INLINE = os.environ.get("RAFTQ_SYNC_INLINE", "1") != "0"
LEADER_INLINE = INLINE and os.environ.get("RAFTQ_LEADER_INLINE", "1") != "0"
# A leader syncs inline only a write this small (a one-message send is ~0.3
# KB): a W2 entry of 1,000 messages (~150 KB) would hold its driver, and the
# requests queued behind it, for the fdatasync's whole length.
LEADER_INLINE_BYTES = 4 << 10
# ... and only while its disk is fast: its driver sits in the fdatasync, so an
# ack arriving meanwhile waits for it, and a commit that two followers could
# make alone waits for the leader's disk. Below a follower's whole round trip
# (~0.5 ms on W1) the ack cannot arrive before the sync ends anyway. The last
# completed sync is the estimate; a slow one sends the next to the threads.
LEADER_INLINE_SYNC_S = 0.0002


class SyncThreads:
    """``post(fn)`` runs ``fn`` on the driver thread (RaftHost.post)."""

    def __init__(
        self,
        post: Callable[[Callable[[], None]], None],
        threads: int = 2,
        quiet: Callable[[], bool] | None = None,
    ) -> None:
        self._post = post
        self._quiet = quiet
        self._busy = 0  # jobs submitted and not finished (driver + I/O threads)
        self._busy_lock = threading.Lock()
        self.inlined = 0
        self._jobs: queue.SimpleQueue[tuple[SyncJob, Done] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._run, name=f"raft-sync-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, job: SyncJob, done: Done) -> None:
        """Run ``job`` on an I/O thread, then ``done(job)`` on the driver thread."""
        with self._busy_lock:
            self._busy += 1
        self._jobs.put((job, done))

    def would_inline(self) -> bool:
        """Driver thread: whether ``run_inline`` would run a sync now."""
        return INLINE and not self._busy and self._quiet is not None and self._quiet()

    def run_inline(self, job: SyncJob, done: Done) -> bool:
        """Driver thread: run ``job`` and ``done(job)`` here and now if the
        host has nothing else to do (module docstring); False: not run."""
        if not self.would_inline():
            return False
        self.inlined += 1
        _stage("io.start")
        job.run()  # never raises: an error is kept in job.error
        _stage("io.end")
        done(job)
        return True

    def stop(self, timeout_s: float = 5.0) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, done = item
            _stage("io.start")
            job.run()  # never raises: an error is kept in job.error
            _stage("io.end")
            with self._busy_lock:
                self._busy -= 1
            try:
                self._post(_call(done, job))
            except Exception:  # the host stopped meanwhile
                log.debug("sync done after the host stopped", exc_info=True)


def _call(done: Done, job: SyncJob) -> Callable[[], None]:
    return lambda: done(job)
