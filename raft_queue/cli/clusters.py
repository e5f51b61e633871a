"""The external cluster manager on the command line (docs/operations.md
"Two levels of manager"):

- ``raftq manager --config FILE [--id ID]``: run one manager process;
- ``raftq clusters list|add|remove|drain``: the clusters it manages;
- ``raftq queue place Q --cluster C``: put (or adopt) a queue on a cluster;
- ``raftq queue move Q --to C [--dry-run|--execute]``, ``raftq queue move Q
  status|cancel``: move a queue to another cluster (manager/moves.py);
- ``raftq dev up --clusters N`` starts N clusters and a 3-node manager
  (``fleet_up``, called by cli/dev.py).

Commands reach the manager through ``--manager`` (or ``$RAFTQ_MANAGER``);
with ``--manager`` set, the message commands (send, receive, ack, nack,
read) go through the manager's mapping too (client/managed.py).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from raft_queue.cli.output import json_option, print_json
from raft_queue.cli.queue import queue

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(exists=True),
              help="Manager TOML file (configs/manager-3node.toml).")  # fmt: skip
@click.option("--id", "manager_id", default="", help="Manager id, when the file describes several.")
@click.option("--log-level", default="INFO", show_default=True)
def manager(config_path: str, manager_id: str, log_level: str) -> None:
    """Run one external cluster manager until SIGINT/SIGTERM."""
    from raft_queue.manager.main import run

    run(config_path, manager_id, log_level)


def _admin(session: Session) -> Any:
    if not session.manager:
        raise click.UsageError("give the manager's address: raftq --manager HOST:PORT ...")
    return session.manager_admin


def _cluster_row(c: Any) -> dict[str, Any]:
    return {
        "name": c.name, "health": c.health, "load": c.load, "draining": c.draining,
        "bootstrap": list(c.bootstrap), "queues": list(c.queues), "reason": c.reason,
        "heat_msgs_per_s": c.heat_msgs_per_s if c.heat_msgs_per_s >= 0 else None,
    }  # fmt: skip


@click.group()
def clusters() -> None:
    """The clusters the external manager maps queues to."""


@clusters.command("list")
@json_option
@click.pass_obj
def list_clusters(session: Session, as_json: bool) -> None:
    """Each cluster: health (healthy, degraded, down), load (partitions per
    node), heat (messages handled per second per node), draining, queues."""
    answer = _admin(session).list_clusters()
    rows = [_cluster_row(c) for c in answer.clusters]
    if as_json:
        print_json({"leader": answer.leader, "version": answer.version, "clusters": rows})
        return
    click.echo(f"{'CLUSTER':<16} {'HEALTH':<9} {'LOAD':>5} {'HEAT/s':>8} {'DRAIN':<5} "
               f"{'QUEUES':>6}  REASON")  # fmt: skip
    for r in rows:
        drain = "yes" if r["draining"] else ""
        heat = "-" if r["heat_msgs_per_s"] is None else f"{r['heat_msgs_per_s']:.0f}"
        click.echo(f"{r['name']:<16} {r['health']:<9} {r['load']:>5} {heat:>8} {drain:<5} "
                   f"{len(r['queues']):>6}  {r['reason']}")  # fmt: skip


@clusters.command("add")
@click.argument("name")
@click.option("--bootstrap", required=True, help="Node addresses of that cluster, comma separated.")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False),
              help="A file holding an admin token of that cluster (kept sealed).")  # fmt: skip
@json_option
@click.pass_obj
def add(session: Session, name: str, bootstrap: str, token_file: str | None, as_json: bool) -> None:
    """Register cluster NAME (again: new addresses or token)."""
    token = Path(token_file).read_text().strip() if token_file else ""
    addresses = [a.strip() for a in bootstrap.split(",") if a.strip()]
    info = _admin(session).add_cluster(name, addresses, token)
    _show(info, as_json, f"cluster {name} added ({info.health})")


@clusters.command("remove")
@click.argument("name")
@json_option
@click.pass_obj
def remove(session: Session, name: str, as_json: bool) -> None:
    """Forget cluster NAME (refused while it holds a managed queue)."""
    _show(_admin(session).remove_cluster(name), as_json, f"cluster {name} removed")


@clusters.command("drain")
@click.argument("name")
@click.option("--undo", is_flag=True, help="Take new queues again.")
@json_option
@click.pass_obj
def drain(session: Session, name: str, undo: bool, as_json: bool) -> None:
    """Place no new queue on NAME (its queues stay: raftq queue move moves them)."""
    info = _admin(session).drain_cluster(name, undrain=undo)
    _show(info, as_json, f"cluster {name} {'takes new queues' if undo else 'draining'}")


def _show(info: Any, as_json: bool, line: str) -> None:
    if as_json:
        print_json(_cluster_row(info))
    else:
        click.echo(line)


@queue.command("place")
@click.argument("name")
@click.option("--cluster", "cluster", required=True, help="The cluster to put it on.")
@click.option("--partitions", type=click.IntRange(1, 1024), default=None,
              help="For a new queue (default 1).")  # fmt: skip
@json_option
@click.pass_obj
def place(session: Session, name: str, cluster: str, partitions: int | None, as_json: bool) -> None:
    """Map queue NAME to CLUSTER: create it there, or adopt the one it has."""
    answer = _admin(session).place_queue(name, cluster, partitions=partitions)
    homes = [(h.cluster, h.local_partition) for h in answer.partitions]
    if as_json:
        print_json({"queue": name, "partitions": [list(h) for h in homes]})
    else:
        click.echo(f"queue {name}: {len(homes)} partition(s) on {cluster}")


def _move_row(m: Any) -> dict[str, Any]:
    return {
        "queue": m.queue, "source": m.source, "target": m.target, "phase": m.phase,
        "partitions": m.partitions, "messages": m.messages, "copied": m.copied,
        "started_ms": m.started_ms, "phase_ms": m.phase_ms, "finished_ms": m.finished_ms,
        "error": m.error, "moved_partitions": list(m.moved_partitions),
        "leases_left": m.leases_left,
    }  # fmt: skip


def _partition_list(ctx: Any, param: Any, value: str) -> tuple[int, ...]:
    """--partitions 2,3 -> (2, 3); range and repeats are the server's to check."""
    try:
        return tuple(int(p) for p in value.split(",") if p.strip()) if value else ()
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated partition numbers") from None


