"""The node process: ``raftq node --config FILE`` (or ``python -m raft_queue.server.main``).

Starts the Raft driver, the metadata replica, the reconciler, the
registration heartbeat, housekeeping (retention, dead letters) and the
grpc.aio server (QueueService, AdminService, NodeService, grpc.health.v1,
and reflection when ``[api] reflection = true``), and observability
(raft_queue/observability/: metrics, health that follows the metadata quorum
and disk, the HTTP listener with the status page).
SIGTERM / SIGINT stop it cleanly: health says NOT_SERVING, then gRPC stops
(in-flight calls get 2 s), then
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
from grpc_health.v1 import health, health_pb2_grpc

from raft_queue import config as config_mod
from raft_queue._proto.raft_queue.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    node_pb2_grpc,
    queue_pb2,
    queue_pb2_grpc,
)
from raft_queue.observability import logs, memtrace, stagetrace, stallwatch
from raft_queue.observability.node import NodeObservability
from raft_queue.security.files import private_files
from raft_queue.security.keyring import load_key_provider
from raft_queue.security.secret import node_secret
from raft_queue.server.api import door
from raft_queue.server.api.admin_service import AdminService
from raft_queue.server.api.auth import door_for
from raft_queue.server.api.concurrency import ConcurrencyLimit, server_options
from raft_queue.server.api.node_service import NodeService, registration_loop
from raft_queue.server.api.queue_service import QueueService
from raft_queue.server.api.usage import UsageFlusher
from raft_queue.server.cluster import Cluster
from raft_queue.server.control.housekeeping import Housekeeper
from raft_queue.server.control.liveness import Liveness
from raft_queue.server.control.metadata_follower import follow_metadata
from raft_queue.server.control.mover import Mover
from raft_queue.server.control.operations import Operations
from raft_queue.server.control.splits import SplitWatch
from raft_queue.server.malloc import limit_arenas
from raft_queue.server.node import Node
from raft_queue.server.peers import Peers
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
# It is also the most cyclic garbage a node holds: grpc.aio's server leaves
# every call in a reference cycle (5 objects and more, its
# ``_find_method_handler`` closure), which only a collection frees. At
# 50,000 a young collection came every ~110 s under the soak's load, with
# ~37,000 dead objects, and RSS grew 1.7 MiB/min; at 5,000 one comes every
# ~7 s and takes 2-4 ms (docs/reliability.md, "Soak").
GC_GEN0_THRESHOLD = 5_000


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
    stagetrace.watch_loop()  # RAFTQ_STAGE_TRACE only: marks slow loop callbacks
    dial = _dial_from_env()
    secret = node_secret(config.security)
    if secret is None:
        log.warning(
            "security.insecure = true: Raft links and node-to-node RPCs are NOT "
            "authenticated; anyone who reaches this node's ports can join or read it"
        )
    private_files(config.data_dir)  # umask 077, data dir 0700 (security/files.py)
    tls = NodeTls(config.tls)  # reads and checks the [tls] files before anything starts
    node = Node(config, dial=dial, secret=secret)
    node.key_provider = load_key_provider(config.security)  # encryption at rest (None: off)
    await loop.run_in_executor(None, node.start, loop)
    signer = door.node_signer(secret, node.id)
    cluster = Cluster(node, Peers(dial, signer=signer, credentials=tls.channel_credentials()))
    tokens = door_for(node)
    tokens.barrier = cluster.barrier  # read your own grants anywhere
    # The status page asks the same door: an admin token, or open when insecure.
    observe = NodeObservability(config, authorize=tokens.page_authorizer())
    # Outermost first: metrics see every answer, the doors' refusals included;
    # node identity before tokens, so a node's own forwarded work (signed, no
    # token) is known as that node when the token door looks.
    interceptors = [*observe.interceptors(), *door.interceptors(secret), tokens]
    interceptors.append(ConcurrencyLimit(config.limits.max_concurrent_rpcs))  # after the doors
    server = grpc.aio.server(options=server_options(config.limits), interceptors=interceptors)
    queue_service = QueueService(cluster)
    queue_pb2_grpc.add_QueueServiceServicer_to_server(queue_service, server)
    liveness = Liveness(node, config.cluster)
    mover = Mover(cluster, config.cluster)
    admin = AdminService(cluster, liveness, Operations(cluster, mover))
    admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, server)
    node_service = NodeService(cluster, liveness)
    node_pb2_grpc.add_NodeServiceServicer_to_server(node_service, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = (
        queue_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name,
        admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
        health.SERVICE_NAME,
    )
    door.maybe_reflection(config.api, server, names)
    tls.add_port(server, f"{config.grpc_host}:{config.grpc_port}")  # TLS only, when [tls] is on
    await server.start()
    # Health per service follows readiness from here on (observability/health.py).
    await observe.start(cluster, liveness, node_service, health_servicer, (names[0], names[1]))
    tasks = [
        asyncio.create_task(node.reconcile_forever(cluster.barrier.vouch)),
        asyncio.create_task(registration_loop(cluster, config.cluster.heartbeat_period_s)),
        asyncio.create_task(Housekeeper(cluster, queue_service.sender).run_forever()),
        asyncio.create_task(liveness.run_forever()),
        asyncio.create_task(mover.run_forever()),
        asyncio.create_task(SplitWatch(cluster).run_forever()),  # split parents drained
    ]
    usage = UsageFlusher(cluster, tokens.meter.usage)  # server/api/usage.py
    tasks.append(asyncio.create_task(usage.run_forever()))
    # Polls a voter's copy while this node has no (caught-up) metadata replica:
    # not a voter, or added or removed as one (server/control/controllers.py).
    tasks.append(asyncio.create_task(follow_metadata(cluster)))
    tune_gc()
    memtrace.start_from_env()  # RAFTQ_TRACEMALLOC=<s>: a debug switch, off by default
    stallwatch.start_from_env(node.host)  # RAFTQ_STALL_WATCH=<ms>: a debug switch, off by default
    secure = " (TLS)" if tls.enabled else ""
    log.info("node %s serving gRPC%s on %s", node.id, secure, node.address)
    page = f"; status page http://{observe.address}/" if observe.address else ""
    print(f"raftq node {node.id} ready on {node.address}{page}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("node %s stopping", node.id)
    await observe.stop()
    for t in tasks:
        t.cancel()
    # Usage is flushed while the other nodes are surely up (when a whole
    # cluster stops, a flush after the grace found the metadata quorum gone
    # and waited out its bound: 3 s per stop), then once more for what the
    # requests finishing in the grace counted, if any.
    await usage.final(timeout_s=2.0)
    await server.stop(2.0)
    await usage.final(timeout_s=1.0)
    await observe.close()
    await cluster.peers.close()
    tokens.close()
    await loop.run_in_executor(None, node.stop)


def run(config_path: str, node_id: str = "", log_level: str = "INFO") -> None:
    limit_arenas()  # before any thread: glibc's per-thread arenas (server/malloc.py)
    config = config_mod.load(config_path, node_id)
    logs.setup(log_level, config.log_format, config.node_id)
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
