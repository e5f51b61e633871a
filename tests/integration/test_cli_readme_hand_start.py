"""The README's "Running a node yourself" path, from a fresh checkout: its
commands, read out of README.md and run verbatim as real ``raftq`` processes
in a copy of configs/ (only the copy's ports are moved to free ones), then a
send and a receive with the admin token those steps wrote, and a grep of the
node's data directory that finds no marker (encryption at rest is on)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raft_queue.testing.cluster import free_port, reserve_ports
from raft_queue.testing.files import written_bytes

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MARKER = "README-HAND-START-MARKER-7f3a"


def readme_commands() -> list[str]:
    """The ``raftq`` lines of the README's hand-start block, comments dropped."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Running a node yourself", 1)[1]
    block = section.split("```", 2)[1]
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line.startswith("raftq ")]


def _copy_configs(work: Path) -> list[int]:
    """configs/ into ``work``, the single-node file's ports moved to free ones
    (tests run beside other clusters); nothing else changes. The descriptors
    hold the Raft port range reserved (close them after the node)."""
    shutil.copytree(REPO / "configs", work / "configs")
    path = work / "configs" / "local-1node.toml"
    start, fds = reserve_ports(100)
    ports = {"grpc_port": free_port(), "metadata_raft_port": free_port(),
             "raft_port_min": start, "raft_port_max": start + 99}  # fmt: skip
    text = path.read_text()
    for key, port in ports.items():
        text, n = re.subn(rf"(?m)^{key} = \d+", f"{key} = {port}", text)
        assert n == 1, key
    text, n = re.subn(
        r'(?m)^address = "127\.0\.0\.1:9464"', f'address = "127.0.0.1:{free_port()}"', text
    )
    assert n == 1
    path.write_text(text)
    return fds


def _raftq(args: list[str], cwd: Path, env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "raft_queue.cli.main", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, **kw)


def _retry(args: list[str], cwd: Path, env: dict[str, str], deadline_s: float) -> str:
    deadline = time.monotonic() + deadline_s
    while True:
        done = _raftq(args, cwd, env)
        if done.returncode == 0:
            return done.stdout
        assert time.monotonic() < deadline, done.stdout + done.stderr
        time.sleep(1.0)


def test_readme_hand_start_runs_verbatim_with_encryption_at_rest(tmp_path: Path) -> None:
    commands = readme_commands()
    setup = [c for c in commands if c.startswith(("raftq secret", "raftq keys"))]
    node_cmd = next(c for c in commands if "local-1node.toml" in c)
    reserved = _copy_configs(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for key in ("RAFTQ_SERVER", "RAFTQ_TOKEN", "RAFTQ_TLS", "RAFTQ_CA_FILE"):
        env.pop(key, None)
    for command in setup:
        done = _raftq(shlex.split(command)[1:], tmp_path, env)
        assert done.returncode == 0, command + "\n" + done.stdout + done.stderr
    log = (tmp_path / "node.log").open("w")
    node = subprocess.Popen(
        [sys.executable, "-m", "raft_queue.cli.main", *shlex.split(node_cmd)[1:]],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _exercise(tmp_path, env, node)
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(timeout=10)
        log.close()
        for fd in reserved:
            os.close(fd)


def _exercise(work: Path, env: dict[str, str], node: subprocess.Popen) -> None:
    text = (work / "configs" / "local-1node.toml").read_text()
    port = re.search(r"(?m)^grpc_port = (\d+)", text).group(1)  # type: ignore[union-attr]
    client_env = {**env, "RAFTQ_SERVER": f"127.0.0.1:{port}",
                  "RAFTQ_TOKEN": (work / "data" / "admin.token").read_text().strip()}  # fmt: skip
    time.sleep(2.0)
    assert node.poll() is None, (work / "node.log").read_text()[-3000:]
    _retry(["queue", "create", "orders", "--replication", "1"], work, client_env, 90)
    _retry(["send", "orders", MARKER], work, client_env, 30)
    got = _retry(["receive", "orders", "--max", "1", "--wait", "5"], work, client_env, 30)
    assert MARKER in got
    hits = [
        p for p in (work / "data").rglob("*") if p.is_file() and MARKER.encode() in written_bytes(p)
    ]
    assert hits == [], f"plain marker at rest in {hits}"
    assert node.poll() is None, (work / "node.log").read_text()[-3000:]
