"""The cluster secret file and the keys derived from it."""

from __future__ import annotations

import os

import pytest

from raft_queue.config import SecurityConfig
from raft_queue.errors import ConfigError
from raft_queue.security import secret


def test_generated_secret_is_private_and_kept(tmp_path):
    path = secret.generate_secret_file(tmp_path / "s" / "cluster.secret")
    assert os.stat(path).st_mode & 0o777 == 0o600
    first = secret.load_secret(path)
    assert len(first) == secret.SECRET_BYTES
    secret.generate_secret_file(path)  # an existing secret is never replaced
    assert secret.load_secret(path) == first


def test_a_secret_readable_by_others_is_refused(tmp_path):
    path = secret.generate_secret_file(tmp_path / "cluster.secret")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="security.cluster_secret_file.*readable"):
        secret.load_secret(path)


@pytest.mark.parametrize("text", ["", "zz" * 32, "ab" * 16])
def test_a_malformed_or_short_secret_is_refused(tmp_path, text):
    path = tmp_path / "cluster.secret"
    path.write_text(text)
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match="security.cluster_secret_file"):
        secret.load_secret(path)


def test_each_purpose_gets_its_own_key(tmp_path):
    s = secret.load_secret(secret.generate_secret_file(tmp_path / "cluster.secret"))
    keys = {secret.derive_key(s, p) for p in secret.PURPOSES}
    assert len(keys) == len(secret.PURPOSES)
    assert secret.derive_key(s, secret.RAFT_LINK) == secret.derive_key(s, secret.RAFT_LINK)
    with pytest.raises(ValueError):
        secret.derive_key(s, "something-else")


def test_a_node_without_a_secret_refuses_to_start_unless_insecure(tmp_path):
    with pytest.raises(ConfigError, match="security.cluster_secret_file"):
        secret.node_secret(SecurityConfig())
    assert secret.node_secret(SecurityConfig(insecure=True)) is None
    path = secret.generate_secret_file(tmp_path / "cluster.secret")
    assert secret.node_secret(SecurityConfig(cluster_secret_file=str(path))) is not None
