"""``raftq queue ...``: create, update, list, describe, purge, redrive and delete queues.

Durations are given in seconds on the command line (as people think of
them) and sent as the API's milliseconds; sizes are bytes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import Progress

from raft_queue.cli.durations import SECONDS
from raft_queue.cli.output import (
    json_option,
    print_fields,
    print_json,
    print_line,
    print_table,
    timestamp,
)
from raft_queue.client import QueueInfo
from raft_queue.client.models import DURABILITIES, ORDERINGS
from raft_queue.client.redrive import RedriveProgress

if TYPE_CHECKING:
    from raft_queue.cli.main import Session

COUNT = click.IntRange(min=0)

# option name -> (QueueConfig field, scale from the option's unit to the field's)
CONFIG_OPTIONS: dict[str, tuple[str, int]] = {
    "visibility_timeout": ("visibility_timeout_ms", 1000),
    "delay": ("delay_ms", 1000),
    "dedup_window": ("dedup_window_ms", 1000),
    "retention": ("retention_ms", 1000),
    "max_receives": ("max_receives", 1),
    "retention_bytes": ("retention_bytes", 1),
    "max_message_bytes": ("max_message_bytes", 1),
}


@click.group()
def queue() -> None:
    """Create, update, list, describe, purge, redrive and delete queues."""


def config_options(func: Any) -> Any:
    """The queue settings ``create`` and ``update`` share (same names as the SDK's)."""
    options = [
        click.option("--durability", type=click.Choice(DURABILITIES), help="When a send is acked."),
        click.option(
            "--ordering", type=click.Choice(ORDERINGS), help="fifo: per key, one in flight."
        ),
        click.option("--visibility-timeout", type=SECONDS, help="Lease length, seconds."),
        click.option(
            "--max-receives", type=COUNT, help="Dead-letter after N receives (0 = never)."
        ),
        click.option("--dead-letter-queue", help="Where messages over --max-receives go."),
        click.option(
            "--delay",
            type=SECONDS,
            help="Delay before a new message is visible: s, or 12h, 30d (up to 365d).",
        ),
        click.option("--dedup-window", type=SECONDS, help="How long dedup ids are kept, seconds."),
        click.option(
            "--retention", type=SECONDS, help="Keep messages this long, s (0: until acked)."
        ),
        click.option("--retention-bytes", type=COUNT, help="Size bound per partition (0 = none)."),
        click.option(
            "--max-message-bytes", type=click.IntRange(min=1), help="Largest message body."
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@queue.command("create")
@click.argument("name")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--replication", type=click.IntRange(min=1), help="Replicas per partition.")
@click.option(
    "--encryption/--no-encryption",
    default=None,
    help="Seal bodies and headers at rest (default: on; docs/security.md).",
)
@config_options
@json_option
@click.pass_obj
def create(
    session: Session,
    /,
    name: str,
    partitions: int,
    replication: int | None,
    encryption: bool | None,
    as_json: bool,
    **options: Any,
) -> None:
    """Create queue NAME; options not given take the cluster's defaults."""
    config = _config_from_options(options)
    if encryption is not None:
        config["encryption"] = encryption
    info = session.client.create_queue(
        name, partitions=partitions, replication_factor=replication, **config
    )
    _show(info, as_json)


@queue.command("update")
@click.argument("name")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    help="Grow to this many partitions by splits: each seals one partition and adds "
    "two, so +2 per split (docs/operations.md, Growing a queue).",
)
@config_options
@json_option
@click.pass_obj
def update(
    session: Session, /, name: str, partitions: int | None, as_json: bool, **options: Any
) -> None:
    """Change the given settings of queue NAME; the others stay as they are."""
    config = _config_from_options(options)
    if partitions is not None:
        config["partitions"] = partitions
    if not config:
        raise click.UsageError("nothing to change: give at least one setting")
    _show(session.client.update_queue(name, **config), as_json)


@queue.command("purge")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def purge(session: Session, name: str, yes: bool, as_json: bool) -> None:
    """Drop every message of queue NAME (offsets are not reused)."""
    if not yes:
        click.confirm(f"Drop every message of {name!r}?", abort=True, err=True)
    removed = session.client.purge_queue(name)
    if as_json:
        print_json({"queue": name, "removed": removed})
    else:
        print_line(f"purged {removed} messages from {name}")


def _rate(value: str) -> float:
    """``100``, ``100/s`` -> 100.0 messages per second."""
    text = value.strip().removesuffix("/s")
    try:
        rate = float(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not N or N/s", param_hint="--rate") from None
    if rate <= 0:
        raise click.BadParameter("must be > 0", param_hint="--rate")
    return rate


@queue.command("redrive")
@click.argument("dlq")
@click.option("--to", "target", required=True, help="Queue to move the messages back to.")
@click.option("--rate", default="100/s", show_default=True, help="At most N messages/s.")
@click.option("--max", "max_messages", type=click.IntRange(min=1), help="Stop after N.")
@json_option
@click.pass_obj
def redrive_(
    session: Session, dlq: str, target: str, rate: str, max_messages: int | None, as_json: bool
) -> None:
    """Move messages from dead-letter queue DLQ back to --to, rate-limited, with progress."""
    per_s = _rate(rate)
    total = session.client.get_queue(dlq).messages
    if max_messages is not None:
        total = min(total, max_messages)
    with Progress(console=Console(stderr=True), disable=as_json) as bar:
        task = bar.add_task(f"{dlq} -> {target}", total=total or None)

        def show(p: RedriveProgress) -> None:
            bar.update(task, completed=p.moved, total=max(total, p.moved + p.remaining))

        moved = session.client.redrive(dlq, target, per_s, max_messages, on_progress=show)
    if as_json:
        print_json({"from": dlq, "to": target, "moved": moved})
    else:
        print_line(f"moved {moved} messages from {dlq} to {target}")


def _config_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """CLI options (seconds, names) -> QueueConfig fields (milliseconds); None = not given."""
    config: dict[str, Any] = {
        "durability": options.pop("durability"),
        "ordering": options.pop("ordering"),
        "dead_letter_queue": options.pop("dead_letter_queue"),
    }
    for option, (field_name, scale) in CONFIG_OPTIONS.items():
        value = options.pop(option)
        config[field_name] = None if value is None else round(value * scale)
    return {k: v for k, v in config.items() if v is not None}


@queue.command("list")
@json_option
@click.pass_obj
def list_(session: Session, as_json: bool) -> None:
    """All queues with their size and depth."""
    queues = session.client.list_queues()
    if as_json:
        print_json(queues)
        return
    print_table(
        ("name", "partitions", "replication", "durability", "ordering", "messages", "in flight"),
        (
            (
                q.name,
                q.partitions,
                q.config.replication_factor,
                q.config.durability,
                q.config.ordering,
                q.messages,
                q.in_flight,
            )
            for q in queues
        ),
    )


@queue.command("describe")
@click.argument("name")
@json_option
@click.pass_obj
def describe(session: Session, name: str, as_json: bool) -> None:
    """Queue NAME's configuration (effective values) and depth."""
    _show(session.client.get_queue(name), as_json)


@queue.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_obj
def delete(session: Session, name: str, yes: bool, as_json: bool) -> None:
    """Delete queue NAME and every message in it."""
    if not yes:
        click.confirm(f"Delete queue {name!r} and all its messages?", abort=True, err=True)
    session.client.delete_queue(name)
    if as_json:
        print_json({"deleted": name})
    else:
        print_line(f"deleted queue {name}")


def _show(info: QueueInfo, as_json: bool) -> None:
    if as_json:
        print_json(info)
        return
    pairs: list[tuple[str, Any]] = [
        ("name", info.name),
        ("created", timestamp(info.created_ms)),
        ("messages", info.messages),
        ("in flight", info.in_flight),
        ("delayed", info.delayed),
        ("dead", info.dead),
        ("oldest message age s", round(info.oldest_message_age_ms / 1000, 1)),
        ("bytes", info.bytes),
        ("writable partitions", info.writable_partitions),
    ]
    pairs += [(f.name, getattr(info.config, f.name)) for f in dataclasses.fields(info.config)]
    print_fields(pairs, title=f"queue {info.name}")
