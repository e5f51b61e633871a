"""``raftq dev up``: a local N-node cluster in the foreground, one process per node."""

from __future__ import annotations

import shlex
import signal
import time
from pathlib import Path

import click

from raft_queue.testing.cluster import LocalCluster


@click.group()
def dev() -> None:
    """Local development cluster."""


@dev.command("up")
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option(
    "--data-dir",
    default=".raftq/dev",
    show_default=True,
    help="Run again on the same directory to resume the same cluster.",
)
@click.option(
    "--base-port",
    default=7100,
    show_default=True,
    type=click.IntRange(1024, 60000),
    help="gRPC on base+1.., metadata Raft on base+51.., partitions base+100*i..",
)
@click.option(
    "--tls",
    is_flag=True,
    help="Make a CA and node certificates in DATA_DIR/tls and serve gRPC over TLS only.",
)
@click.option(
    "--mtls",
    is_flag=True,
    help="As --tls, and nodes require client certificates (one is made for principal admin).",
)
@click.option(
    "--clusters",
    default=1,
    show_default=True,
    type=click.IntRange(1, 4),
    help="More than 1: that many clusters of NODES nodes and a 3-node external manager "
    "(cluster k on base-port + 1000*k; cli/clusters.py).",
)
def up(
    nodes: int,
    data_dir: str,
    base_port: int,
    tls: bool = False,
    mtls: bool = False,
    clusters: int = 1,
) -> None:
    """Start NODES node processes and stay in the foreground (Ctrl-C stops them).

    Run it again on the same --data-dir while the cluster runs and it starts
    only the nodes that are down (after a kill -9), then returns.
    """
    if clusters > 1:
        from raft_queue.cli.clusters import fleet_up

        fleet_up(clusters, nodes, data_dir, base_port, tls=tls or mtls, mtls=mtls)
        return
    cluster = LocalCluster(
        Path(data_dir).resolve(), nodes=nodes, base_port=base_port, tls=tls or mtls,
        tls_options={"require_client_cert": True} if mtls else {},
    )  # fmt: skip
    running = [i for i in range(nodes) if cluster.running_pid(i)]
    if running:
        _restart_missing(cluster, running)
        return
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    cluster.start()
    try:
        cluster.wait_ready(timeout_s=60)
    except Exception as exc:
        cluster.stop_all()
        raise click.ClickException(f"cluster did not start: {exc}") from exc
    click.echo(f"raft_queue: {nodes}-node cluster up (data in {cluster.base_dir})")
    for i, s in enumerate(cluster.specs):
        click.echo(
            f"  {s.node_id}  gRPC {s.address}  pid {cluster.pid(i)}  log {cluster.log_path(i)}"
        )
        click.echo(f"      status page {s.metrics_url}/  metrics {s.metrics_url}/metrics")
    click.echo(f"\n  export RAFTQ_SERVER={cluster.bootstrap}")
    # The admin token (also in <data dir>/admin.token, 0600): a dev cluster is closed too.
    click.echo(f"  export RAFTQ_TOKEN={cluster.token}")
    for line in tls_exports(cluster):
        click.echo(f"  export {line}")
    click.echo("  raftq cluster status\n\nCtrl-C stops the cluster.")
    reported: set[int] = set()
    try:
        while not stopping:
            for i in range(nodes):
                down = cluster.running_pid(i) is None
                if down and i not in reported:
                    click.echo(
                        f"node n{i + 1} is down; run the same `raftq dev up` in another "
                        "terminal to restart it",
                        err=True,
                    )
                    reported.add(i)
                elif not down:
                    reported.discard(i)
            time.sleep(0.5)
    finally:
        click.echo("stopping...")
        cluster.stop_all()


def _restart_missing(cluster: LocalCluster, running: list[int]) -> None:
    missing = [i for i in range(cluster.nodes) if i not in running]
    if not missing:
        raise click.ClickException(
            f"all {cluster.nodes} nodes of {cluster.base_dir} are already running"
        )
    for i in missing:
        cluster.start(i)
        click.echo(f"restarted n{i + 1} (pid {cluster.pid(i)}); it catches up from its peers")
    cluster.procs.clear()  # the first `raftq dev up` owns the cluster and stops it


def tls_exports(cluster: LocalCluster) -> list[str]:
    """The RAFTQ_TLS / RAFTQ_CA_FILE (/ RAFTQ_CERT_FILE, RAFTQ_KEY_FILE) settings that
    point raftq at this cluster's TLS material; none for a plaintext cluster."""
    names = {"tls": "RAFTQ_TLS", "ca_file": "RAFTQ_CA_FILE", "cert_file": "RAFTQ_CERT_FILE",
             "key_file": "RAFTQ_KEY_FILE"}  # fmt: skip
    out = []
    for key, value in cluster.client_options().items():
        out.append(f"{names[key]}={1 if value is True else shlex.quote(str(value))}")
    return out
