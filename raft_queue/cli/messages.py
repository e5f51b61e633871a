"""``raftq send | receive | ack | nack | read | tail | history``: messages from the shell.

``send`` takes bodies as arguments and/or one message per line of ``--file``
(``-`` = stdin; empty lines are skipped). ``receive`` leases, prints, then
acks what it printed unless ``--no-ack`` (then the receipts are shown for a
later ``raftq ack``). Times are seconds on the command line, or carry a unit
(``250ms``, ``10m``, ``12h``, ``400d``: cli/durations.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

import click

from raft_queue.cli.durations import SECONDS
from raft_queue.cli.output import (
    body_preview,
    json_option,
    print_json,
    print_json_line,
    print_line,
    print_table,
    timestamp,
)
from raft_queue.client import Client, Message, OutgoingMessage, PartitionInfo, ReceiptResult

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)


def _parse_headers(pairs: Sequence[str]) -> dict[str, bytes]:
    headers: dict[str, bytes] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not K=V", param_hint="--header")
        headers[name] = value.encode("utf-8")
    return headers


def _bodies(bodies: Sequence[str], file: IO[bytes] | None) -> list[bytes]:
    """Arguments first, then the file's non-empty lines (without their line ending)."""
    out = [b.encode("utf-8") for b in bodies]
    if file is not None:
        lines = (line.rstrip(b"\r\n") for line in file)
        out.extend(line for line in lines if line)
    if not out:
        raise click.UsageError("nothing to send: give BODY arguments or --file")
    return out


@click.command()
@click.argument("queue")
@click.argument("bodies", nargs=-1)
@click.option("--key", default="", help="Message key: same key, same partition (and order).")
@click.option("--file", type=click.File("rb"), help="One message per line; '-' reads stdin.")
@click.option("--dedup-id", help="Idempotency key across sends (one message only).")
@click.option(
    "--delay",
    type=SECONDS,
    default=0,
    help="Invisible this long: seconds, or 250ms, 10m, 12h, 400d (up to 3653d).",
)
@click.option("--header", "header_pairs", multiple=True, metavar="K=V", help="Repeatable.")
@click.option("--partition", type=click.IntRange(min=0), help="Bypass key hashing.")
@click.option(
    "--create", is_flag=True, help="Create QUEUE from the cluster's [queue_defaults] if missing."
)
@json_option
@click.pass_obj
def send(
    session: Session,
    queue: str,
    bodies: tuple[str, ...],
    key: str,
    file: IO[bytes] | None,
    dedup_id: str | None,
    delay: float,
    header_pairs: tuple[str, ...],
    partition: int | None,
    create: bool,
    as_json: bool,
) -> None:
    """Send BODY... (and/or --file lines) to QUEUE; prints where each was stored."""
    payloads = _bodies(bodies, file)
    if dedup_id and len(payloads) > 1:
        raise click.UsageError("--dedup-id applies to one message; this sends several")
    headers = _parse_headers(header_pairs)
    messages = [
        OutgoingMessage(body, key, headers, dedup_id, _ms(delay) or 0, partition)
        for body in payloads
    ]
    results = session.client.send_batch(queue, messages, create=create)
    if as_json:
        print_json(results)
        return
    print_table(
        ("#", "partition", "offset", "duplicate", "durability"),
        ((i, r.partition, r.offset, r.duplicate, r.durability) for i, r in enumerate(results)),
    )


@click.command()
@click.argument("queue")
@click.option("--max", "max_messages", type=click.IntRange(1, 1000), default=1, show_default=True)
@click.option("--wait", type=click.FloatRange(0, 20), default=0, help="Long poll, seconds.")
@click.option("--visibility", type=SECONDS, help="Lease length, seconds (queue default).")
@click.option("--no-ack", is_flag=True, help="Keep the leases; print receipts to ack later.")
@click.option("--consumer", default="raftq", show_default=True, help="Consumer id.")
@json_option
@click.pass_obj
def receive(
    session: Session,
    queue: str,
    max_messages: int,
    wait: float,
    visibility: float | None,
    no_ack: bool,
    consumer: str,
    as_json: bool,
) -> None:
    """Lease up to --max messages of QUEUE, print them, and ack them unless --no-ack."""
    client = session.client
    messages = client.receive(queue, max_messages, _ms(visibility), _ms(wait) or 0, consumer)
    if as_json:
        print_json(messages)
    else:
        _print_messages(messages, receipts=no_ack)
    if messages and not no_ack:
        _fail_on_bad_receipts(client.ack(queue, messages), "ack")


def _print_messages(messages: Sequence[Message], *, receipts: bool) -> None:
    if not messages:
        print_line("no messages")
        return
    columns = ["partition", "offset", "key", "receives", "timestamp", "body"]
    rows = []
    for m in messages:
        row = [
            m.partition,
            m.offset,
            m.key,
            m.receive_count,
            timestamp(m.timestamp_ms),
            body_preview(m.body),
        ]
        rows.append([*row, m.receipt] if receipts else row)
    print_table([*columns, "receipt"] if receipts else columns, rows)


def _fail_on_bad_receipts(results: Sequence[ReceiptResult], verb: str) -> None:
    """Exit 1 naming how many receipts were refused, and why (after printing the rest)."""
    bad = [r for r in results if not r.ok]
    if bad:
        reasons = sorted({r.error or "refused" for r in bad})
        raise click.ClickException(
            f"{verb} failed for {len(bad)} of {len(results)} receipts: {'; '.join(reasons)}"
        )


