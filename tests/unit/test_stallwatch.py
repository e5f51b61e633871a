"""RAFTQ_STALL_WATCH logs a busy Raft driver with its stack (observability/stallwatch.py)."""

from __future__ import annotations

import gc
import logging
import threading
import time

import pytest

from raft_queue.observability import stallwatch
from raft_queue.replication.host import RaftHost


def _hold_the_driver() -> None:
    time.sleep(0.3)  # a driver pass of 300 ms (sleep releases the GIL: the watcher runs)


def test_a_busy_driver_is_logged_with_what_it_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RAFTQ_STALL_WATCH", "100")
    host = RaftHost(idle_tick_s=0.02)
    host.start()
    try:
        with caplog.at_level(logging.WARNING, logger="raft_queue.stallwatch"):
            stallwatch.start_from_env(host)
            host.call(lambda: None).result(5)  # the watcher saw an idle driver first
            host.call(_hold_the_driver).result(5)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and "in all" not in caplog.text:
                time.sleep(0.02)
        assert "stallwatch driver busy" in caplog.text
        assert "_hold_the_driver" in caplog.text, "the stack names what the driver runs"
        assert "in all" in caplog.text
    finally:
        host.stop()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(
        t.name == "stallwatch" for t in threading.enumerate()
    ):
        time.sleep(0.02)
    assert not any(t.name == "stallwatch" for t in threading.enumerate()), "ends with its host"


def test_off_unless_the_variable_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAFTQ_STALL_WATCH", raising=False)
    host = RaftHost(idle_tick_s=0.02)
    before = threading.active_count()
    callbacks = len(gc.callbacks)
    stallwatch.start_from_env(host)
    assert threading.active_count() == before
    assert len(gc.callbacks) == callbacks
