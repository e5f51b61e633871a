"""The generated code in raft_queue/_proto must match proto/ (run `make proto`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "raft_queue" / "_proto" / "raft_queue" / "v1"


def test_generated_protobuf_code_is_up_to_date(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iraft_queue/_proto=proto",
            f"--python_out={tmp_path}",
            f"--grpc_python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            *protos,
        ],
        cwd=ROOT,
        check=True,
    )
    fresh_dir = tmp_path / "raft_queue" / "_proto" / "raft_queue" / "v1"
    fresh = {p.name: p.read_text() for p in fresh_dir.iterdir() if p.is_file()}
    checked_in = {
        p.name: p.read_text()
        for p in GENERATED.iterdir()
        if p.suffix in (".py", ".pyi") and p.name != "__init__.py"
    }
    assert fresh.keys() == checked_in.keys(), "generated files differ: run `make proto`"
    stale = [name for name in fresh if fresh[name] != checked_in[name]]
    assert not stale, f"stale generated code {stale}: run `make proto` and commit"
