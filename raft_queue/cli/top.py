"""``raftq top``: a live terminal view of nodes, queues and partitions.

It reads the same document as the status page (a node's ``/api/status`` on
its ``[metrics] address``) once a second and redraws it with rich's Live
display: nodes up or down, queue depth, in flight, oldest age and send and
receive rates with sparklines, partitions with leader and lag. ``--once``
prints one frame and exits (scripts, tests).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

BARS = "▁▂▃▄▅▆▇█"
HISTORY = 30


def fetch(url: str, token: str, timeout_s: float = 5.0) -> dict[str, Any]:
    req = urllib.request.Request(url.rstrip("/") + "/api/status")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            msg = f"{url}: a token is required (--token or RAFTQ_TOKEN)"
            raise click.ClickException(msg) from exc
        raise click.ClickException(f"{url}: HTTP {exc.code}") from exc
    except OSError as exc:
        raise click.ClickException(f"{url}: {exc}") from exc


class Rates:
    """Send and receive rates per queue from successive documents."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[float, float, float]] = {}
        self.sends: dict[str, list[float]] = {}
        self.receives: dict[str, list[float]] = {}

    def update(self, doc: dict[str, Any]) -> None:
        for q in doc["queues"]:
            name, now = q["name"], doc["time"]
            prev = self.last.get(name)
            if prev is not None:
                dt = max(1e-3, now - prev[0])
                _push(self.sends.setdefault(name, []), max(0.0, (q["sent"] - prev[1]) / dt))
                _push(self.receives.setdefault(name, []), max(0.0, (q["received"] - prev[2]) / dt))
            self.last[name] = (now, q["sent"], q["received"])


def _push(series: list[float], value: float) -> None:
    series.append(value)
    del series[:-HISTORY]


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    top = max(values) or 1.0
    return "".join(BARS[min(len(BARS) - 1, int(v / top * (len(BARS) - 1)))] for v in values)


def _rate(values: list[float]) -> Text:
    now = values[-1] if values else 0.0
    return Text(f"{now:8.1f} ") + Text(sparkline(values), style="cyan")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _partial(q: dict[str, Any], text: str) -> str:
    """A sum over the partitions with a leader: unknown without any, a lower bound
    while some have none (as the status page shows it)."""
    if q.get("leaders", q["partitions"]) == 0:
        return "?"
    return f">= {text}" if q.get("leaders", q["partitions"]) < q["partitions"] else text


def _table(title: str, *columns: str) -> Table:
    """A table; a column named "#..." holds numbers (right-aligned)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col.lstrip("#"), justify="right" if col.startswith("#") else "left")
    return table


def render(doc: dict[str, Any], rates: Rates) -> Group:
    up = sum(1 for n in doc["nodes"] if n["reachable"] and n["ready"])
    title = Text(
        f"raftq  {up}/{len(doc['nodes'])} nodes up  ·  {len(doc['queues'])} queues  ·  "
        f"metadata leader {doc['metadata_leader'] or 'none'}  ·  from {doc['node']}",
        style="bold green" if up == len(doc["nodes"]) else "bold red",
    )
    nodes = Table("node", "status", "state", "role", "last heartbeat", "gRPC", title="Nodes")
    for n in doc["nodes"]:
        status = ("up", "green") if n["ready"] else ("not ready", "yellow")
        if not n["reachable"]:
            status = ("DOWN", "bold red")
        role = "metadata leader" if n["metadata_leader"] else (
            "controller" if n["controller"] else "broker")  # fmt: skip
        nodes.add_row(n["id"], Text(status[0], style=status[1]), n["state"], role,
                      _age(n["heartbeat_age_s"]), n["address"])  # fmt: skip
    queues = _table("Queues", "queue", "parts", "#depth", "#in flight", "#delayed", "#dead",
                    "#oldest", "sends/s", "receives/s")  # fmt: skip
    for q in doc["queues"]:
        name = q["name"]
        oldest = _age(q["oldest_age_s"]) if q["messages"] else "-"
        queues.add_row(
            name, str(q["partitions"]), _partial(q, f"{q['messages']:,}"), f"{q['in_flight']:,}",
            f"{q['delayed']:,}", f"{q['dead']:,}", oldest,
            _rate(rates.sends.get(name, [])), _rate(rates.receives.get(name, [])),
        )  # fmt: skip
    parts = _table("Partitions", "partition", "leader", "replicas", "#lag", "#commit index")
    for p in doc["partitions"]:
        replicas = " ".join(f"{r['node']}:{r['role']}" for r in p["replicas"])
        leader = Text(p["leader"]) if p["leader"] else Text("NO LEADER", style="bold red")
        parts.add_row(f"{p['queue']}[{p['partition']}]", leader, replicas,
                      f"{p['lag']:,}", f"{p['commit_index']:,}")  # fmt: skip
    return Group(title, nodes, queues, parts)


@click.command()
@click.option(
    "--url",
    envvar="RAFTQ_STATUS_URL",
    default="http://127.0.0.1:9464",
    show_default=True,
    show_envvar=True,
    help="A node's HTTP address ([metrics] address); `raftq dev up` prints each.",
)
@click.option("--token", envvar="RAFTQ_TOKEN", default="", help="Admin token, if required.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True)
@click.option("--once", is_flag=True, help="Print one frame and exit.")
def top(url: str, token: str, interval: float, once: bool) -> None:
    """Live view of nodes, queues and partitions (the status page, in the terminal)."""
    rates = Rates()
    doc = fetch(url, token)
    rates.update(doc)
    if once:
        time.sleep(min(interval, 1.0))  # a second sample, so rates mean something
        doc = fetch(url, token)
        rates.update(doc)
        Console().print(render(doc, rates))
        return
    with Live(render(doc, rates), refresh_per_second=4, screen=False) as live:
        while True:
            time.sleep(interval)
            try:
                doc = fetch(url, token)
            except click.ClickException as exc:
                live.update(Text(f"{exc.message}; retrying", style="bold red"))
                continue
            rates.update(doc)
            live.update(render(doc, rates))
