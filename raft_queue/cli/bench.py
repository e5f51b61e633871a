"""``raftq bench``: run the benchmark workloads N times and print medians beside targets.

Starts a fresh LocalCluster in a temporary directory (removed afterwards,
kept when a workload failed, for its node logs) unless ``--server`` names an
existing cluster. Each run does every selected workload once, so machine
noise spreads over all of them; the table shows the median and min..max over
runs. Benchmarks report, they never fail: the exit code is 0 whether or not
a target is met (1 only if the cluster cannot start). Before each workload it
waits (up to ``--quiet-wait``) for the machine to be quiet and records the
background CPU it saw, as the peer harness does. docs/benchmarks.md explains
the workloads and the figures.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from raft_queue.bench.cluster import local_cluster, wait_healthy
from raft_queue.bench.measure import loadavg, wait_quiet
from raft_queue.bench.workloads import WORKLOADS, Params, Result, Target
from raft_queue.cli.output import json_option, print_json, print_line, print_table
from raft_queue.client import Client


@dataclass(frozen=True)
class Goal:
    """A target to print beside a metric: ``op`` is how the median must compare."""

    op: str
    value: float
    note: str = ""

    def met(self, x: float) -> bool:
        return {"<=": x <= self.value, ">=": x >= self.value, "<": x < self.value}[self.op]


GOALS = {
    ("W1", "p99_ms"): Goal("<=", 10.0),
    ("W2", "msgs_per_s"): Goal(">=", 50_000),
    ("W3", "msgs_per_s"): Goal(">=", 60_000, "issue 3"),
    ("W4", "p99_ms"): Goal("<=", 20.0, "issue 3: <= 10"),
    ("idle", "cpu256_pct"): Goal("<", 10.0),
}


@click.command()
@click.option(
    "--workloads",
    default="W1,W2,W3,W4,idle",
    show_default=True,
    help="Comma separated, from W1 W2 W3 W4 idle.",
)
@click.option("--runs", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("--nodes", type=click.IntRange(3, 9), default=3, show_default=True)
@click.option(
    "--server",
    "bench_server",
    default=None,
    help="Use the cluster at these addresses instead of starting one (idle is then "
    "skipped: it needs the node processes).",
)
@click.option("--partitions", type=click.IntRange(1, 1024), default=1, show_default=True)
@click.option(
    "--inflight",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Concurrent send_batch calls in W2 and the W3 prefill.",
)
@click.option(
    "--quiet-wait",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Seconds to wait before each workload for the machine to be quiet (0: no wait).",
)
@click.option(
    "--durability",
    type=click.Choice(["fsync", "quorum", "leader"]),
    default="fsync",
    show_default=True,
    help="Of the benchmark queues; the targets are for fsync, the others show its cost.",
)
@click.option(
    "--encryption/--no-encryption",
    default=True,
    show_default=True,
    help="Encryption at rest of the benchmark queues (its cost: docs/benchmarks.md).",
)
@click.option("--quiet-pct", type=float, default=25.0, show_default=True)
@click.option(
    "--insecure",
    is_flag=True,
    help="Start the cluster with [security] insecure = true and send no token "
    "(measures what authentication costs; docs/benchmarks.md).",
)
@click.option(
    "--tls",
    "bench_tls",
    is_flag=True,
    help="Start the local cluster with TLS (gRPC between clients and nodes and between "
    "nodes), to measure its cost; W1-W3 only. With --server, use the global --tls/--ca.",
)
@click.option("--scale", type=click.FloatRange(0.001), default=1.0, hidden=True)
@json_option
def bench(
    workloads: str,
    runs: int,
    nodes: int,
    bench_server: str | None,
    partitions: int,
    inflight: int,
    durability: str,
    encryption: bool,
    quiet_wait: float,
    quiet_pct: float,
    scale: float,
    as_json: bool,
    insecure: bool = False,
    bench_tls: bool = False,
) -> None:
    """Benchmark W1-W4 and idle CPU; print medians (min..max) beside the targets."""
    names = _parse_workloads(workloads)
    # SIGTERM unwinds like Ctrl-C, so the cluster this command started is stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    params = Params(
        partitions=partitions, inflight=inflight, durability=durability, encryption=encryption
    )
    if scale != 1.0:
        params = params.scaled(scale)
    env = {
        "loadavg_before": loadavg(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    with _target(bench_server, nodes, insecure, bench_tls) as (target, outcome):
        results = [
            _run_one(name, run, target, params, quiet_wait, quiet_pct)
            for run, name in _schedule(names, runs)
        ]
        outcome["failed"] = any("error" in r["info"] for r in results)
    env["loadavg_after"] = loadavg()
    rows = summarize(results)
    if as_json:
        print_json(
            _finite({"params": asdict(params), "env": env, "runs": results, "summary": rows})
        )
        return
    _print_report(rows, results, env, runs)


def _schedule(names: list[str], runs: int) -> list[tuple[int, str]]:
    """Run by run, so noise spreads over every workload; idle runs last, since creating
    and deleting hundreds of groups leaves the cluster busy for a while after."""
    busy = [(run, n) for run in range(1, runs + 1) for n in names if n != "idle"]
    return busy + [(run, n) for run in range(1, runs + 1) for n in names if n == "idle"]


def _parse_workloads(spec: str) -> list[str]:
    by_upper = {name.upper(): name for name in WORKLOADS}
    names = [by_upper.get(w.strip().upper()) for w in spec.split(",") if w.strip()]
    if not names or None in names:
        raise click.BadParameter(
            f"{spec!r}: choose from {', '.join(WORKLOADS)}", param_hint="--workloads"
        )
    return [n for n in names if n is not None]


@contextlib.contextmanager
def _target(
    server: str | None, nodes: int, insecure: bool = False, tls: bool = False
) -> Iterator[tuple[Target, dict[str, bool]]]:
    """A Target on ``server``, or on a fresh local cluster that is stopped afterwards;
    its directory is removed unless the caller sets ``outcome["failed"]`` (or raises)."""
    tag = f"-{os.getpid()}-{int(time.time()) % 100000}"
    outcome = {"failed": True}
    if server:
        session = click.get_current_context().find_root().obj
        token = getattr(session, "token", None)
        with Client(server, timeout_s=60, token=token, **getattr(session, "tls", {})) as client:
            yield Target(client, server, [], tag, token), outcome
        return
    base = Path(tempfile.mkdtemp(prefix="raftq-bench-"))
    cluster = local_cluster(base, nodes, tls=tls)
    if insecure:
        cluster.security = {"insecure": True}
    click.echo(f"starting a {nodes}-node cluster in {base}", err=True)
    try:
        cluster.start()
        cluster.wait_ready(60)
        token = "" if insecure else cluster.token  # "" also overrides $RAFTQ_TOKEN
        with cluster.client(timeout_s=60, token=token) as client:
            pids = [cluster.pid(i) for i in range(nodes)]
            yield Target(client, cluster.bootstrap, pids, tag, token), outcome
    finally:
        cluster.stop()
        if outcome["failed"]:
            click.echo(f"node logs kept in {base}", err=True)
        else:
            shutil.rmtree(base, ignore_errors=True)


def _run_one(
    name: str, run: int, target: Target, params: Params, quiet_wait: float, quiet_pct: float
) -> dict[str, Any]:
    """One workload run as a JSON-able dict; an exception is recorded, not raised."""
    healthy_wait_s = wait_healthy(target.client)
    background = wait_quiet(quiet_wait, quiet_pct) if quiet_wait > 0 else None
    seen = "not checked" if background is None else f"{background:.0f}% of a core"
    click.echo(f"run {run} {name} (background CPU {seen}) ...", err=True)
    t0 = time.monotonic()
    try:
        result = WORKLOADS[name](target, params)
    except Exception as exc:  # keep going: one failed run must not lose the others
        if os.environ.get("RAFTQ_DEBUG"):
            traceback.print_exc()
        result = Result(name, {}, {"error": f"{type(exc).__name__}: {exc}"})
    record = {"workload": name, "run": run, **asdict(result)}
    record.update(background_pct=background, healthy_wait_s=healthy_wait_s)
    record["wall_s"] = round(time.monotonic() - t0, 1)
    click.echo(f"  {_brief(result)}", err=True)
    return record


def _brief(result: Result) -> str:
    if "error" in result.info:
        return f"ERROR {result.info['error']}"
    return ", ".join(f"{k} {_fmt(k, v)}" for k, v in result.metrics.items())


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (workload, metric): median, min, max over the runs that produced it."""
    values: dict[tuple[str, str], list[float]] = {}
    for r in results:
        for metric, value in r["metrics"].items():
            if isinstance(value, int | float) and math.isfinite(value):
                values.setdefault((r["workload"], metric), []).append(float(value))
    rows = []
    for (workload, metric), vals in values.items():
        goal = GOALS.get((workload, metric))
        median = statistics.median(vals)
        row = {"workload": workload, "metric": metric, "median": median}
        row.update(min=min(vals), max=max(vals), runs=len(vals))
        if goal is not None:
            row.update(target=f"{goal.op} {goal.value:g}", met=goal.met(median), note=goal.note)
        rows.append(row)
    return rows


