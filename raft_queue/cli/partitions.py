"""``raftq partitions ...``: where a queue's partitions live and how far they reach."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from raft_queue.cli.output import json_option, print_json, print_table

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


@click.group()
def partitions() -> None:
    """Partition placement and offsets."""


@partitions.command("describe")
@click.argument("queue")
@json_option
@click.pass_obj
def describe(session: Session, queue: str, as_json: bool) -> None:
    """Leader, replicas and [earliest, latest) offsets of each partition of QUEUE."""
    infos = session.client.partitions(queue)
    if as_json:
        print_json(infos)
        return
    print_table(
        (
            "partition",
            "leader",
            "leader address",
            "replicas",
            "earliest",
            "latest",
            "messages",
            "in flight",
            "epoch",
            "commit index",
        ),
        (
            (
                p.partition,
                p.leader or "-",
                p.leader_address or "-",
                ",".join(p.replicas),
                p.earliest_offset,
                p.latest_offset,
                p.messages,
                p.in_flight,
                p.epoch,
                p.commit_index,
            )
            for p in infos
        ),
        title=f"partitions of {queue}",
    )
