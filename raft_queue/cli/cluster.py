"""``raftq cluster ...``: the cluster as the metadata leader and each replica see it."""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

import click

from raft_queue.cli.operations import message_json
from raft_queue.cli.output import (
    Column,
    json_option,
    print_json,
    print_line,
    print_objects,
    to_jsonable,
)
from raft_queue.client import ClusterStatus
from raft_queue.errors import QueueError

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
    try:
        voters = session.client.list_controllers()
    except QueueError:  # a node too old to answer: the node table still says who is one
        voters = None
    if as_json:
        extra = {"controllers": message_json(voters)} if voters is not None else {}
        print_json({**to_jsonable(result), **extra})
        return
    _print_status(result, digests)
    _print_disk_problems(result)
    if voters is None:
        return
    names = [f"{c.node} (leader)" if c.leader else c.node for c in voters.controllers]
    print_line(f"controllers: {', '.join(names)}")
    if voters.change:
        print_line(f"controller change in flight: {voters.change}")


NODE_COLUMNS: list[Column] = [
    ("node", attrgetter("id")),
    ("address", attrgetter("address")),
    ("state", attrgetter("state")),
    ("controller", attrgetter("controller")),
    ("metadata leader", attrgetter("metadata_leader")),
    ("rack", lambda n: n.rack or "-"),
    ("heartbeat age", lambda n: f"{n.last_heartbeat_age_ms} ms"),
]

REPLICA_COLUMNS: list[Column] = [
    ("queue", attrgetter("queue")),
    ("partition", attrgetter("partition")),
    ("node", attrgetter("node")),
    ("role", attrgetter("role")),
    ("leader", lambda r: r.leader or "-"),
    ("term", attrgetter("term")),
    ("commit", attrgetter("commit_index")),
    ("applied", attrgetter("last_applied")),
    ("next offset", attrgetter("next_offset")),
    ("quorum", attrgetter("has_quorum")),
]


def _print_disk_problems(result: ClusterStatus) -> None:
    """Storage trouble, one line each: failed replicas, nodes low on disk."""
    for r in result.replicas:
        if r.role == "failed":
            print_line(f"FAILED {r.queue}/{r.partition} on {r.node}: {r.failure}", stderr=True)
    for n in result.nodes:
        if n.disk_low:
            print_line(f"LOW DISK on {n.id}: {n.disk_low}", stderr=True)
        if n.failure:
            print_line(f"FAILED replica on {n.id}: {n.failure}", stderr=True)


def _print_status(result: ClusterStatus, digests: bool) -> None:
    title = (
        f"nodes (metadata version {result.metadata_version}, "
        f"leader {result.metadata_leader or 'unknown'})"
    )
    print_objects(NODE_COLUMNS, result.nodes, title=title)
    digest: Column = ("digest", attrgetter("digest"))
    replica_columns = [*REPLICA_COLUMNS, digest] if digests else REPLICA_COLUMNS
    print_objects(replica_columns, result.replicas, title="replicas")
    if result.unreachable:
        print_line(f"unreachable: {', '.join(result.unreachable)}", stderr=True)
    if result.cluster_name:
        managers = ", ".join(result.managers)
        print_line(f"managed as {result.cluster_name!r} by the manager at {managers}")
