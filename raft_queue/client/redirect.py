"""A plain ``Client`` follows a node's redirect to the external manager
(issue 16, Routing; docs/operations.md "Routing").

A node of a managed cluster that does not hold a queue answers NOT_FOUND
naming the cluster's manager (trailers ``raftq-manager``/``raftq-cluster``,
server/control/redirects.py; ``errors.NotFound.manager`` here). For the
data-path methods (``REDIRECTED``) the Client then re-issues the call through
a ``ManagedClient`` built on first use from the hint (the Client's token, TLS
arguments, timeout and retries), which finds the queue's cluster in the
manager's mapping and goes straight there. The route is remembered per
queue: later calls on that queue go through the ManagedClient at once.

- No loops: the ManagedClient's own per-cluster Clients never follow
  redirects (managed.py), and a NotFound on the manager's route (the manager
  maps the queue nowhere, or no longer) forgets the route and is raised.
- Results are the ManagedClient's: global partition numbers, receipts
  prefixed with their cluster (``c2@...``), so acks through the same Client
  (or any Client bootstrapped in a managed cluster) find their way back.
- ``ack(..., wait=False)`` on a redirected queue acks at once (the background
  acks go to the bootstrap cluster). ``create=True`` is dropped on a redirected
  queue (it exists there). Only the sync ``Client``; not ``AsyncClient``.
- ``Client(..., follow_redirects=False)``: the NotFound is raised, with the
  manager named in its message and in ``.manager``.

The token goes to the manager addresses a node of the bootstrap cluster
names: a cluster the client trusts (over TLS: the same CA checks the manager).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from raft_queue import errors
from raft_queue.client.models import Received

C = TypeVar("C", bound=type)
Adapter = Callable[[Any, dict[str, Any]], Any]

# method -> how the ManagedClient runs it, from the Client method's arguments
REDIRECTED: dict[str, Adapter] = {
    "send": lambda m, a: m.send(
        a["queue"],
        a["body"],
        a["key"],
        headers=a["headers"],
        dedup_id=a["dedup_id"],
        delay_ms=a["delay_ms"],
        partition=a["partition"],
    ),  # fmt: skip
    "send_batch": lambda m, a: m.send_batch(a["queue"], a["messages"]),
    "receive": lambda m, a: _receive(m, a),
    "ack": lambda m, a: _ack(m, a),
    "nack": lambda m, a: m.nack(a["queue"], a["receipts"], a["delay_ms"], a["release"]),
    "change_visibility": lambda m, a: m.change_visibility(
        a["queue"], a["receipts"], a["visibility_ms"]
    ),
    "read": lambda m, a: m.read(
        a["queue"],
        a["partition"],
        a["offset"],
        a["max_messages"],
        wait_ms=a["wait_ms"],
        timestamp_ms=a["timestamp_ms"],
    ),  # fmt: skip
    "get_queue": lambda m, a: m.get_queue(a["name"]),
    "partitions": lambda m, a: m.partitions(a["queue"]),
}


def _receive(managed: Any, a: dict[str, Any]) -> Received:
    acks = managed.ack(a["queue"], a["ack"]) if a["ack"] else []
    got = managed.receive(
        a["queue"], a["max_messages"], a["visibility_ms"], a["wait_ms"], a["consumer"]
    )
    return Received(got, acks)


def _ack(managed: Any, a: dict[str, Any]) -> Any:
    results = managed.ack(a["queue"], a["receipts"])
    return results if a["wait"] else []


class Redirects:
    """One Client's redirects: a ManagedClient per manager (made on first
    use), and which queues go through which."""

    def __init__(self, follow: bool, token: str | None, **client_kwargs: Any) -> None:
        self.follow = follow
        self._token = token
        self._client_kwargs = client_kwargs  # timeout_s, retries, the TLS arguments
        self._managers: dict[str, Any] = {}  # manager addresses -> ManagedClient
        self._routes: dict[str, Any] = {}  # queue -> ManagedClient
        self._lock = threading.Lock()

    def route(self, queue: str) -> Any:
        """The ManagedClient ``queue`` was redirected to, or None."""
        return self._routes.get(queue)

    def take(self, queue: str, hint: errors.NotFound) -> Any:
        """Remember ``hint``'s manager for ``queue``; its ManagedClient."""
        from raft_queue.client.managed import ManagedClient

        with self._lock:
            managed = self._managers.get(hint.manager)
            if managed is None:
                managed = ManagedClient(hint.manager, self._token, **self._client_kwargs)
                self._managers[hint.manager] = managed
            self._routes[queue] = managed
        return managed

    def forget(self, queue: str) -> None:
        with self._lock:
            self._routes.pop(queue, None)

    def close(self) -> None:
        with self._lock:
            managers, self._managers, self._routes = list(self._managers.values()), {}, {}
        for managed in managers:
            managed.close()


def follows_redirects(cls: C) -> C:
    """Class decorator: the ``REDIRECTED`` methods of ``cls`` follow redirects
    (its instances hold ``_redirects``), and ``close`` closes what they opened."""
    klass: Any = cls
    for name, adapt in REDIRECTED.items():
        setattr(klass, name, _wrap(getattr(klass, name), adapt))
    close = klass.close

    @functools.wraps(close)
    def closing(self: Any) -> None:
        try:
            close(self)
        finally:
            redirects = getattr(self, "_redirects", None)
            if redirects is not None:
                redirects.close()

    klass.close = closing
    return cls


def _wrap(method: Callable[..., Any], adapt: Adapter) -> Callable[..., Any]:
    signature = inspect.signature(method)
    queue_arg = "name" if "name" in signature.parameters else "queue"

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        redirects: Redirects | None = getattr(self, "_redirects", None)
        if redirects is None or not redirects.follow:
            return method(self, *args, **kwargs)
        if any(isinstance(v, Iterator) for v in (*args, *kwargs.values())):
            # a one-shot iterator would be spent when the call is re-issued
            args = tuple(list(v) if isinstance(v, Iterator) else v for v in args)
            kwargs = {k: list(v) if isinstance(v, Iterator) else v for k, v in kwargs.items()}
        queue = args[0] if args else kwargs.get(queue_arg, "")
        managed = redirects.route(queue)
        if managed is None:  # the usual case: the bootstrap cluster holds the queue
            try:
                return method(self, *args, **kwargs)
            except errors.NotFound as exc:
                if not exc.manager:
                    raise
                hint = exc
            managed = redirects.take(queue, hint)
            try:
                return adapt(managed, _arguments(signature, self, args, kwargs))
            except errors.NotFound as exc:
                redirects.forget(queue)
                raise errors.NotFound(f"{hint.message}; the manager: {exc.message}") from exc
        try:
            return adapt(managed, _arguments(signature, self, args, kwargs))
        except errors.NotFound:
            redirects.forget(queue)  # the manager's route ended: ask the cluster again next time
            raise

    return wrapper


def _arguments(
    signature: inspect.Signature, self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The call's arguments by name, defaults included."""
    bound = signature.bind(self, *args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)
