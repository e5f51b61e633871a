"""SetManagedBy: the external manager's claim on a cluster (core/metadata_manager.py)."""

from __future__ import annotations

import json

import pytest

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core.metadata import MetadataMachine
from raft_queue.core.metadata_manager import ManagedBy

MANAGERS = ("127.0.0.1:7400", "127.0.0.1:7402", "127.0.0.1:7404")


def test_set_managed_by_records_the_claim_and_bumps_the_version_once() -> None:
    m = MetadataMachine()
    assert m.managed_by() is None
    got = m.apply(meta.SetManagedBy("east", MANAGERS))
    assert got == ManagedBy("east", MANAGERS) == m.managed_by()
    assert m.version == 1
    m.apply(meta.SetManagedBy("east", MANAGERS))  # the poller repeating itself writes nothing
    assert m.version == 1
    m.apply(meta.SetManagedBy("east", MANAGERS[:1]))  # the manager group was re-addressed
    assert m.managed_by() == ManagedBy("east", MANAGERS[:1]) and m.version == 2


def test_an_empty_claim_clears_it() -> None:
    m = MetadataMachine()
    m.apply(meta.SetManagedBy("east", MANAGERS))
    assert m.apply(meta.SetManagedBy("", ())) is None
    assert m.managed_by() is None and m.version == 2


@pytest.mark.parametrize(
    ("cluster", "managers", "field"),
    [
        ("", MANAGERS, "cluster_name"),
        ("east", (), "managers"),
        ("bad name", MANAGERS, "cluster_name"),
        ("east", ("127.0.0.1:7400", "no-port"), "managers[1]"),
        ("east", ("127.0.0.1:0",), "managers[0]"),
    ],
)
def test_a_bad_claim_is_refused_naming_the_field_and_changes_nothing(
    cluster: str, managers: tuple[str, ...], field: str
) -> None:
    m = MetadataMachine()
    m.apply(meta.SetManagedBy("east", MANAGERS))
    with pytest.raises(errors.InvalidArgument) as refused:
        m.apply(meta.SetManagedBy(cluster, managers))
    assert refused.value.field == field
    assert m.managed_by() == ManagedBy("east", MANAGERS) and m.version == 1


def test_the_command_survives_the_raft_codec() -> None:
    cmd = meta.SetManagedBy("east", MANAGERS)
    assert meta.decode_meta(meta.encode_meta(cmd)) == cmd
    cleared = meta.SetManagedBy("", ())
    assert meta.decode_meta(meta.encode_meta(cleared)) == cleared


def test_the_claim_survives_a_snapshot_round_trip() -> None:
    m = MetadataMachine()
    m.apply(meta.SetManagedBy("east", MANAGERS))
    image = m.to_bytes()
    back = MetadataMachine.from_bytes(image)
    assert back.managed_by() == ManagedBy("east", MANAGERS)
    assert back.version == m.version and back.to_bytes() == image


def test_an_unmanaged_image_is_unchanged_and_an_older_image_loads_unmanaged() -> None:
    m = MetadataMachine()
    m.apply(meta.SetManagedBy("east", MANAGERS))
    m.apply(meta.SetManagedBy("", ()))
    image = json.loads(m.to_bytes())
    assert "managed_by" not in image  # byte for byte as before the field existed
    assert MetadataMachine.from_bytes(json.dumps(image).encode()).managed_by() is None
