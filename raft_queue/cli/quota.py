"""``raftq quota`` and ``raftq usage``: fair use (docs/operations.md
"Quotas and usage"). Both need an ``admin`` grant."""

from __future__ import annotations

import csv
import operator
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from raft_queue.cli.durations import Duration
from raft_queue.cli.output import json_option, print_json, print_line, print_objects

if TYPE_CHECKING:
    from raft_queue.cli.main import Session

QUOTA_COLUMNS = [("principal", lambda x: x.principal), ("queue", lambda x: x.queue or "*"),
                 ("messages/s", lambda x: x.messages_per_s or "-"),
                 ("bytes/s", lambda x: x.bytes_per_s or "-"),
                 ("burst s", lambda x: f"{x.burst_s:g}")]  # fmt: skip
USAGE_FIELDS = ("principal", "queue", "hour", "operation", "requests", "messages", "bytes")


def quota_json(x: Any) -> dict[str, Any]:
    return {"principal": x.principal, "queue": x.queue, "messages_per_s": x.messages_per_s,
            "bytes_per_s": x.bytes_per_s, "burst_s": x.burst_s}  # fmt: skip


@click.group()
def quota() -> None:
    """Send rates per principal (and per principal and queue)."""


@quota.command("set")
@click.argument("principal")
@click.option("--queue", default="", help="Only this queue (default: all its queues together).")
@click.option("--messages-per-s", type=click.IntRange(0), default=0, help="0: no limit.")
@click.option("--bytes-per-s", type=click.IntRange(0), default=0, help="0: no limit.")
@click.option("--burst", type=Duration(), default=1.0, help="Burst, in seconds of rate.")
@json_option
@click.pass_obj
def quota_set(session: Session, principal: str, queue: str, messages_per_s: int,
              bytes_per_s: int, burst: float, as_json: bool) -> None:  # fmt: skip
    """Set PRINCIPAL's quota; over it, sends get RESOURCE_EXHAUSTED with a retry-after."""
    answer = session.client.set_quota(principal, messages_per_s, bytes_per_s, burst, queue)
    if as_json:
        print_json(quota_json(answer))
    else:
        print_objects(QUOTA_COLUMNS, [answer])


@quota.command("list")
@click.option("--principal", default="", help="Only this principal's.")
@json_option
@click.pass_obj
def quota_list(session: Session, principal: str, as_json: bool) -> None:
    """Every quota."""
    found = session.client.list_quotas(principal)
    if as_json:
        print_json([quota_json(x) for x in found])
    else:
        print_objects(QUOTA_COLUMNS, found)


@quota.command("remove")
@click.argument("principal")
@click.option("--queue", default="", help="The per-queue quota (default: the principal's total).")
@click.pass_obj
def quota_remove(session: Session, principal: str, queue: str) -> None:
    """Remove a quota: PRINCIPAL's sends (to QUEUE) are no longer limited by it."""
    session.client.remove_quota(principal, queue)
    print_line(f"quota of {principal}{' on ' + queue if queue else ''} removed")


def _hour(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:00Z", time.gmtime(ms / 1000))


def _record(r: Any) -> dict[str, Any]:
    return {"principal": r.principal, "queue": r.queue, "hour": _hour(r.hour_ms),
            "operation": r.operation, "requests": r.requests, "messages": r.messages,
            "bytes": r.bytes}  # fmt: skip


@click.command()
@click.option("--principal", default="", help="Only this principal.")
@click.option("--queue", default="", help="Only this queue.")
@click.option("--since", type=Duration(), default=24 * 3600.0, show_default="24h",
              help="Hours that end within this long ago (e.g. 24h, 7d).")  # fmt: skip
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV.")
@json_option
@click.pass_obj
def usage(session: Session, principal: str, queue: str, since: float, as_csv: bool,
          as_json: bool) -> None:  # fmt: skip
    """Requests, messages and bytes per principal, queue, hour (UTC) and
    operation (send, receive, ack, read, rejected_auth, rejected_quota)."""
    since_ms = int((time.time() - since) * 1000)
    records = [_record(r) for r in session.client.usage(principal, queue, since_ms)]
    if as_json:
        print_json(records)
    elif as_csv:
        out = csv.DictWriter(sys.stdout, fieldnames=USAGE_FIELDS, lineterminator="\n")
        out.writeheader()
        out.writerows(records)
    else:
        print_objects([(f, operator.itemgetter(f)) for f in USAGE_FIELDS], records)