def _move_line(m: dict[str, Any]) -> str:
    line = f"queue {m['queue']}: {m['source']} -> {m['target']}  {m['phase']}"
    if m["moved_partitions"]:  # a partial move
        line += "  partitions " + ",".join(str(p) for p in m["moved_partitions"])
    if m["phase"] == "leases":
        line += f"  (cut over; {m['leases_left']} carried lease(s) still followed at the source)"
    if m["phase"] == "done":
        took = (m["finished_ms"] - m["started_ms"]) / 1000
        line += f"  ({m['copied']} message(s) copied in {took:.1f} s)"
    return line + (f"  last error: {m['error']}" if m["error"] else "")


@queue.command("move")
@click.argument("name")
@click.argument("action", required=False, type=click.Choice(["status", "cancel"]))
@click.option("--to", "to", default="", help="The cluster to move the queue to.")
@click.option("--partitions", "partitions", default="", callback=_partition_list,
              help="Move only these GLOBAL partitions, e.g. 2,3 (all on one cluster; the "
              "target must not hold the queue yet). Default: the whole queue.")  # fmt: skip
@click.option("--dry-run/--execute", "dry_run", default=True, show_default=True,
              help="Check and describe the move only (the default), or start it.")  # fmt: skip
@click.option("--wait/--no-wait", "wait", default=True, show_default=True,
              help="With --execute: wait until the move is done (or cancelled).")  # fmt: skip
@click.option("--timeout", "timeout_s", type=float, default=300.0, show_default=True)
@json_option
@click.pass_obj
def move(
    session: Session, name: str, action: str | None, to: str, partitions: tuple[int, ...],
    dry_run: bool, wait: bool, timeout_s: float, as_json: bool,
) -> None:  # fmt: skip
    """Move queue NAME to the cluster --to, online: create it there, fence the
    source, copy what is not acked, cut the mapping over. With --partitions,
    only those partitions move (the rest keep serving on the source).
    ``status``: where the move stands; ``cancel``: roll it back (before the
    cut-over only)."""
    admin = _admin(session)
    if action == "status":
        rows = [_move_row(m) for m in admin.move_status(name).moves]
    elif action == "cancel":
        rows = [_move_row(admin.cancel_move(name))]
    else:
        if not to:
            raise click.UsageError("give the target cluster: --to CLUSTER")
        rows = [_move_row(admin.move_queue(name, to, dry_run=dry_run, partitions=partitions))]
        if not dry_run and wait:
            rows = [_wait_move(admin, name, timeout_s)]
    if as_json:
        print_json(rows[0] if len(rows) == 1 else rows)
        return
    for r in rows:
        click.echo(_move_line(r))
        if r["phase"] == "planned":
            click.echo(
                f"  {r['partitions']} partition(s), {r['messages']} message(s) not acked now; "
                "sends to them pause from the fence to the cut-over. Run with --execute."
            )