def _fmt(metric: str, value: float) -> str:
    if metric.endswith("msgs_per_s"):
        return f"{value:,.0f}"
    if metric.endswith("_ms"):
        return f"{value:.2f}"
    return f"{value:.1f}" if metric.endswith("_pct") else f"{value:g}"


def _print_report(
    rows: list[dict[str, Any]], results: list[dict[str, Any]], env: dict[str, Any], runs: int
) -> None:
    table = []
    for r in rows:
        m = r["metric"]
        verdict = "" if "met" not in r else ("yes" if r["met"] else "NO")
        target = f"{r.get('target', '')} {r.get('note') and '(' + r['note'] + ')' or ''}".strip()
        span = f"{_fmt(m, r['min'])}..{_fmt(m, r['max'])}"
        table.append((r["workload"], m, _fmt(m, r["median"]), span, r["runs"], target, verdict))
    title = f"raft_queue bench: median (min..max) of {runs} run(s)"
    print_table(("workload", "metric", "median", "range", "runs", "target", "met"), table, title)
    for r in results:
        if "error" in r["info"] or "skipped" in r["info"]:
            why = r["info"].get("error") or r["info"].get("skipped")
            print_line(f"{r['workload']} run {r['run']}: {why}")
    background = [r["background_pct"] for r in results if r["background_pct"] is not None]
    if background:
        print_line(
            f"background CPU before workloads: median {statistics.median(background):.0f}%, "
            f"max {max(background):.0f}% of one core"
        )
    print_line(f"load average before {env['loadavg_before']}, after {env['loadavg_after']}")


def _finite(value: Any) -> Any:
    """NaN/inf -> None, so the JSON output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
