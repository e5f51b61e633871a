"""The history recorder and the checker: each anomaly class is caught in a small
handmade history, and a clean history (with indeterminate sends) passes."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import ANOMALIES, Report, check
from chaos.history import History, Process, extract, load


class Script:
    """Builds histories tersely: each call records an invoke and its completion."""

    def __init__(self, path: Path | None = None) -> None:
        self.history = History(path)
        self.client = self.history.process()
        self.consumer = self.history.process()

    def send(
        self,
        payload: str,
        outcome: str = "ok",
        offset: int | None = None,
        key: str | None = None,
        partition: int = 0,
    ) -> None:
        op = self.client.invoke("send", payload, queue="q", key=key)
        fields = {"partition": partition, "offset": offset} if outcome == "ok" else {}
        self.client.history.complete(op, outcome, **fields)
        if outcome == "info":
            self.client = self.history.process()

    def receive(
        self, *records: tuple[Any, ...], f: str = "receive", process: Process | None = None
    ) -> None:
        proc = process or self.consumer
        op = proc.invoke(f, queue="q")
        proc.ok(op, [_rec(*r) for r in records])

    def drain(self, *records: tuple[Any, ...]) -> None:
        self.receive(*records, f="drain")

    def ack(self, *records: tuple[Any, ...], process: Process | None = None) -> None:
        proc = process or self.consumer
        value = [_rec(*r) for r in records]
        proc.ok(proc.invoke("ack", value, queue="q"))

    def read(
        self,
        start: int,
        records: list[tuple[int, str]],
        high: int | None = None,
        process: Process | None = None,
        partition: int = 0,
    ) -> None:
        proc = process or self.consumer
        op = proc.invoke("read", {"partition": partition, "offset": start}, queue="q")
        value: dict[str, Any] = {
            "partition": partition,
            "offset": start,
            "records": [list(r) for r in records],
        }
        if high is not None:
            value["high"] = high
        proc.ok(op, value)

    def check(self, **kwargs: Any) -> Report:
        return check(self.history.ops, **kwargs)


def _rec(
    offset: int,
    payload: str,
    key: str | None = None,
    receipt: str | None = None,
    partition: int = 0,
) -> dict[str, Any]:
    return {
        "partition": partition,
        "offset": offset,
        "payload": payload,
        "key": key,
        "receipt": receipt,
    }


def only(report: Report, name: str) -> list[dict[str, Any]]:
    """The examples of ``name``, asserting no other class fired."""
    assert {k for k, v in report.anomalies.items() if v} == {name}, report.render()
    assert not report.ok
    return report.anomalies[name]


def clean_script() -> Script:
    s = Script()
    s.send("m0", offset=0, key="a")
    s.send("m1", offset=1, key="a")
    s.send("m2", "info")  # timed out, yet stored: recovered
    s.send("m3", "info")  # timed out, never stored: fine
    s.send("m4", "fail")  # definitely rejected, never stored: fine
    s.receive((0, "m0", "a", "r0"))
    s.ack((0, "m0", "a", "r0"))
    s.read(0, [(0, "m0"), (1, "m1"), (2, "m2")], high=3)
    s.drain((1, "m1", "a"), (2, "m2"))
    return s


def test_clean_history_passes_and_counts_recovered() -> None:
    report = clean_script().check(fifo_keys=True, replica_digests={0: {"n1": "ab", "n2": "ab"}})
    assert report.ok, report.render()
    assert report.counts == {**dict.fromkeys(ANOMALIES, 0), "recovered": 1}
    assert report.recovered == ["m2"] and report.warnings == []
    assert report.stats["acked"] == 2 and report.stats["indeterminate"] == 2
    assert report.render().startswith("VALID")


def test_lost_acked_send_never_returned() -> None:
    s = Script()
    s.send("m0", offset=0)
    s.drain()
    assert only(s.check(), "lost") == [{"payload": "m0", "queue": "q", "partition": 0, "offset": 0}]


def test_missing_drain_is_warned_about() -> None:
    s = Script()
    s.send("m0", offset=0)
    assert s.check().warnings and only(s.check(), "lost")


def test_unexpected_payload_never_sent() -> None:
    s = Script()
    s.drain((0, "ghost"))
    assert [e["payload"] for e in only(s.check(), "unexpected")] == ["ghost"]


def test_failed_send_that_appears_is_flagged() -> None:
    s = Script()
    s.send("m0", "fail")
    s.drain((0, "m0"))
    assert only(s.check(), "failed_but_seen") == [{"payload": "m0"}]


def test_failed_attempt_then_successful_retry_is_not_failed_but_seen() -> None:
    s = Script()
    s.send("m0", "fail")
    s.send("m0", offset=0)
    s.drain((0, "m0"))
    assert s.check().ok


def test_payload_stored_at_two_offsets_is_a_duplicate_only_with_dedup() -> None:
    s = Script()
    s.send("m0", "info")
    s.send("m0", offset=1)  # the retry was stored again
    s.drain((0, "m0"), (1, "m0"))
    assert [e["kind"] for e in only(s.check(), "duplicated")] == ["stored_twice"]
    assert s.check(dedup=False).ok


def test_record_acked_under_two_leases_is_a_duplicate() -> None:
    s = Script()
    other = s.history.process()
    s.send("m0", offset=0)
    s.receive((0, "m0", None, "lease-1"))
    s.receive((0, "m0", None, "lease-2"), process=other)  # lease 1 expired: allowed
    s.ack((0, "m0", None, "lease-1"))  # stale receipt accepted: wrong
    s.ack((0, "m0", None, "lease-2"), process=other)
    s.drain()
    assert [e["kind"] for e in only(s.check(), "duplicated")] == ["acked_twice"]
    assert [e["kind"] for e in only(s.check(dedup=False), "duplicated")] == ["acked_twice"]


def test_retried_ack_of_one_lease_is_not_a_duplicate() -> None:
    s = Script()
    s.send("m0", offset=0)
    s.receive((0, "m0", None, "lease-1"))
    s.ack((0, "m0", None, "lease-1"))
    s.ack((0, "m0", None, "lease-1"))
    s.drain()
    assert s.check().ok


def test_redelivery_after_completed_ack_is_a_duplicate() -> None:
    s = Script()
    s.send("m0", offset=0)
    s.receive((0, "m0", None, "lease-1"))
    s.ack((0, "m0", None, "lease-1"))
    s.drain((0, "m0"))
    assert [e["kind"] for e in only(s.check(), "duplicated")] == ["redelivered_after_ack"]
    assert only(s.check(dedup=False), "duplicated")


def test_one_offset_with_two_payloads_is_a_conflict() -> None:
    s = Script()
    s.send("m0", offset=0)
    s.send("m1", offset=0)
    s.drain((0, "m0"))
    s.read(0, [(0, "m1")])
    conflicts = only(s.check(dedup=False), "offset_conflict")
    assert conflicts == [{"queue": "q", "partition": 0, "offset": 0, "payloads": ["m0", "m1"]}]


@pytest.mark.parametrize(
    ("reads", "problem"),
    [
        ([(0, [(1, "m1"), (0, "m0")], None)], "offsets not increasing"),
        ([(1, [(0, "m0"), (1, "m1")], None)], "offset below start"),
        ([(0, [(0, "m0"), (1, "m1")], None), (1, [], None)], "earlier offset vanished"),
        ([(0, [(0, "m0")], 2), (2, [], 1)], "high offset shrank"),
    ],
)
def test_reads_going_backwards_are_non_monotonic(reads: list[Any], problem: str) -> None:
    s = Script()
    s.send("m0", offset=0)
    s.send("m1", offset=1)
    for start, records, high in reads:
        s.read(start, records, high)
    s.drain((0, "m0"), (1, "m1"))
    assert [e["problem"] for e in only(s.check(), "non_monotonic")] == [problem]


def test_rereading_from_an_earlier_offset_is_monotonic() -> None:
    s = Script()
    s.send("m0", offset=0)
    s.send("m1", offset=1)
    s.read(0, [(0, "m0"), (1, "m1")], high=2)
    s.read(0, [(0, "m0")], high=2)  # a seek back with a small max: allowed
    s.read(2, [], high=2)
    s.drain((0, "m0"), (1, "m1"))
    assert s.check().ok


def test_read_with_a_gap_is_a_hole() -> None:
    s = Script()
    for i in range(3):
        s.send(f"m{i}", offset=i)
    s.read(0, [(0, "m0"), (2, "m2")])
    s.drain((1, "m1"))
    holes = only(s.check(), "hole")
    assert [(h["missing"], h["count"]) for h in holes] == [([1], 1)]


@pytest.mark.parametrize(
    ("order", "flagged"),
    [
        # m1 first skips m0 (stored earlier under the same key); m0 then goes backwards
        (["m1", "m0"], [(1, {"skipped": [0]}), (0, {"after": [1]})]),
        (["m1"], [(1, {"skipped": [0]})]),
    ],
)
def test_out_of_order_delivery_per_key_is_a_fifo_violation(
    order: list[str], flagged: list[tuple[int, dict[str, list[int]]]]
) -> None:
    s = Script()
    s.send("m0", offset=0, key="k")
    s.send("m1", offset=1, key="k")
    for payload in order:
        s.receive((int(payload[1]), payload, "k"))
    s.read(0, [(0, "m0"), (1, "m1")])
    s.drain()
    violations = only(s.check(fifo_keys=True, dedup=False), "fifo_violation")
    assert len(violations) == len(flagged)
    for found, (offset, problem) in zip(violations, flagged, strict=True):
        assert found["offset"] == offset and problem.items() <= found.items()
    assert s.check(fifo_keys=False, dedup=False).ok


def test_fifo_allows_redelivery_of_the_current_record() -> None:
    s = Script()
    s.send("m0", offset=0, key="k")
    s.send("m1", offset=1, key="k")
    s.receive((0, "m0", "k", "l1"))
    s.receive((0, "m0", "k", "l2"))  # lease l1 expired
    s.ack((0, "m0", "k", "l2"))
    s.drain((1, "m1", "k"))
    assert s.check(fifo_keys=True).ok


def test_replicas_with_different_digests_diverge() -> None:
    s = clean_script()
    digests = {0: {"n1": "ab", "n2": "ab", "n3": "cd"}, 1: {"n1": "ef", "n2": "ef"}}
    assert only(s.check(replica_digests=digests), "replica_divergence") == [
        {"partition": 0, "digests": {"n1": "ab", "n2": "ab", "n3": "cd"}}
    ]


def test_report_json_and_render_name_the_anomalies() -> None:
    s = Script()
    s.send("m0", offset=0)
    s.drain((0, "ghost"))
    report = s.check()
    data = json.loads(report.to_json())
    assert data["ok"] is False and data["counts"]["lost"] == 1 and data["counts"]["unexpected"] == 1
    assert data["anomalies"]["lost"][0]["payload"] == "m0"
    text = report.render()
    assert text.startswith("INVALID: lost 1, unexpected 1") and "ghost" in text


# --- the recorder --------------------------------------------------------------------


def test_completion_inherits_invocation_fields_and_value() -> None:
    history = History()
    proc = history.process()
    op = proc.invoke("send", "m0", queue="q", key="k")
    done = proc.ok(op, partition=3, offset=9)
    assert (done["value"], done["queue"], done["key"], done["f"]) == ("m0", "q", "k", "send")
    assert (done["index"], done["type"], done["partition"]) == (1, "ok", 3)
    assert done["time_ns"] >= op["time_ns"]


def test_info_retires_the_process() -> None:
    history = History()
    proc = history.process()
    first = proc.id
    proc.info(proc.invoke("send", "m0"))
    assert proc.id != first
    proc.ok(proc.invoke("send", "m1"))
    extract(history.ops)  # still well formed: one op at a time per process id


def test_operation_records_fail_for_definite_errors_and_info_otherwise() -> None:
    proc = History().process()
    with pytest.raises(ValueError), proc.operation("send", "m0", definite=(ValueError,)):
        raise ValueError("rejected")
    with pytest.raises(TimeoutError), proc.operation("send", "m1", definite=(ValueError,)):
        raise TimeoutError("deadline")
    with proc.operation("send", "m2"):
        pass  # forgot to complete
    with proc.operation("send", "m3", queue="q") as pending:
        pending.ok(partition=0, offset=0)
    types = [(o["value"], o["type"]) for o in proc.history.ops if o["type"] != "invoke"]
    assert types == [("m0", "fail"), ("m1", "info"), ("m2", "info"), ("m3", "ok")]


def test_history_file_round_trips_and_survives_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    s = Script(path)
    s.send("m0", offset=0)
    s.drain((0, "m0"))
    s.history.close()
    with path.open("a") as f:
        f.write('{"index": 99, "proc')  # crashed mid-write
    assert load(path) == s.history.ops
    assert check(load(path)).ok


def test_concurrent_recording_keeps_indices_dense_and_ordered() -> None:
    history = History()

    def work() -> None:
        proc = history.process()
        for i in range(200):
            proc.ok(proc.invoke("send", f"{proc.id}-{i}"))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ops = history.ops
    assert [o["index"] for o in ops] == list(range(8 * 200 * 2))
    assert len(extract(ops).attempts) == 8 * 200


def test_malformed_history_is_rejected() -> None:
    history = History()
    history.invoke(0, "send", "m0")
    history.invoke(0, "send", "m1")
    with pytest.raises(ValueError, match="while busy"):
        extract(history.ops)
    with pytest.raises(ValueError, match="unknown operation"):
        history.invoke(1, "enqueue", "m2")


def test_unfinished_invocation_counts_as_indeterminate() -> None:
    history = History()
    history.invoke(0, "send", "m0", queue="q")
    report = check(history.ops)
    assert report.ok and report.stats["indeterminate"] == 1
