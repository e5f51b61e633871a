"""The redirect of a queue a managed cluster does not hold: which NotFound
gets it (server/control/redirects.py), and its trailers both ways
(server/api/status.py, client/errors.py)."""

from __future__ import annotations

import grpc

from raft_queue import errors
from raft_queue.client.errors import from_rpc_error
from raft_queue.core import metadata as meta
from raft_queue.core.metadata import MetadataMachine
from raft_queue.server.api import status
from raft_queue.server.control.redirects import redirected
from tests.unit.test_status_mapping import FakeRpcError

MANAGERS = ("127.0.0.1:7400", "127.0.0.1:7402")


def managed_view() -> MetadataMachine:
    view = MetadataMachine()
    view.apply(meta.SetManagedBy("east", MANAGERS))
    return view


def queue_miss(name: str = "orders") -> errors.NotFound:
    miss = errors.NotFound(f"queue {name!r} does not exist")
    miss.queue = name
    return miss


def test_a_missing_queue_in_a_managed_cluster_names_the_manager() -> None:
    got = redirected(queue_miss(), managed_view())
    assert (got.queue, got.cluster, got.manager) == ("orders", "east", ",".join(MANAGERS))
    assert "not in cluster 'east'" in got.message and "127.0.0.1:7400" in got.message


def test_an_unmanaged_cluster_and_other_misses_stay_plain() -> None:
    miss = queue_miss()
    assert redirected(miss, MetadataMachine()) is miss  # unmanaged
    principal = errors.NotFound("principal 'p' does not exist")  # not a queue
    assert redirected(principal, managed_view()) is principal
    assert status.to_status(miss)[2] == ((status.ERROR_KEY, "NotFound"),)


def test_the_hint_crosses_the_wire_as_trailers() -> None:
    code, details, trailers = status.to_status(redirected(queue_miss(), managed_view()))
    assert code == grpc.StatusCode.NOT_FOUND
    assert dict(trailers)[status.MANAGER_KEY] == ",".join(MANAGERS)
    assert dict(trailers)[status.CLUSTER_KEY] == "east"
    back = from_rpc_error(FakeRpcError(code, details, trailers))
    assert isinstance(back, errors.NotFound)
    assert (back.manager, back.cluster) == (",".join(MANAGERS), "east")
    plain = from_rpc_error(FakeRpcError(code, "gone", ((status.ERROR_KEY, "NotFound"),)))
    assert (plain.manager, plain.cluster) == ("", "")  # type: ignore[attr-defined]
