"""Node config loading/validation and QueueSpec validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from raft_queue import config, errors
from raft_queue.config import Limits, NodeConfig, QueueSpec, RaftTuning

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def field_of(exc: pytest.ExceptionInfo[errors.InvalidArgument]) -> str:
    return exc.value.field


# ---- shipped files -------------------------------------------------------------------


def test_the_shipped_single_node_config_loads() -> None:
    node = config.load(REPO / "configs" / "local-1node.toml")
    assert node.node_id == "n1"
    assert node.controller_peers == {"n1": "127.0.0.1:7100"}
    assert node.grpc_address == "127.0.0.1:7001"
    assert node.limits.max_message_bytes == 1 << 20
    assert node.cluster.auto_create_queues is False  # off, as Kafka advises for production
    assert node.queue_defaults == QueueSpec()  # the file spells out the defaults


def test_the_shipped_three_node_config_describes_three_disjoint_nodes() -> None:
    nodes = config.load_all(REPO / "configs" / "local-3node.toml")
    assert [n.node_id for n in nodes] == ["n1", "n2", "n3"]
    assert len({n.data_dir for n in nodes}) == 3
    ports = [p for n in nodes for p in (n.grpc_port, n.metadata_raft_port)]
    ranges = [set(range(n.raft_port_min, n.raft_port_max + 1)) for n in nodes]
    assert len(set(ports)) == 6
    assert not (ranges[0] & ranges[1]) and not (ranges[1] & ranges[2])
    assert all(not set(ports) & r for r in ranges)
    assert all(n.controller_peers == nodes[0].controller_peers for n in nodes)


def test_every_shipped_node_config_encrypts_at_rest() -> None:
    """Each node of configs/local-*.toml names the keyring `raftq keys init`
    makes (else it refuses to start: security/keyring.load_key_provider)."""
    nodes = [config.load(REPO / "configs" / "local-1node.toml")]
    nodes += config.load_all(REPO / "configs" / "local-3node.toml")
    for n in nodes:
        assert n.security.keyring_file == "data/keyring.json", n.node_id
        assert n.security.encryption_at_rest and not n.security.insecure


# ---- load() --------------------------------------------------------------------------


def test_unknown_keys_are_rejected_with_their_name(tmp_path: Path) -> None:
    path = write(tmp_path, 'node_id = "a"\ndata_dir = "d"\ngrpc_prot = 1\n')
    with pytest.raises(errors.ConfigError) as exc:
        config.load(path)
    assert field_of(exc) == "grpc_prot"
    path = write(tmp_path, 'node_id = "a"\ndata_dir = "d"\n[raft]\nheartbeat_s = 1\n')
    with pytest.raises(errors.ConfigError) as exc:
        config.load(path)
    assert field_of(exc) == "raft.heartbeat_s"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('data_dir = "d"', "node_id"),
        ('node_id = "a"\ndata_dir = "d"\ngrpc_port = "7001"', "grpc_port"),
        ('node_id = "a"\ndata_dir = "d"\ngrpc_port = true', "grpc_port"),
        ('node_id = "a"\ndata_dir = "d"\nseeds = "h:1"', "seeds"),
        ('node_id = "a"\ndata_dir = "d"\nraft = 3', "raft"),
        ('node_id = "a"\ndata_dir = "d"\n[limits]\nmax_wait_ms = 1.5', "limits.max_wait_ms"),
        (
            'node_id = "a"\ndata_dir = "d"\n[limits]\nreceive_linger_ms = -1',
            "limits.receive_linger_ms",
        ),
        ("node_id = ", "path"),
        (
            'node_id = "a"\ndata_dir = "d"\n[cluster]\nauto_create_queues = 1',
            "cluster.auto_create_queues",
        ),
        (
            'node_id = "a"\ndata_dir = "d"\n[queue_defaults]\npartitions = 0',
            "queue_defaults.partitions",
        ),
        (
            'node_id = "a"\ndata_dir = "d"\n[queue_defaults]\ndelay_ms = 31536000001',
            "queue_defaults.delay_ms",
        ),
        (
            'node_id = "a"\ndata_dir = "d"\n[queue_defaults]\nretention = 5',
            "queue_defaults.retention",
        ),
        (
            'node_id = "a"\ndata_dir = "d"\n[queue_defaults]\npartitions = "2"',
            "queue_defaults.partitions",
        ),
        (
            'node_id = "a"\ndata_dir = "d"\n[queue_defaults]\ndead_letter_queue = "x"',
            "queue_defaults.max_receives",
        ),
    ],
)
def test_load_names_the_bad_key(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(errors.ConfigError) as exc:
        config.load(write(tmp_path, text))
    assert field_of(exc) == field


def test_queue_defaults_and_auto_create_load(tmp_path: Path) -> None:
    text = (
        'node_id = "a"\ndata_dir = "d"\n[cluster]\nauto_create_queues = true\n'
        '[queue_defaults]\npartitions = 4\nordering = "fifo"\ndelay_ms = 86400000\n'
    )
    node = config.load(write(tmp_path, text))
    assert node.cluster.auto_create_queues is True
    assert node.queue_defaults == QueueSpec(partitions=4, ordering="fifo", delay_ms=86_400_000)


def test_integers_are_accepted_for_seconds(tmp_path: Path) -> None:
    text = 'node_id = "a"\ndata_dir = "d"\n[raft]\nlog_compaction_min_time_s = 400\n'
    node = config.load(write(tmp_path, text))
    assert node.raft.log_compaction_min_time_s == 400.0
    assert isinstance(node.raft.log_compaction_min_time_s, float)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError):
        config.load(tmp_path / "absent.toml")


def test_multi_node_file_merges_shared_and_own_tables(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        controllers = ["a=127.0.0.1:7100"]
        [raft]
        heartbeat_period_s = 0.2
        [nodes.a]
        data_dir = "da"
        [nodes.b]
        data_dir = "db"
        controller = false
        metadata_raft_port = 7101
        [nodes.b.raft]
        election_timeout_min_s = 1.0
        """,
    )
    a, b = config.load_all(path)
    assert (a.node_id, b.node_id) == ("a", "b")
    assert b.raft.heartbeat_period_s == 0.2 and b.raft.election_timeout_min_s == 1.0
    assert a.raft.election_timeout_min_s == 0.8
    with pytest.raises(errors.ConfigError) as exc:
        config.load(path, "c")
    assert field_of(exc) == "node_id"


