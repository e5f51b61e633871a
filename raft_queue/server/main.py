"""The node process: ``raftq node --config FILE`` (or ``python -m raft_queue.server.main``).

Starts the Raft driver, the metadata replica, the reconciler, the
registration heartbeat, housekeeping (retention, dead letters) and the
grpc.aio server (QueueService, AdminService, grpc.health.v1, reflection).
SIGTERM / SIGINT stop it cleanly: gRPC first (in-flight calls get 2 s), then
every Raft group (journals flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from raft_queue import config as config_mod
from raft_queue._proto.raft_queue.v1 import admin_pb2, admin_pb2_grpc, queue_pb2, queue_pb2_grpc
from raft_queue.security.secret import node_secret
from raft_queue.server.admin_service import AdminService, registration_loop
from raft_queue.server.cluster import Cluster
from raft_queue.server.housekeeping import Housekeeper
from raft_queue.server.liveness import Liveness
from raft_queue.server.metadata_follower import follow_metadata
from raft_queue.server.mover import Mover
from raft_queue.server.node import Node
from raft_queue.server.operations import Operations
from raft_queue.server.peers import CHANNEL_OPTIONS, Peers
from raft_queue.server.queue_service import QueueService
from raft_queue.server.tls import NodeTls

log = logging.getLogger("raft_queue.node")


def _dial_from_env() -> Callable[[str], str | None]:
    """Fault-injection hook: RAFTQ_DIAL_MAP="addr=proxy,addr=proxy" makes this
    node dial ``proxy`` whenever it connects to ``addr`` (Raft and gRPC links)."""
    import os

    raw = os.environ.get("RAFTQ_DIAL_MAP", "")
    table = dict(item.split("=", 1) for item in raw.split(",") if "=" in item)
    return table.get


# Collections of the young generation every this many net allocations of
# container objects (CPython's default is 700). A node allocates in bursts
# (gRPC messages, protobufs, Raft messages): at 700, young collections ran
# hundreds of times a second and took up to ~8 ms each on this machine.
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    """Once the node serves: move everything allocated so far (modules,
    generated protobuf classes, grpc, the groups opened at start) to the
    permanent generation, which no collection scans, and collect the young
    generation less often. Full collections of a node took 33-93 ms
    (measured with gc.callbacks) and stalled every thread meanwhile, the
    Raft driver included: one of them is a 100 ms outlier in W4's latency.
    Reference counting still frees all acyclic garbage at once; this only
    changes when cycles are found."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


async def serve(config: config_mod.NodeConfig) -> None:
    loop = asyncio.get_running_loop()
    dial = _dial_from_env()
    secret = node_secret(config.security)
    if secret is None:
        log.warning(
            "security.insecure = true: Raft links and node-to-node RPCs are NOT "
            "authenticated; anyone who reaches this node's ports can join or read it"
        )
    tls = NodeTls(config.tls)  # reads and checks the [tls] files before anything starts
    node = Node(config, dial=dial, secret=secret)
    await loop.run_in_executor(None, node.start, loop)
    cluster = Cluster(node, Peers(dial, tls.channel_credentials()))
    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    queue_service = QueueService(cluster)
    queue_pb2_grpc.add_QueueServiceServicer_to_server(queue_service, server)
    liveness = Liveness(node, config.cluster)
    mover = Mover(cluster, config.cluster)
    admin = AdminService(cluster, liveness, Operations(cluster, mover))
    admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (
        queue_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name,
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        health.SERVICE_NAME,
        reflection.SERVICE_NAME,
    )
    reflection.enable_server_reflection(names, server)
    tls.add_port(server, f"{config.grpc_host}:{config.grpc_port}")  # TLS only, when [tls] is on
    await server.start()
    for name in ("", *names[:2]):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    tasks = [
        asyncio.create_task(node.reconcile_forever()),
        asyncio.create_task(registration_loop(cluster, config.cluster.heartbeat_period_s)),
        asyncio.create_task(Housekeeper(cluster, queue_service.sender).run_forever()),
        asyncio.create_task(liveness.run_forever()),
        asyncio.create_task(mover.run_forever()),
    ]
    # Polls a voter's copy while this node has no (caught-up) metadata replica:
    # not a voter, or added or removed as one (server/controllers.py).
    tasks.append(asyncio.create_task(follow_metadata(cluster)))
    tune_gc()
    log.info("node %s serving gRPC%s on %s", node.id, " (TLS)" if tls.enabled else "", node.address)
    print(f"raftq node {node.id} ready on {node.address}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("node %s stopping", node.id)
    for t in tasks:
        t.cancel()
    await server.stop(2.0)
    await cluster.peers.close()
    await loop.run_in_executor(None, node.stop)


def run(config_path: str, node_id: str = "", log_level: str = "INFO") -> None:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("pysyncobj").setLevel(logging.ERROR)
    config = config_mod.load(config_path, node_id)
    asyncio.run(serve(config))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="raftq-node", description=__doc__)
    parser.add_argument("--config", required=True, help="node TOML file (see configs/)")
    parser.add_argument("--node", default="", help="node id, for a file describing several")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    run(args.config, args.node, args.log_level)


if __name__ == "__main__":
    main()
