"""``raftq dev up``: a local N-node cluster in the foreground, one process per node."""

from __future__ import annotations

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
def up(nodes: int, data_dir: str, base_port: int) -> None:
    """Start NODES node processes and stay in the foreground (Ctrl-C stops them)."""
    cluster = LocalCluster(Path(data_dir).resolve(), nodes=nodes, base_port=base_port)
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
        cluster.stop()
        raise click.ClickException(f"cluster did not start: {exc}") from exc
    click.echo(f"raft_queue: {nodes}-node cluster up (data in {cluster.base_dir})")
    for i, s in enumerate(cluster.specs):
        click.echo(
            f"  {s.node_id}  gRPC {s.address}  pid {cluster.pid(i)}  log {cluster.log_path(i)}"
        )
    click.echo(f"\n  export RAFTQ_SERVER={cluster.bootstrap}")
    click.echo("  raftq cluster status\n\nCtrl-C stops the cluster.")
    try:
        while not stopping:
            for i in list(cluster.procs):
                if not cluster.alive(i):
                    click.echo(
                        f"node n{i + 1} exited (killed?); `raftq dev up` again restarts it",
                        err=True,
                    )
                    cluster.procs.pop(i)
            time.sleep(0.5)
    finally:
        click.echo("stopping...")
        cluster.stop()
