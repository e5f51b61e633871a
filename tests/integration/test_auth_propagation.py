"""Read your own grants on any node: a principal, token or grant just written
on the metadata leader is honoured at once by a node whose metadata view is
behind (server/control/metadata_barrier.py). The node here is a non-voter,
whose view is a copy polled every 0.3 s, so without the barrier the first call
of a fresh principal through it is refused (UNAUTHENTICATED / PERMISSION_DENIED)
in nearly every round."""

from __future__ import annotations

from pathlib import Path

import pytest

from raft_queue.client import Client
from raft_queue.testing.cluster import LocalCluster
from tests.integration.test_delivery import wait_until

pytestmark = pytest.mark.integration


def test_a_new_principal_and_grant_work_at_once_through_a_lagging_node(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "cluster", nodes=3)
    c.start()
    try:
        c.wait_ready(60)
        lagging = c.add_node()
        c.start(lagging)
        c.wait_ready(60)
        address = c.specs[lagging].address
        with c.client(timeout_s=20.0) as admin:
            admin.create_queue("lag.q", replication_factor=3)
            with Client(address, timeout_s=10.0, token=c.token) as via:
                wait_until(lambda: "lag.q" in [q.name for q in via.list_queues()], 30)
            for i in range(5):
                token = admin.create_principal(f"lagger{i}").token
                admin.add_grant(f"lagger{i}", "lag.q", ["send", "receive"])
                with Client(address, timeout_s=10.0, retries=0, token=token) as fresh:
                    fresh.send("lag.q", f"m{i}".encode(), partition=0)
            got = admin.receive("lag.q", max_messages=10, wait_ms=2000)
            assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(5)]
    finally:
        c.stop()
