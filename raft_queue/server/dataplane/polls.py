"""Long polls per principal: at most ``limits.max_long_polls_per_principal``
Receives with ``wait_ms`` of one principal in progress on this node.

The other long-poll bounds are per partition replica (replication/standing.py:
``max_standing_polls_per_partition`` and ``..._per_consumer``); a principal
that names a new consumer id for each poll, or spreads its polls over many
queues, passes those. This one counts a principal's long polls on the node it
reached, across every queue and partition, from the call's start to its end
(its immediate attempt, its standing leases here and the polls it forwards
to other leader nodes are all part of it). One more is refused at once with
ResourceExhausted naming the limit, before anything is leased; a Receive
without ``wait_ms`` is never counted nor refused. Polls another node forwards
(node-signed) were counted on the node the client reached.

The asyncio loop's thread only: no lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from raft_queue import errors
from raft_queue.server.dataplane.bounds import refuse


class PrincipalPolls:
    def __init__(self, max_per_principal: int) -> None:
        self.max_per_principal = max_per_principal
        self._active: dict[str, int] = {}

    def active(self, principal: str) -> int:
        return self._active.get(principal, 0)

    @contextlib.contextmanager
    def hold(self, principal: str) -> Iterator[None]:
        """One long poll of ``principal`` for the ``with`` block; raises
        ResourceExhausted (nothing counted) when it already has the most."""
        mine = self._active.get(principal, 0)
        if mine >= self.max_per_principal:
            raise refuse(
                errors.ResourceExhausted(
                    f"principal {principal!r} has {mine} long polls in progress on this node "
                    f"(limits.max_long_polls_per_principal {self.max_per_principal}); "
                    "retry later"
                )
            )
        self._active[principal] = mine + 1
        try:
            yield
        finally:
            left = self._active[principal] - 1
            if left:
                self._active[principal] = left
            else:
                del self._active[principal]