def _print_receipts(results: Sequence[ReceiptResult], as_json: bool, verb: str) -> None:
    if as_json:
        print_json(results)
    else:
        print_table(("receipt", "ok", "error"), ((r.receipt, r.ok, r.error) for r in results))
    _fail_on_bad_receipts(results, verb)


@click.command()
@click.argument("queue")
@click.argument("receipts", nargs=-1, required=True)
@json_option
@click.pass_obj
def ack(session: Session, queue: str, receipts: tuple[str, ...], as_json: bool) -> None:
    """Delete leased messages of QUEUE by RECEIPT (exit 1 if any is refused)."""
    _print_receipts(session.client.ack(queue, list(receipts)), as_json, "ack")


@click.command()
@click.argument("queue")
@click.argument("receipts", nargs=-1, required=True)
@click.option(
    "--delay",
    type=SECONDS,
    default=0,
    help="Visible again after: seconds, or 10m, 12h, 400d (up to 3653d).",
)
@json_option
@click.pass_obj
def nack(
    session: Session, queue: str, receipts: tuple[str, ...], delay: float, as_json: bool
) -> None:
    """Give leased messages of QUEUE back by RECEIPT (exit 1 if any is refused)."""
    results = session.client.nack(queue, list(receipts), delay_ms=_ms(delay) or 0)
    _print_receipts(results, as_json, "nack")


def _since_ms(since: float | None) -> int | None:
    """--since S (seconds ago) -> a wall-clock timestamp in ms."""
    return None if since is None else int((time.time() - since) * 1000)


@click.command()
@click.argument("queue")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option("--offset", type=click.IntRange(min=0), help="First offset (or --since).")
@click.option("--since", type=SECONDS, help="Start at messages appended S seconds ago or later.")
@click.option(
    "--max", "max_messages", type=click.IntRange(1, 10000), default=100, show_default=True
)
@json_option
@click.pass_obj
def read(
    session: Session,
    queue: str,
    partition: int,
    offset: int | None,
    since: float | None,
    max_messages: int,
    as_json: bool,
) -> None:
    """Read QUEUE's partition from an offset (or a time), without leasing (replay, as Kafka)."""
    if (offset is None) == (since is None):
        raise click.UsageError("give exactly one of --offset and --since")
    result = session.client.read(
        queue, partition, offset or 0, max_messages, timestamp_ms=_since_ms(since)
    )
    if as_json:
        print_json(result)
        return
    print_table(
        ("offset", "key", "timestamp", "dedup id", "body"),
        (
            (m.offset, m.key, timestamp(m.timestamp_ms), m.dedup_id, body_preview(m.body))
            for m in result.messages
        ),
        title=f"{queue} partition {partition}",
    )
    print_line(
        f"next offset {result.next_offset}; partition holds "
        f"[{result.earliest_offset}, {result.latest_offset})"
    )


@click.command()
@click.argument("queue")
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Repeatable; default: every partition.")  # fmt: skip
@click.option("--from-beginning", is_flag=True, help="Start at the earliest retained offset.")
@click.option("--since", type=SECONDS, help="Start at messages appended S seconds ago.")
@click.option("--max", "max_messages", type=click.IntRange(min=1), help="Stop after N messages.")
@click.pass_obj
def tail(
    session: Session,
    queue: str,
    partitions: tuple[int, ...],
    from_beginning: bool,
    since: float | None,
    max_messages: int | None,
) -> None:
    """Follow QUEUE's partitions (as tail -f; nothing is leased), one JSON line per message."""
    client = session.client
    infos = {p.partition: p for p in client.partitions(queue)}
    wanted = list(partitions) or sorted(infos)
    for p in wanted:
        if p not in infos:
            raise click.BadParameter(f"{queue} has no partition {p}", param_hint="--partition")
    at = {p: _tail_start(client, queue, infos[p], from_beginning, since) for p in wanted}
    shown = 0
    while max_messages is None or shown < max_messages:
        for p in wanted:
            wait = 1000 if len(wanted) == 1 else 200
            page = client.read(queue, p, at[p], max_messages=100, wait_ms=wait)
            for m in page.messages:
                print_json_line(m)
                shown += 1
                if max_messages is not None and shown >= max_messages:
                    return
            at[p] = page.next_offset


def _tail_start(
    client: Client, queue: str, info: PartitionInfo, from_beginning: bool, since: float | None
) -> int:
    """Where to start following: from --since, the beginning, or the end."""
    if since is not None:
        page = client.read(queue, info.partition, 0, 1, timestamp_ms=_since_ms(since))
        return page.messages[0].offset if page.messages else page.next_offset
    return info.earliest_offset if from_beginning else info.latest_offset


@click.command()
@click.argument("queue")
@click.option("--partition", type=click.IntRange(min=0), required=True)
@click.option("--offset", type=click.IntRange(min=0), required=True)
@json_option
@click.pass_obj
def history(session: Session, queue: str, partition: int, offset: int, as_json: bool) -> None:
    """A message's state, receive count and last 16 leases (none once acked or dead)."""
    h = session.client.get_history(queue, partition, offset)
    if as_json:
        print_json(h)
        return
    print_line(f"{queue}[{partition}]@{offset}: {h.state}, received {h.receive_count} times")
    print_table(
        ("#", "received", "consumer", "lease until"),
        (
            (i + 1, timestamp(d.time_ms), d.consumer, timestamp(d.deadline_ms))
            for i, d in enumerate(h.deliveries)
        ),
    )
