"""The manager process: ``raftq manager --config FILE [--id ID]``.

Starts its replica of the manager Raft group (manager/node.py), the gRPC
server (ManagerService and grpc.health.v1) and, on whichever manager leads,
the health poller (manager/health.py). Secured as a node is: the manager's
own secret (``[security] cluster_secret_file``) authenticates and seals its
Raft links and the cluster tokens it keeps; ``admin_tokens_file`` lists the
tokens its API accepts. With ``[tls]`` its gRPC port is TLS only and it dials
its clusters over TLS. SIGTERM / SIGINT stop it cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from raft_queue.manager import config as config_mod
from raft_queue.manager.config import ManagerConfig
from raft_queue.manager.health import HealthPoller, dial_clusters_with
from raft_queue.manager.moves import MoveWatch
from raft_queue.manager.node import ManagerNode
from raft_queue.manager.rebalance import Rebalancer
from raft_queue.manager.sealing import TokenSeal
from raft_queue.manager.service import ManagerService
from raft_queue.observability import logs
from raft_queue.security.files import private_files
from raft_queue.security.identity import Authenticator
from raft_queue.security.secret import node_secret
from raft_queue.security.tokens import load_admin_hashes
from raft_queue.server.tls import NodeTls

log = logging.getLogger("raft_queue.manager")


def _door(config: ManagerConfig) -> Authenticator:
    from raft_queue.core.metadata import MetadataMachine

    security = config.security
    admins = (
        load_admin_hashes(security.admin_tokens_file) if security.admin_tokens_file else frozenset()
    )
    if not admins and not security.insecure:
        log.warning("no security.admin_tokens_file: no client can use this manager")
    empty = MetadataMachine()  # the manager has no principals: admin tokens only
    return Authenticator(lambda: empty, admins, None, security.insecure)


async def serve(config: ManagerConfig) -> None:
    loop = asyncio.get_running_loop()
    secret = node_secret(config.security)
    if secret is None:
        log.warning("security.insecure = true: the manager's Raft links are NOT authenticated")
    private_files(config.data_dir)
    tls = NodeTls(config.tls)  # files read and checked before anything starts
    dial_clusters_with(config.tls)
    node = ManagerNode(config, secret)
    await loop.run_in_executor(None, node.start)
    seal = TokenSeal(secret)
    server = grpc.aio.server()
    from raft_queue._proto.raft_queue.v1 import manager_pb2_grpc

    mover = MoveWatch(node, seal)
    service = ManagerService(node, seal, _door(config), mover)
    manager_pb2_grpc.add_ManagerServiceServicer_to_server(service, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    tls.add_port(server, config.address)  # TLS only when [tls] is on
    await server.start()
    poller = HealthPoller(node, seal, config.health)
    service.heat_of = poller.heat_per_node
    task = asyncio.create_task(poller.run_forever())
    moving = asyncio.create_task(mover.run_forever())
    rebalancer = Rebalancer(
        node, poller.meter, config.balance, service.start_move, config.health.poll_period_s
    )
    balancing = asyncio.create_task(rebalancer.run_forever())
    scheme = "TLS" if tls.enabled else "plaintext"
    print(f"raftq manager {node.id} ready on {config.address} ({scheme})", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("manager %s stopping", node.id)
    task.cancel()
    moving.cancel()
    balancing.cancel()
    await server.stop(2.0)
    poller.close()
    await loop.run_in_executor(None, node.stop)


def run(config_path: str, manager_id: str = "", log_level: str = "INFO") -> None:
    config = config_mod.load(config_path, manager_id)
    logs.setup(log_level, "text", config.manager_id)
    asyncio.run(serve(config))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="raftq-manager", description=__doc__)
    parser.add_argument("--config", required=True, help="manager TOML file (configs/)")
    parser.add_argument("--id", default="", help="manager id, for a file describing several")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    run(args.config, args.id, args.log_level)


if __name__ == "__main__":
    main()