@queue.command("fence")
@click.argument("name")
@click.option("--undo", is_flag=True, help="Unfence: take sends and lease again.")
@click.option("--partitions", "partitions", default="", callback=_partition_list,
              help="Only these partitions of the queue on this cluster, e.g. 2,3 (a partial "
              "move's fence). Default: the whole queue.")  # fmt: skip
@click.pass_obj
def fence(session: Session, name: str, undo: bool, partitions: tuple[int, ...]) -> None:
    """On one cluster (--server): fence queue NAME as a move does (no sends,
    no leases; acks apply), or lift the fence. An operator's way out when a
    move left a queue fenced; the manager fences and unfences by itself."""
    if session.manager:
        raise click.UsageError("fence talks to one cluster: give --server, not --manager")
    answer = session.client.fence_queue(name, not undo, partitions)
    some = ",".join(str(p) for p in answer.fenced_partitions)
    click.echo(f"queue {name}: {'fenced' if answer.fenced else 'not fenced'} "
               f"({answer.partitions} partition(s)"
               f"{'; partitions ' + some + ' fenced' if some else ''})")  # fmt: skip


def _wait_move(admin: Any, name: str, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        row = _move_row(admin.move_status(name).moves[0])
        if row["phase"] in ("done", "cancelled") or time.monotonic() > deadline:
            return row
        time.sleep(0.2)


# ---- raftq dev up --clusters N -------------------------------------------------------------


def fleet_up(
    count: int, nodes: int, data_dir: str, base_port: int, tls: bool = False, mtls: bool = False
) -> None:
    """N LocalClusters (cluster k on base_port + 1000 * k) and a 3-node manager
    (on base_port + 1000 * N), one admin token for all; foreground until Ctrl-C.
    ``tls``: one dev CA (DATA_DIR/tls) signs every node's and manager's
    certificate, and every gRPC port is TLS only; ``mtls``: they require client
    certificates too (raft_queue/testing/fleet.py)."""
    from raft_queue.testing.fleet import LocalFleet

    fleet = LocalFleet(
        Path(data_dir).resolve(), clusters=count, nodes=nodes, base_port=base_port, tls=tls,
        mtls=mtls,
    )  # fmt: skip
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        fleet.start()
        _print_fleet(fleet)
        while not stopping:
            time.sleep(0.5)
    finally:
        click.echo("stopping...")
        fleet.stop(every_process=True)


def _print_fleet(fleet: Any) -> None:
    from raft_queue.cli.dev import tls_exports

    managers = fleet.managers
    click.echo(f"raft_queue: {len(fleet.by_name)} clusters and a 3-node manager up")
    for name, c in fleet.by_name.items():
        click.echo(f"  cluster {name}: {c.bootstrap}  (data in {c.base_dir})")
    click.echo(f"  manager:    {managers.bootstrap}  (data in {managers.base_dir})")
    click.echo(f"\n  export RAFTQ_MANAGER={managers.bootstrap}")
    click.echo(f"  export RAFTQ_TOKEN={fleet.token}")
    for line in tls_exports(fleet.c1):  # one CA for the fleet: valid for every port
        click.echo(f"  export {line}")
    click.echo("  raftq clusters list")
    click.echo("  raftq queue place orders --cluster c1")
    click.echo("  raftq send orders hello      # routed by the manager's mapping")
    click.echo("  raftq queue move orders --to c2 --execute   # online, to the other cluster")
    click.echo(f"  raftq --server {fleet.c1.bootstrap} cluster status   # one cluster directly")
    click.echo("\nCtrl-C stops everything.")
