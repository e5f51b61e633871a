"""The sink's rules that need no session: ids, placement, schema checks, Arrow shapes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from raft_queue import Message
from raft_queue.client.partitioner import partition_for_key
from spark.raftq import rows
from spark.raftq.options import OptionError, sink_options
from spark.raftq.sink import _placement, check_schema, replay_risk, stream_sink_id


def _checkpoint(tmp_path: Path, planned: int, committed: int, age_s: float) -> str:
    for name, last in (("offsets", planned), ("commits", committed)):
        (tmp_path / name).mkdir()
        for batch in range(last + 1):
            (tmp_path / name / str(batch)).write_text("v1")
    then = time.time() - age_s
    os.utime(tmp_path / "offsets" / str(planned), (then, then))
    return str(tmp_path)


def test_a_replay_older_than_the_dedup_window_is_warned_about(tmp_path: Path) -> None:
    ck = _checkpoint(tmp_path, planned=3, committed=2, age_s=600)
    warning = replay_risk(ck, window_ms=300_000)
    assert warning and "batch 3 is replayed 600 s after" in warning
    assert replay_risk(ck, window_ms=3_600_000) is None


def test_no_warning_when_the_last_batch_committed_or_the_checkpoint_is_remote(tmp_path: Path):
    ck = _checkpoint(tmp_path, planned=3, committed=3, age_s=600)
    assert replay_risk(ck, window_ms=1000) is None
    assert replay_risk("s3a://bucket/ck", window_ms=1000) is None
    assert "at-least-once" in (replay_risk(ck, window_ms=0) or "")


def test_stream_sink_id_is_stable_per_checkpoint_and_overridable(tmp_path: Path) -> None:
    relative = os.path.relpath(tmp_path / "ck")
    a = stream_sink_id(sink_options({"checkpointLocation": relative}))
    b = stream_sink_id(sink_options({"checkpointLocation": str(tmp_path / "ck")}))
    assert a == b and a.startswith("ck-")
    assert (
        stream_sink_id(sink_options({"sinkId": "mine", "checkpointLocation": relative})) == "mine"
    )
    with pytest.raises(OptionError, match="sinkId or checkpointLocation"):
        stream_sink_id(sink_options({}))


def test_placement_is_explicit_else_by_key_else_spread_by_row() -> None:
    row = rows.OutRow(queue="q", partition=None, key="", value=b"v", headers=None)
    assert [_placement(row, 3, 1, i) for i in range(4)] == [1, 2, 0, 1]
    keyed = rows.OutRow("q", None, "customer-7", b"v", None)
    assert _placement(keyed, 5, 0, 0) == partition_for_key("customer-7", 5)
    assert _placement(rows.OutRow("q", 2, "k", b"v", None), 3, 0, 0) == 2
    with pytest.raises(ValueError, match=r"partition 3 not in \[0, 3\)"):
        _placement(rows.OutRow("q", 3, "", b"v", None), 3, 0, 0)


def _schema(**types: object) -> StructType:
    return StructType([StructField(name, t) for name, t in types.items()])  # type: ignore[arg-type]


def test_schema_check_lists_every_problem_at_once() -> None:
    schema = _schema(
        value=IntegerType(),
        key=ArrayType(IntegerType()),
        partition=StringType(),
        headers=StringType(),
    )
    with pytest.raises(OptionError) as info:
        check_schema(schema, sink_options({}))
    text = str(info.value)
    for part in ("value must be", "key must be", "partition must be", "headers must be",
                 "set option queue"):  # fmt: skip
        assert part in text
    fine = _schema(
        value=BinaryType(), key=StringType(), headers=MapType(StringType(), StringType()),
        queue=StringType(),
    )  # fmt: skip
    check_schema(fine, sink_options({}))


def test_rows_in_accept_kafka_and_map_headers_and_refuse_non_utf8_keys() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "value": ["a", None],
            "key": [b"k1", None],
            "topic": ["t", "t"],
            "headers": [[{"key": "h", "value": b"1"}], None],
        }
    )
    got = list(rows.out_rows(batch))
    assert got[0] == rows.OutRow("t", None, "k1", b"a", {"h": b"1"})
    assert got[1] == rows.OutRow("t", None, "", b"", None)
    as_map = pa.RecordBatch.from_pydict(
        {"value": [b"v"], "headers": pa.array([[("x", "y")]], pa.map_(pa.string(), pa.string()))}
    )
    assert next(rows.out_rows(as_map)).headers == {"x": b"y"}
    bad = pa.RecordBatch.from_pydict({"value": [b"v"], "key": [b"\xff"]})
    with pytest.raises(ValueError, match="not UTF-8"):
        list(rows.out_rows(bad))


def test_rows_out_have_the_declared_arrow_schema_with_kafkas_nulls() -> None:
    messages = [
        Message("q", 1, 7, b"body", key="", headers={}, timestamp_ms=1_700_000_000_123),
        Message("q", 1, 8, b"b2", key="k", headers={"z": b"2", "a": b"1"}, timestamp_ms=5),
    ]
    batch = rows.to_record_batch(messages, include_headers=True)
    assert batch.schema == rows.arrow_schema(True)
    out = batch.to_pylist()
    assert out[0]["key"] is None and out[0]["headers"] is None
    assert out[1]["headers"] == [{"key": "a", "value": b"1"}, {"key": "z", "value": b"2"}]
    assert out[0]["timestamp"].timestamp() == 1_700_000_000.123
    assert out[0]["timestampType"] == rows.LOG_APPEND_TIME
