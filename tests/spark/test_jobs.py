"""The jobs of spark/jobs end to end on small generated data, in the shared session."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark.jobs import archive_parquet, ingest_files, replay_range
from tests.spark.queues import read_queue, send_spread

pytestmark = pytest.mark.spark

JOBS = Path(__file__).resolve().parents[2] / "spark" / "jobs"


@pytest.mark.parametrize("job", ["ingest_files", "archive_parquet", "replay_range"])
def test_every_job_answers_help_without_starting_spark(job):
    out = subprocess.run(
        [sys.executable, str(JOBS / f"{job}.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "usage:" in out.stdout and "--bootstrap" in out.stdout


def _orders(tmp_path: Path) -> Path:
    """20 orders as CSV, JSON lines and Parquet files (same rows)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    rows = [{"id": i, "customer": f"c{i % 4}", "amount": i * 1.5} for i in range(20)]
    table = pa.Table.from_pylist(rows)
    (tmp_path / "csv").mkdir()
    pacsv.write_csv(table, tmp_path / "csv" / "orders.csv")
    (tmp_path / "orders.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(table, tmp_path / "orders.parquet")
    return tmp_path


def test_ingest_files_publishes_each_row_once_even_when_run_twice(
    spark, cluster, client, tmp_path, capsys
):
    data = _orders(tmp_path)
    queue = f"ingest-{time.monotonic_ns()}"
    base = ["--bootstrap", cluster.bootstrap, "--queue", queue, "--create-partitions", "2"]
    csv = [
        "--input",
        str(data / "csv"),
        "--format",
        "csv",
        "--key-column",
        "customer",
        "--header-columns",
        "id",
    ]
    for _ in range(2):  # the second run stands for a re-run after a crash
        ingest_files.main([*base, *csv])
    ingest_files.main([*base, "--input", str(data / "orders.jsonl"), "--value-column", "id"])
    ingest_files.main([*base, "--input", str(data / "orders.parquet")])
    out = capsys.readouterr().out
    assert "20 rows, 0 new messages" in out and "(20 already there)" in out
    stored = read_queue(client, queue)
    assert len(stored) == 60
    from_csv = [m for m in stored if m.headers]
    assert sorted(int(m.headers["id"]) for m in from_csv) == list(range(20))
    assert all(json.loads(m.body)["customer"] == m.key for m in from_csv)
    assert sorted(m.body for m in stored if not m.headers and not m.key)[:2] == [b"0", b"1"]


def test_archive_parquet_writes_date_partitions_and_resumes(
    spark, cluster, client, make_queue, tmp_path
):
    queue = make_queue(partitions=2)
    send_spread(client, queue, per_partition=6, partitions=2)
    out, ck = tmp_path / "archive", tmp_path / "ck"
    argv = [
        "--bootstrap",
        cluster.bootstrap,
        "--queue",
        queue,
        "--output",
        str(out),
        "--checkpoint",
        str(ck),
        "--available-now",
    ]
    archive_parquet.main(argv)
    send_spread(client, queue, per_partition=3, partitions=2, tag="more")
    archive_parquet.main(argv)
    df = spark.read.parquet(str(out))
    rows = df.select("partition", "offset", "value", "date").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [
        (p, o) for p in range(2) for o in range(9)
    ]
    truth = {(m.partition, m.offset): m for m in read_queue(client, queue)}
    for r in rows:
        m = truth[(r.partition, r.offset)]
        assert r.value == m.body
        assert str(r.date) == time.strftime("%Y-%m-%d", time.gmtime(m.timestamp_ms / 1000))
    assert {p.name.split("=")[0] for p in out.iterdir() if not p.name.startswith("_")} == {"date"}


def test_replay_range_republishes_only_the_time_range_once(
    spark, cluster, client, make_queue, capsys
):
    source, target = make_queue(partitions=2), make_queue(partitions=2)
    for wave in ("old", "mid", "new"):
        send_spread(client, source, per_partition=4, partitions=2, tag=wave)
        time.sleep(0.05)
    mid = [m for m in read_queue(client, source) if m.body.startswith(b"mid")]
    start = min(m.timestamp_ms for m in mid)
    end = max(m.timestamp_ms for m in mid) + 1
    argv = [
        "--bootstrap",
        cluster.bootstrap,
        "--source",
        source,
        "--target",
        target,
        "--from",
        str(start),
        "--to",
        str(end),
    ]
    replay_range.main(argv)
    replay_range.main(argv)  # run again by mistake: nothing new
    out = capsys.readouterr().out
    assert "8 messages replayed, 0 new" in out
    stored = read_queue(client, target)
    assert sorted(m.body for m in stored) == sorted(m.body for m in mid)
    assert all(m.key for m in stored)
