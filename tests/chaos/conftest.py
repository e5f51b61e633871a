"""Fixtures for fault-injection tests: one Toxiproxy-compatible server per session.

toxiproxy-python keeps the server address class-wide (one server per process), so the
server is session-scoped and the ``toxiproxy`` fixture points the client at it and
removes every proxy before and after each test. Everything binds 127.0.0.1 only.
"""

from __future__ import annotations

import os
import random
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest
from toxiproxy import Toxiproxy

from chaos.toxiproxy_server import ToxiproxyServer


class _Echo(socketserver.BaseRequestHandler):
    """Echo every byte; a chunk starting with b"CLOSE" makes the server close first."""

    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                if data.startswith(b"CLOSE"):
                    return
                self.request.sendall(data)
        except OSError:
            return


class _EchoServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


_seeds_used: list[int] = []


@pytest.fixture(scope="session")
def chaos_seed() -> int:
    """The seed of this run's randomness (toxicity rolls, jitter); reported to replay."""
    seed = int(os.environ.get("RAFTQ_CHAOS_SEED") or random.randrange(2**32))
    _seeds_used.append(seed)
    return seed


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for seed in _seeds_used:
        terminalreporter.write_line(f"chaos seed: {seed} (replay with RAFTQ_CHAOS_SEED={seed})")


@pytest.fixture(scope="session")
def toxiproxy_server(chaos_seed: int) -> Iterator[ToxiproxyServer]:
    server = ToxiproxyServer("127.0.0.1", 0, seed=chaos_seed).start()
    yield server
    server.stop()


@pytest.fixture
def toxiproxy(toxiproxy_server: ToxiproxyServer) -> Iterator[Toxiproxy]:
    """The real toxiproxy-python client, pointed at the session server, proxies cleared."""
    client = Toxiproxy()
    client.update_api_consumer(toxiproxy_server.host, toxiproxy_server.port)
    client.destroy_all()
    yield client
    client.destroy_all()


@pytest.fixture(scope="session")
def echo_server() -> Iterator[str]:
    """A TCP echo server on 127.0.0.1; yields its "host:port"."""
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, name="echo", daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
