"""client/redirect.py without a network: which ManagedClient call each
redirected Client method becomes, and when the route is kept or dropped.
(The real thing, on processes: tests/integration/test_manager.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from raft_queue import errors
from raft_queue.client import Client, Message, OutgoingMessage
from raft_queue.client.models import Received


class FakeManaged:
    """Records calls; ``missing`` queues raise NotFound (the manager's route ends)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.missing: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if args and args[0] in self.missing:
                raise errors.NotFound(f"queue {args[0]!r} is not mapped by the manager")
            self.calls.append((name, args, kwargs))
            return {"receive": [], "send_batch": [], "ack": ["acked"]}.get(name, name)

        return call


def redirecting_client(follow: bool = True) -> tuple[Client, FakeManaged, list[str]]:
    """A Client whose every call to the cluster answers a redirecting NotFound."""
    client = Client("127.0.0.1:1", token="t", follow_redirects=follow, retries=0)
    managed, seen = FakeManaged(), []

    def run(flow: Any) -> Any:
        flow.close()
        seen.append("cluster")
        miss = errors.NotFound("queue 'q' is not in cluster 'c1'; ... the manager at m:1")
        miss.manager, miss.cluster = "m:1", "c1"
        raise miss

    client._run = run  # type: ignore[method-assign]
    client._redirects.take = lambda queue, hint: (  # type: ignore[method-assign]
        client._redirects._routes.__setitem__(queue, managed) or managed
    )
    return client, managed, seen


def test_each_data_path_method_becomes_its_managed_call() -> None:
    client, managed, _ = redirecting_client()
    m = Message(b"b", "k", 0, 0, "c2@r", 1, 0, {})
    client.send("q", b"x", key="k", dedup_id="d", partition=1, create=True)
    client.send_batch("q", (OutgoingMessage(b"%d" % i) for i in range(3)))  # an iterator
    got = client.receive("q", 5, 100, 200, "me", ack=iter([m]))
    assert client.ack("q", ["c2@a"]) == ["acked"]
    assert client.ack("q", ["c2@b"], wait=False) == []  # acked at once, not in the background
    client.nack("q", ["c2@c"], 10, True)
    client.change_visibility("q", ["c2@d"], 500)
    client.read("q", 1, 7, 9, wait_ms=3, timestamp_ms=None)
    client.get_queue("q")
    client.partitions("q")
    names = [c[0] for c in managed.calls]
    assert names == ["send", "send_batch", "ack", "receive", "ack", "ack", "nack",
                     "change_visibility", "read", "get_queue", "partitions"]  # fmt: skip
    calls = managed.calls
    assert calls[0][1] == ("q", b"x", "k") and calls[0][2]["partition"] == 1
    assert "create" not in calls[0][2]  # the queue exists where it is routed
    assert len(calls[1][1][1]) == 3  # the iterator was kept for the second issue
    assert calls[2][1] == ("q", [m]) and isinstance(got, Received) and got.acks == ["acked"]
    assert calls[3][1] == ("q", 5, 100, 200, "me")
    assert calls[6][1] == ("q", ["c2@c"], 10, True)
    assert calls[8][1] == ("q", 1, 7, 9) and calls[8][2] == {"wait_ms": 3, "timestamp_ms": None}


def test_the_route_is_remembered_and_dropped_when_the_manager_says_not_found() -> None:
    client, managed, seen = redirecting_client()
    client.send("q", b"1")
    client.send("q", b"2")
    assert seen == ["cluster"]  # the second send went straight to the manager's route
    managed.missing.add("q")
    with pytest.raises(errors.NotFound):
        client.send("q", b"3")
    assert client._redirects.route("q") is None
    with pytest.raises(errors.NotFound) as both:
        client.send("q", b"4")  # the cluster again, then the manager: both answers named
    assert seen == ["cluster", "cluster"]
    assert "not in cluster 'c1'" in both.value.message
    assert "not mapped by the manager" in both.value.message


def test_follow_redirects_false_raises_the_hint() -> None:
    client, managed, _ = redirecting_client(follow=False)
    with pytest.raises(errors.NotFound) as refused:
        client.get_queue("q")
    assert refused.value.manager == "m:1" and managed.calls == []
