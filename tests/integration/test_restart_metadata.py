"""Right after a full restart every node still knows every queue.

After a restart a metadata voter's view holds only its snapshot until the
leader tells it the commit index (pysyncobj keeps it volatile, journal.py);
a new metadata leader's view lacks what earlier terms committed until its
own first entry applies. A node must not answer NOT_FOUND from such a view
(server/control/metadata_barrier.py): it catches up with the leader's
version first, or answers UNAVAILABLE, which the SDK retries. Before that
rule the first calls after a restart answered "queue 'x' does not exist" for
queues that exist (test_split.py's fresh-clone CI failure).
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import pytest

from raft_queue._proto.raft_queue.v1 import queue_pb2
from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster

pytestmark = pytest.mark.integration

QUEUES = [f"kept-{i}" for i in range(4)]
ROUNDS = 3
SEEN: Counter[str] = Counter()


def ask_raw(client: Any, address: str, method: str, request: Any, budget_s: float) -> Any:
    """One node's answer to ``method`` as sent (no SDK routing or retries),
    asked again only while it answers what the SDK retries (UNAVAILABLE: not up
    yet, or its view not vouched for; NotLeader: a partition still electing).
    Returns the response, or the final RpcError (NOT_FOUND among them)."""
    router = client._router
    deadline = time.monotonic() + budget_s
    while True:
        try:
            stub = router.queue_stub(address)
            return getattr(stub, method)(request, timeout=10, metadata=router.metadata)
        except grpc.RpcError as exc:
            if not retryable(exc) or time.monotonic() > deadline:
                return exc
        time.sleep(0.02)


def retryable(exc: grpc.RpcError) -> bool:
    """UNAVAILABLE, or a partition still electing (NotLeader): what the SDK retries."""
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        if "metadata view may be behind" in (exc.details() or ""):
            SEEN["vouch"] += 1  # a miss the node could not vouch for yet
        return True
    trailers = dict(exc.trailing_metadata() or ())
    return exc.code() == grpc.StatusCode.FAILED_PRECONDITION and (
        trailers.get("raftq-error") == "NotLeader"
    )


def requests(queue: str) -> list[tuple[str, Any]]:
    send = queue_pb2.SendRequest(queue=queue)
    send.entries.add(body=b"after-restart", partition=0)
    return [
        ("GetPartitions", queue_pb2.GetPartitionsRequest(queue=queue)),
        ("GetQueue", queue_pb2.GetQueueRequest(name=queue)),
        ("Send", send),
    ]


def check_node(cluster: LocalCluster, admin: Any, address: str, rnd: int) -> list[str]:
    """What ``address`` got wrong about the kept queues, asked at once."""
    wrong: list[str] = []
    for name in QUEUES:
        for method, request in requests(name):
            answer = ask_raw(admin, address, method, request, 60)
            if isinstance(answer, grpc.RpcError):
                wrong.append(f"round {rnd} {address} {method}({name}): {answer.code()} "
                             f"{answer.details()}")  # fmt: skip
    try:
        with Client(address, timeout_s=30, token=cluster.token) as pinned:
            for name in QUEUES:
                assert [p.partition for p in pinned.partitions(name)] == [0, 1]
                assert pinned.get_queue(name).name == name
                assert pinned.send(name, b"pinned", partition=1).partition == 1
    except Exception as exc:
        wrong.append(f"round {rnd} {address} pinned client: {exc!r}")
    return wrong


def test_no_node_forgets_a_queue_right_after_a_full_restart(cluster: LocalCluster) -> None:
    admin = cluster.client(timeout_s=20)
    for name in QUEUES:
        admin.create_queue(name, partitions=2, replication_factor=3)
        admin.send(name, b"before", partition=0)
    addresses = [s.address for s in cluster.specs]
    wrong: list[str] = []
    with ThreadPoolExecutor(len(addresses)) as pool:
        for rnd in range(ROUNDS):
            cluster.stop()
            cluster.start()  # and ask every node at once: no wait_ready, no sleep
            futures = [pool.submit(check_node, cluster, admin, a, rnd) for a in addresses]
            for f in futures:
                wrong.extend(f.result())
    print(f"UNAVAILABLE answers naming a view not yet vouched for: {SEEN['vouch']}")
    assert not wrong, "\n".join(wrong)
    cluster.wait_ready(60)
    for name in QUEUES:
        assert admin.get_queue(name).name == name


def test_a_missing_queue_is_still_not_found_promptly(cluster: LocalCluster) -> None:
    admin = cluster.client(timeout_s=20)
    admin.create_queue("exists", partitions=1, replication_factor=3)
    for address in [s.address for s in cluster.specs]:
        for method, request in requests("never-made"):
            started = time.monotonic()
            answer = ask_raw(admin, address, method, request, 0)
            assert isinstance(answer, grpc.RpcError), (address, method)
            assert answer.code() == grpc.StatusCode.NOT_FOUND, (address, method, answer)
            assert time.monotonic() - started < 3.0, (address, method)
    # Right after a restart too, once the node can vouch for its view.
    cluster.stop()
    cluster.start()
    for address in [s.address for s in cluster.specs]:
        answer = ask_raw(admin, address, "GetPartitions", requests("never-made")[0][1], 60)
        assert isinstance(answer, grpc.RpcError)
        assert answer.code() == grpc.StatusCode.NOT_FOUND, (address, answer.details())
