"""A node caps glibc's malloc arenas before it starts a thread (server/malloc.py).

With glibc's default (8 arenas per CPU) every thread that allocates gets an
arena of its own that keeps what is freed into it; the soak measured that as
growth (docs/reliability.md, "Soak"). These tests count arenas, not bytes:
threads that each allocate in a fresh interpreter, with and without the cap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from raft_queue.server import main as node_main
from raft_queue.server import malloc

THREADS = 8

_CHILD = textwrap.dedent(
    f"""
    import sys, threading
    from raft_queue.server import malloc
    if sys.argv[1] == "cap":
        assert malloc.limit_arenas(), "mallopt refused"
    ready, done = threading.Barrier({THREADS + 1}), threading.Event()
    def work():
        keep = [bytes(2000) for _ in range(100)]  # > 512 B: malloc, not pymalloc
        ready.wait()
        done.wait()
    threads = [threading.Thread(target=work) for _ in range({THREADS})]
    for t in threads:
        t.start()
    ready.wait()  # every thread has allocated, and still holds its memory
    print(malloc.arena_count())
    done.set()
    for t in threads:
        t.join()
    """
)


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.fixture(scope="module")
def glibc() -> None:
    if malloc.arena_count() == 0:
        pytest.skip("not glibc: no malloc_info")


def test_threads_get_arenas_of_their_own_without_the_cap(glibc: None) -> None:
    # The control: the count sees per-thread arenas (else the next test proves nothing).
    assert _arenas("none") > malloc.ARENAS


def test_the_cap_keeps_every_thread_in_two_arenas(glibc: None) -> None:
    assert _arenas("cap") <= malloc.ARENAS


def test_the_node_caps_arenas_before_anything_else(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(node_main, "limit_arenas", lambda: calls.append("limit_arenas"))

    def load(*_args: object) -> None:
        calls.append("config")
        raise SystemExit(0)

    monkeypatch.setattr(node_main.config_mod, "load", load)
    with pytest.raises(SystemExit):
        node_main.run("node.toml")
    assert calls == ["limit_arenas", "config"]


def test_an_operators_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert malloc.limit_arenas() is False