# ---- NodeConfig validation -----------------------------------------------------------


def node(**changes: Any) -> NodeConfig:
    return NodeConfig(**{"node_id": "n1", "data_dir": "d", **changes})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"node_id": ""}, "node_id"),
        ({"node_id": "a b"}, "node_id"),
        ({"data_dir": ""}, "data_dir"),
        ({"grpc_port": 0}, "grpc_port"),
        ({"grpc_port": 7250}, "grpc_port"),
        ({"raft_port_min": 7300, "raft_port_max": 7299}, "raft_port_max"),
        ({"metadata_raft_port": 7200}, "metadata_raft_port"),
        ({"advertise_address": "nohost"}, "advertise_address"),
        ({"seeds": ("h:99999",)}, "seeds"),
        ({"controllers": ("x",)}, "controllers"),
        ({"controllers": ("a=h:1", "a=h:2")}, "controllers"),
        ({"controllers": ("other=127.0.0.1:7100",)}, "controllers"),
        ({"controller": False}, "controllers"),
        ({"controller": False, "controllers": ("n1=127.0.0.1:7100",)}, "controllers"),
        ({"rack": "bad rack"}, "rack"),
    ],
)
def test_node_config_rejects(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(errors.ConfigError) as exc:
        node(**changes)
    assert field_of(exc) == field


def test_advertise_address_overrides_the_listen_address() -> None:
    assert node(grpc_host="0.0.0.0", advertise_address="[::1]:9000").grpc_address == "[::1]:9000"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"election_timeout_max_s": 0.5}, "raft.election_timeout_max_s"),
        ({"heartbeat_period_s": 0.5}, "raft.heartbeat_period_s"),
        ({"tick_period_s": 0.3}, "raft.tick_period_s"),
        ({"log_compaction_min_time_s": 0}, "raft.log_compaction_min_time_s"),
        ({"commands_queue_size": 0}, "raft.commands_queue_size"),
        ({"append_entries_batch_bytes": 100}, "raft.append_entries_batch_bytes"),
        ({"log_compaction_min_entries": 0}, "raft.log_compaction_min_entries"),
        ({"coalesce_heartbeats": 1}, "raft.coalesce_heartbeats"),
        ({"pre_vote": "yes"}, "raft.pre_vote"),
    ],
)
def test_raft_tuning_rejects(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(errors.ConfigError) as exc:
        RaftTuning(**changes)
    assert field_of(exc) == field


@pytest.mark.parametrize(
    "key",
    ["leader_fallback_timeout_s", "connection_timeout_s", "connection_retry_s"],
)
def test_removed_raft_keys_are_unknown(tmp_path: Path, key: str) -> None:
    """Keys that were validated but never used are gone: setting one is an error."""
    text = f'node_id = "a"\ndata_dir = "d"\n[raft]\n{key} = 4.0\n'
    with pytest.raises(errors.ConfigError) as exc:
        config.load(write(tmp_path, text))
    assert field_of(exc) == f"raft.{key}"


@pytest.mark.parametrize(
    "key",
    [
        "max_headers",
        "max_header_name_bytes",
        "max_concurrent_rpcs",
        "max_standing_polls_per_partition",
        "max_standing_polls_per_consumer",
        "max_subscribe_credit",
        "max_receive_bytes",
    ],
)
def test_resource_bounds_reject_zero(key: str) -> None:
    with pytest.raises(errors.ConfigError) as exc:
        Limits(**{key: 0})
    assert field_of(exc) == f"limits.{key}"


def test_queue_defaults_fit_the_node_limit(tmp_path: Path) -> None:
    text = (
        'node_id = "a"\ndata_dir = "d"\n[limits]\nmax_message_bytes = 1000\n'
        "[queue_defaults]\nmax_message_bytes = 2000\n"
    )
    with pytest.raises(errors.ConfigError) as exc:
        config.load(write(tmp_path, text))
    assert field_of(exc) == "queue_defaults.max_message_bytes"


def test_an_entry_must_fit_a_request(tmp_path: Path) -> None:
    text = (
        'node_id = "a"\ndata_dir = "d"\n[limits]\nmax_request_bytes = 2097152\n'
        "[raft]\nappend_entries_batch_bytes = 4194304\n"
    )
    with pytest.raises(errors.ConfigError) as exc:
        config.load(write(tmp_path, text))
    assert field_of(exc) == "raft.append_entries_batch_bytes"


def test_every_validated_key_is_used() -> None:
    """Each [raft] and [limits] key is read somewhere outside config.py."""
    import pathlib
    import re

    root = pathlib.Path(config.__file__).parent
    code = "\n".join(
        p.read_text() for p in root.rglob("*.py") if p.name != "config.py" and "_pb2" not in p.name
    )
    for cls in (RaftTuning, Limits):
        for f in dataclasses.fields(cls):
            assert re.search(rf"\.{f.name}\b", code), f"{cls.__name__}.{f.name} is never used"


def test_limits_reject_a_request_smaller_than_a_message() -> None:
    with pytest.raises(errors.ConfigError) as exc:
        Limits(max_message_bytes=2 << 20, max_request_bytes=1 << 20)
    assert field_of(exc) == "limits.max_request_bytes"


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        node().grpc_port = 1  # type: ignore[misc]


# ---- QueueSpec ------------------------------------------------------------------------


def test_queue_spec_defaults_match_the_design() -> None:
    spec = QueueSpec()
    assert (spec.partitions, spec.replication_factor, spec.durability) == (1, 3, "fsync")
    assert (spec.visibility_timeout_ms, spec.dedup_window_ms) == (30_000, 300_000)
    assert spec.max_message_bytes == 1 << 20


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"partitions": 0}, "partitions"),
        ({"partitions": True}, "partitions"),
        ({"replication_factor": 2}, "replication_factor"),
        ({"durability": "disk"}, "durability"),
        ({"ordering": "total"}, "ordering"),
        ({"visibility_timeout_ms": 12 * 3_600_000 + 1}, "visibility_timeout_ms"),
        ({"max_receives": -1}, "max_receives"),
        ({"dead_letter_queue": "dlq"}, "max_receives"),
        ({"dead_letter_queue": "bad name", "max_receives": 3}, "dead_letter_queue"),
        ({"retention_ms": -1}, "retention_ms"),
        ({"max_message_bytes": 0}, "max_message_bytes"),
        ({"dedup_window_ms": 31 * 86_400_000}, "dedup_window_ms"),
        ({"delay_ms": -5}, "delay_ms"),
        ({"no_such_field": 1}, "no_such_field"),
    ],
)
def test_queue_spec_rejects_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(errors.InvalidArgument) as exc:
        QueueSpec().with_updates(**changes)
    assert field_of(exc) == field
    assert not isinstance(exc.value, errors.ConfigError)


def test_with_updates_returns_a_validated_copy() -> None:
    spec = QueueSpec(partitions=4)
    updated = spec.with_updates(visibility_timeout_ms=5000, dead_letter_queue="dlq", max_receives=5)
    assert updated.partitions == 4 and updated.visibility_timeout_ms == 5000
    assert spec.visibility_timeout_ms == 30_000


def test_queue_spec_dict_round_trip() -> None:
    spec = QueueSpec(partitions=3, ordering="fifo", retention_ms=1000)
    assert QueueSpec.from_dict(spec.to_dict()) == spec
    assert QueueSpec.from_dict({}) == QueueSpec()


@pytest.mark.parametrize("name", ["orders", "a.fifo", "A-1_b", "x" * 80])
def test_queue_names_accepted(name: str) -> None:
    config.check_queue_name(name)


@pytest.mark.parametrize("name", ["", "-a", "a b", "a/b", "x" * 81, "é"])
def test_queue_names_rejected(name: str) -> None:
    with pytest.raises(errors.InvalidArgument) as exc:
        config.check_queue_name(name)
    assert field_of(exc) == "name"
