"""MetadataMachine: the metadata group's voters (StartControllerChange,
FinishControllerChange, DropControllerChange)."""

from __future__ import annotations

from typing import Any

import pytest

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core.metadata import (
    DropControllerChange,
    FinishControllerChange,
    MetadataMachine,
    StartControllerChange,
)
from tests.unit.test_metadata_machine import machine_with_nodes, register

BOOT = (("n1", "h:7001"), ("n2", "h:7002"), ("n3", "h:7003"))


def four() -> MetadataMachine:
    m = machine_with_nodes(3)
    m.apply(register("n4", metadata_raft_port=7004))
    return m


def add(node: str, address: str = "h:7004") -> StartControllerChange:
    return StartControllerChange("add", node, address, BOOT)


def test_an_add_records_the_bootstrap_voters_then_the_new_one_on_finish() -> None:
    m = four()
    assert m.controllers() == {}
    change = m.apply(add("n4"))
    assert str(change) == "add n4"
    assert m.controllers() == dict(BOOT)
    assert m.controller_change() == change
    m.apply(FinishControllerChange("n4"))
    assert m.controllers() == {**dict(BOOT), "n4": "h:7004"}
    assert m.controller_change() is None
    assert m.nodes()["n4"].controller


def test_a_remove_drops_the_voter_and_its_controller_flag() -> None:
    m = four()
    m.apply(add("n4"))
    m.apply(FinishControllerChange("n4"))
    m.apply(StartControllerChange("remove", "n1"))
    m.apply(FinishControllerChange("n1"))
    assert sorted(m.controllers()) == ["n2", "n3", "n4"]
    assert not m.nodes()["n1"].controller
    m.apply(register("n1", controller=True))  # its config still says controller
    assert not m.nodes()["n1"].controller


def test_one_change_at_a_time_and_a_retry_is_the_same_change() -> None:
    m = four()
    first = m.apply(add("n4"))
    assert m.apply(add("n4")) == first
    version = m.version
    with pytest.raises(errors.FailedPrecondition, match="in flight"):
        m.apply(StartControllerChange("remove", "n1"))
    assert m.version == version


@pytest.mark.parametrize(
    ("cmd", "error", "text"),
    [
        (add("n9"), errors.NotFound, "node: 'n9'"),
        (add("n2", "h:7777"), errors.InvalidArgument, "already a controller"),
        (add("n4", ""), errors.FailedPrecondition, "metadata_raft_port"),
        (
            StartControllerChange("remove", "n4", "", BOOT),
            errors.InvalidArgument,
            "not a controller",
        ),
        (StartControllerChange("move", "n4", "", BOOT), errors.InvalidArgument, "action"),
    ],
)
def test_bad_changes_are_refused_naming_the_field(cmd: Any, error: type, text: str) -> None:
    m = four()
    with pytest.raises(error) as exc:
        m.apply(cmd)
    assert m.controllers() == {} and m.controller_change() is None
    assert text in str(exc.value)


def test_the_last_controller_cannot_be_removed() -> None:
    m = machine_with_nodes(1)
    with pytest.raises(errors.FailedPrecondition, match="last controller"):
        m.apply(StartControllerChange("remove", "n1", "", (("n1", "h:7001"),)))


def test_an_add_that_is_not_made_can_be_dropped_a_remove_cannot() -> None:
    m = four()
    m.apply(add("n4"))
    m.apply(DropControllerChange("n4"))
    assert m.controller_change() is None and "n4" not in m.controllers()
    m.apply(StartControllerChange("remove", "n1"))
    with pytest.raises(errors.FailedPrecondition):
        m.apply(DropControllerChange("n1"))


def test_voters_and_the_change_survive_the_snapshot_and_the_codec() -> None:
    m = four()
    for cmd in (add("n4"), FinishControllerChange("n4"), StartControllerChange("remove", "n2")):
        m.apply(meta.decode_meta(meta.encode_meta(cmd)))
    copy = MetadataMachine.from_bytes(m.to_bytes())
    assert copy.controllers() == m.controllers()
    assert copy.controller_change() == m.controller_change()
    assert copy.to_bytes() == m.to_bytes()
