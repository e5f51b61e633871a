"""server/control/controllers.py: the role a node records in its data dir, and the
live-majority rule for changing the metadata group's voters."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from raft_queue import errors
from raft_queue.server.control.controllers import Role, check_majority, load_role, save_role

VOTERS = {"n1": "h:1", "n2": "h:2", "n3": "h:3"}


def config(tmp_path: Path, controller: bool = True) -> SimpleNamespace:
    return SimpleNamespace(data_dir=str(tmp_path / "data"), controller=controller)


def test_without_a_recorded_role_the_config_bootstraps(tmp_path: Path) -> None:
    assert load_role(config(tmp_path, controller=False), VOTERS) == Role(False, VOTERS)


def test_a_recorded_role_wins_over_the_config(tmp_path: Path) -> None:
    cfg = config(tmp_path, controller=True)
    save_role(cfg, Role(False, {"n2": "h:2", "n3": "h:3", "n4": "h:4"}))
    assert load_role(cfg, VOTERS) == Role(False, {"n2": "h:2", "n3": "h:3", "n4": "h:4"})


def test_an_unreadable_role_file_is_an_error_not_a_silent_bootstrap(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "controllers.json").write_text("{not json")
    with pytest.raises(errors.Internal, match="controllers.json"):
        load_role(cfg, VOTERS)


def test_changes_that_keep_a_live_majority_pass() -> None:
    check_majority(VOTERS, {"n1", "n2", "n3", "n4"}, "add", "n4")  # 4 of 4
    check_majority(VOTERS, {"n1", "n2"}, "remove", "n3")  # a dead voter out: 2 of 2
    check_majority(VOTERS, {"n2", "n3"}, "remove", "n1")


@pytest.mark.parametrize(
    ("alive", "action", "node"),
    [({"n1", "n4"}, "add", "n4"), ({"n1", "n2"}, "remove", "n1"), ({"n1"}, "remove", "n2")],
)
def test_changes_that_leave_no_live_majority_are_refused_naming_the_node(
    alive: set[str], action: str, node: str
) -> None:
    with pytest.raises(errors.FailedPrecondition, match="node: .*no majority"):
        check_majority(VOTERS, alive, action, node)
