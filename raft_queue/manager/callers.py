"""Who calls the manager: its own admins, or a principal of one of its clusters.

The manager has no principals of its own. Its admin tokens
(``[security] admin_tokens_file``) may do everything. Any other bearer token
is looked up on the clusters the manager knows (AdminService.Introspect, the
cluster's admin token, on its metadata leader: OAuth's token introspection,
RFC 7662): the first cluster that knows it says which principal it is and
which grants it holds there. Such a caller may only read the mapping of the
queues it holds a grant on (GetMapping, so that ManagedClient and a redirected
Client work with a producer's or consumer's own token); every other manager
call needs an admin token. A cluster's admin token is no admin of the manager:
it reads the mapping of every queue, and nothing more.

Answers are kept for ``TTL_S`` (a rotated or deleted token keeps reading the
mapping for at most that long, never more: the clusters themselves refuse it
at once); unknown tokens for ``MISS_TTL_S``, so a guesser costs one cluster
call per token per few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from raft_queue import errors
from raft_queue.core import access
from raft_queue.manager.health import cluster_client
from raft_queue.manager.node import ManagerNode
from raft_queue.manager.sealing import TokenSeal
from raft_queue.security.identity import BEARER, Authenticator, Identity
from raft_queue.security.tokens import token_hash

log = logging.getLogger(__name__)

TTL_S = 30.0
MISS_TTL_S = 5.0
CALL_TIMEOUT_S = 3.0
CACHE_MAX = 10_000


class Callers:
    def __init__(
        self,
        door: Authenticator,
        node: ManagerNode,
        seal: TokenSeal,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._door = door
        self._node = node
        self._seal = seal
        self._clock = clock
        self._known: dict[str, tuple[float, Identity | None]] = {}

    async def identify(self, authorization: str) -> Identity:
        """The caller: a manager admin, else a cluster's principal; else
        Unauthenticated (nothing said about why)."""
        try:
            return self._door.authenticate(authorization)
        except errors.Unauthenticated:
            if authorization[: len(BEARER)].lower() != BEARER:
                raise
        token = authorization[len(BEARER) :].strip()
        digest = token_hash(token)
        now = self._clock()
        cached = self._known.get(digest)
        if cached is None or cached[0] <= now:
            who = await self._introspect(token)
            if len(self._known) >= CACHE_MAX:
                self._known.clear()
            self._known[digest] = (now + (TTL_S if who else MISS_TTL_S), who)
            cached = self._known[digest]
        if cached[1] is None:
            raise errors.Unauthenticated("invalid token (unknown, rotated or deleted)")
        return cached[1]

    async def _introspect(self, token: str) -> Identity | None:
        view = self._node.view
        order = sorted(view.clusters().values(), key=lambda c: (c.health != "healthy", c.name))
        loop = asyncio.get_running_loop()
        for record in order:
            if record.health == "down":
                continue
            admin_token = self._seal.open(record.token, record.name)

            def ask(bootstrap: tuple[str, ...] = record.bootstrap, t: str = admin_token) -> object:
                with cluster_client(bootstrap, t, CALL_TIMEOUT_S, retries=1) as client:
                    return client.introspect(token)

            try:
                answer: object = await loop.run_in_executor(None, ask)
            except errors.QueueError as exc:
                log.info("introspection on %s failed: %s", record.name, exc)
                continue
            if getattr(answer, "active", False):
                return _identity(record.name, answer)
        return None


def _identity(cluster: str, answer: object) -> Identity:
    """A cluster's principal, as a reader of the manager: its grants there (a
    cluster admin: every queue), never a manager superuser."""
    if getattr(answer, "superuser", False):
        grants: tuple[access.Grant, ...] = (access.Grant(access.ANY_QUEUE, (access.ADMIN,)),)
    else:
        grants = tuple(
            access.Grant(g.pattern, tuple(g.operations)) for g in getattr(answer, "grants", ())
        )
    return Identity(f"{getattr(answer, 'principal', '')}@{cluster}", grants)
