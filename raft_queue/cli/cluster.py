"""``raftq cluster ...``: the cluster as the metadata leader and each replica see it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from raft_queue.cli.output import json_option, print_json, print_line, print_table
from raft_queue.client import ClusterStatus

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


@click.group()
def cluster() -> None:
    """Cluster-wide views."""


@cluster.command("status")
@click.option("--digests", is_flag=True, help="Also show each replica's data digest.")
@json_option
@click.pass_obj
def status(session: Session, digests: bool, as_json: bool) -> None:
    """Nodes, and every partition replica's Raft role, term and progress."""
    result = session.client.cluster_status(include_digests=digests)
    if as_json:
        print_json(result)
        return
    _print_status(result, digests)


def _print_status(result: ClusterStatus, digests: bool) -> None:
    print_table(
        ("node", "address", "state", "controller", "metadata leader", "rack", "heartbeat age"),
        (
            (
                n.id,
                n.address,
                n.state,
                n.controller,
                n.metadata_leader,
                n.rack or "-",
                f"{n.last_heartbeat_age_ms} ms",
            )
            for n in result.nodes
        ),
        title=f"nodes (metadata version {result.metadata_version}, "
        f"leader {result.metadata_leader or 'unknown'})",
    )
    columns = [
        "queue",
        "partition",
        "node",
        "role",
        "leader",
        "term",
        "commit",
        "applied",
        "next offset",
        "quorum",
    ]
    if digests:
        columns.append("digest")
    rows = []
    for r in result.replicas:
        row = [
            r.queue,
            r.partition,
            r.node,
            r.role,
            r.leader or "-",
            r.term,
            r.commit_index,
            r.last_applied,
            r.next_offset,
            r.has_quorum,
        ]
        rows.append([*row, r.digest] if digests else row)
    print_table(columns, rows, title="replicas")
    if result.unreachable:
        print_line(f"unreachable: {', '.join(result.unreachable)}", stderr=True)
