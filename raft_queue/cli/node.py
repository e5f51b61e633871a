"""``raftq node``: run one node process in the foreground."""

from __future__ import annotations

import click


@click.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(exists=True),
    help="Node TOML file (see configs/).",
)
@click.option("--node", "node_id", default="", help="Node id, when the file describes several.")
@click.option("--log-level", default="INFO", show_default=True)
def node(config_path: str, node_id: str, log_level: str) -> None:
    """Run a raft_queue node until SIGINT/SIGTERM."""
    from raft_queue.server.main import run

    run(config_path, node_id, log_level)
