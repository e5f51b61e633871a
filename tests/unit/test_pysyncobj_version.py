"""Our hazard fixes patch pysyncobj 0.3.17's internals: any other version is refused."""

from __future__ import annotations

import pytest

from raft_queue import errors
from raft_queue.replication import raft


def test_the_pinned_pysyncobj_version_is_accepted() -> None:
    raft.check_version()


def test_another_pysyncobj_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import pysyncobj.version

    monkeypatch.setattr(pysyncobj.version, "VERSION", "0.3.18")
    with pytest.raises(errors.VersionMismatch, match="0.3.17"):
        raft.check_version()
