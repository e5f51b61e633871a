"""PrincipalPolls (server/dataplane/polls.py): long polls per principal on a node."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.server.dataplane.polls import PrincipalPolls


def test_one_over_the_cap_is_refused_naming_the_limit_and_counts_nothing() -> None:
    polls = PrincipalPolls(2)
    with polls.hold("alice"), polls.hold("alice"):
        with pytest.raises(errors.ResourceExhausted) as exc, polls.hold("alice"):
            pass  # pragma: no cover
        assert "limits.max_long_polls_per_principal 2" in str(exc.value)
        assert "'alice'" in str(exc.value)
        assert polls.active("alice") == 2
        with polls.hold("bob"):  # another principal has its own count
            assert polls.active("bob") == 1
    assert polls.active("alice") == 0 and polls.active("bob") == 0


def test_a_poll_that_ends_in_an_error_gives_its_place_back() -> None:
    polls = PrincipalPolls(1)
    with pytest.raises(RuntimeError), polls.hold("alice"):
        raise RuntimeError("the poll failed")
    with polls.hold("alice"):
        assert polls.active("alice") == 1
