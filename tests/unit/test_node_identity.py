"""Node signatures (security/node_identity.py): only the holder of the
cluster secret signs, for one node id, method, time and request."""

from __future__ import annotations

import pytest

from raft_queue import config
from raft_queue.errors import ConfigError
from raft_queue.security.node_identity import (
    NODE_KEY,
    SIG_KEY,
    TIME_KEY,
    NodeAuthError,
    NodeSigner,
    NodeVerifier,
)

SECRET = b"\x05" * 32
METHOD = "/raft_queue.v1.NodeService/Heartbeat"
NOW = 1_800_000_000.0


def sign(node: str = "n2", data: bytes = b"req", at: float = NOW, secret: bytes = SECRET):
    return NodeSigner(secret, node).metadata(METHOD, data, at)


def test_a_fresh_signature_names_its_node() -> None:
    assert NodeVerifier(SECRET).verify(sign(), METHOD, b"req", NOW + 59) == "n2"


@pytest.mark.parametrize(
    ("metadata", "method", "data", "now", "why"),
    [
        ((), METHOD, b"req", NOW, "no node signature"),
        (sign(secret=b"\x06" * 32), METHOD, b"req", NOW, "bad node signature"),
        (sign(), METHOD, b"other", NOW, "bad node signature"),
        (sign(), "/raft_queue.v1.NodeService/NodeStatus", b"req", NOW, "bad node signature"),
        (sign(at=NOW - 61), METHOD, b"req", NOW, "stale"),
        (sign(at=NOW + 61), METHOD, b"req", NOW, "stale"),
        (sign() + ((NODE_KEY, "n3"),), METHOD, b"req", NOW, "given twice"),
    ],
    ids=["missing", "other key", "other bytes", "other method", "old", "future", "twice"],
)
def test_a_bad_signature_is_refused(metadata, method, data, now, why) -> None:
    with pytest.raises(NodeAuthError, match=why):
        NodeVerifier(SECRET).verify(metadata, method, data, now)


def test_the_node_id_and_time_are_signed() -> None:
    good = dict(sign(node="n2"))
    for key, value in ((NODE_KEY, "n3"), (TIME_KEY, str(int(NOW * 1000) + 1))):
        forged = {**good, key: value}
        with pytest.raises(NodeAuthError, match="bad node signature"):
            NodeVerifier(SECRET).verify(forged.items(), METHOD, b"req", NOW)
    assert len(good[SIG_KEY]) == 64


def test_api_reflection_is_off_unless_configured(tmp_path) -> None:
    base = 'node_id = "n1"\ndata_dir = "d"\n'
    path = tmp_path / "n.toml"
    path.write_text(base)
    assert config.load(path).api.reflection is False
    path.write_text(base + "[api]\nreflection = true\n")
    assert config.load(path).api.reflection is True
    path.write_text(base + '[api]\nreflection = "yes"\n')
    with pytest.raises(ConfigError, match="api.reflection"):
        config.load(path)
