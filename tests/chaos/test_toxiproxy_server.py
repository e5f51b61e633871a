"""The Toxiproxy-compatible server, driven by the real toxiproxy-python client.

API calls the client has go through the client; what it lacks (PATCH, toxic GET, exact
error codes and bodies) goes through urllib. Behaviour tests push real bytes through a
proxy to an echo server on 127.0.0.1. Timing assertions are lower bounds only.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.toxics import slice_sizes
from chaos.toxiproxy_server import VERSION, ToxiproxyServer

REPO = Path(__file__).resolve().parents[2]


def api(server: ToxiproxyServer, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One raw HTTP call; returns (status, decoded JSON or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, json.loads(raw) if raw else None


def connect(listen: str, timeout: float = 3.0) -> socket.socket:
    host, port = listen.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError(f"EOF after {len(data)} of {size} bytes")
        data += chunk
    return data


def read_until_closed(sock: socket.socket) -> tuple[bytes, str]:
    """Everything until the peer closes; how it closed: "eof" or "reset"."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        return data, "reset"
    return data, "eof"


def echo(sock: socket.socket, payload: bytes = b"ping") -> float:
    """Round-trip ``payload``; returns the seconds it took."""
    start = time.monotonic()
    sock.sendall(payload)
    assert recv_exactly(sock, len(payload)) == payload
    return time.monotonic() - start


# --- the API through the real client ------------------------------------------------


def test_client_sees_server_running_and_its_version(toxiproxy: Toxiproxy) -> None:
    assert toxiproxy.running() is True
    assert json.loads(toxiproxy.version()) == {"version": VERSION}


def test_create_get_list_destroy_proxy(toxiproxy: Toxiproxy, echo_server: str) -> None:
    proxy = toxiproxy.create(upstream=echo_server, name="n1_n2")
    host, port = proxy.listen.rsplit(":", 1)
    assert (host, proxy.enabled, proxy.upstream) == ("127.0.0.1", True, echo_server)
    assert int(port) > 0  # the real bound port, not the requested 0
    assert list(toxiproxy.proxies()) == ["n1_n2"]
    assert toxiproxy.get_proxy("n1_n2").listen == proxy.listen
    with pytest.raises(ProxyExists):
        toxiproxy.create(upstream=echo_server, name="n1_n2")
    assert toxiproxy.destroy(proxy) is True
    assert toxiproxy.get_proxy("n1_n2") is None
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.listen)


def test_destroy_all_removes_every_proxy(toxiproxy: Toxiproxy, echo_server: str) -> None:
    for name in ("a", "b", "c"):
        toxiproxy.create(upstream=echo_server, name=name)
    toxiproxy.destroy_all()
    assert toxiproxy.proxies() == {}


def test_populate_creates_then_replaces_changed_proxies(
    toxiproxy: Toxiproxy, echo_server: str
) -> None:
    spec = [{"name": "p", "upstream": echo_server, "listen": "127.0.0.1:0"}]
    first = toxiproxy.populate(spec)
    assert [p.name for p in first] == ["p"]
    # "127.0.0.1:0" never equals the bound address, so the client recreates the proxy.
    second = toxiproxy.populate(spec)
    assert [p.name for p in second] == ["p"] and list(toxiproxy.proxies()) == ["p"]
    with connect(second[0].listen) as sock:
        echo(sock)


def test_disable_and_enable_through_client(toxiproxy: Toxiproxy, echo_server: str) -> None:
    proxy = toxiproxy.create(upstream=echo_server, name="p")
    with proxy.down():
        assert toxiproxy.get_proxy("p").enabled is False
        with pytest.raises(ConnectionRefusedError):
            connect(proxy.listen)
    assert toxiproxy.get_proxy("p").enabled is True
    with connect(proxy.listen) as sock:  # same port as before
        echo(sock)


def test_add_list_destroy_toxics_through_client(toxiproxy: Toxiproxy, echo_server: str) -> None:
    proxy = toxiproxy.create(upstream=echo_server, name="p")
    proxy.add_toxic(type="latency", attributes={"latency": 10})
    proxy.add_toxic(type="timeout", stream="upstream", name="cut", toxicity=0.5)
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "cut"}
    assert toxics["cut"].attributes == {"timeout": 0} and toxics["cut"].toxicity == 0.5
    assert toxics["latency_downstream"].attributes == {"latency": 10, "jitter": 0}
    with pytest.raises(ProxyExists):  # 409
        proxy.add_toxic(type="latency")
    with pytest.raises(InvalidToxic):  # 400
        proxy.add_toxic(type="bogus")
    assert proxy.destroy_toxic("cut") is True
    assert proxy.get_toxic("cut") is None
    with pytest.raises(NotFound):  # 404
        proxy.destroy_toxic("cut")


def test_reset_enables_every_proxy_and_removes_every_toxic(
    toxiproxy: Toxiproxy, echo_server: str
) -> None:
    one = toxiproxy.create(upstream=echo_server, name="one")
    two = toxiproxy.create(upstream=echo_server, name="two")
    one.add_toxic(type="latency", attributes={"latency": 1000})
    two.disable()
    assert toxiproxy.reset() is True
    proxies = toxiproxy.proxies()
    assert all(p.enabled for p in proxies.values())
    assert one.toxics() == {} and two.toxics() == {}


def test_bind_failure_is_a_500_which_the_client_reports_as_key_error(
    toxiproxy: Toxiproxy, toxiproxy_server: ToxiproxyServer, echo_server: str
) -> None:
    with pytest.raises(KeyError):  # client quirk: it reads "name" from the error body
        toxiproxy.create(upstream=echo_server, name="p", listen=echo_server)
    status, body = api(
        toxiproxy_server,
        "POST",
        "/proxies",
        {"name": "p", "upstream": echo_server, "listen": echo_server},
    )
    assert status == 500 and body["status"] == 500 and set(body) == {"error", "status"}
    assert body["error"].startswith(f"listen tcp {echo_server}")
    assert api(toxiproxy_server, "GET", "/proxies/p")[0] == 404


# --- the API over raw HTTP ----------------------------------------------------------


def test_proxy_json_has_toxiproxy_shape(
    toxiproxy: Toxiproxy, toxiproxy_server: ToxiproxyServer, echo_server: str
) -> None:
    status, body = api(toxiproxy_server, "POST", "/proxies", {"name": "p", "upstream": echo_server})
    assert status == 201
    assert set(body) == {"name", "listen", "upstream", "enabled", "toxics"}
    assert body["toxics"] == [] and body["enabled"] is True
    status, listing = api(toxiproxy_server, "GET", "/proxies")
    assert status == 200 and listing == {"p": body}


def test_raw_populate_keeps_matching_proxies_and_replaces_changed_ones(
    toxiproxy: Toxiproxy, toxiproxy_server: ToxiproxyServer, echo_server: str, free_port: int
) -> None:
    kept = toxiproxy.create(upstream=echo_server, name="kept")
    kept.add_toxic(type="latency")
    changed = toxiproxy.create(upstream=echo_server, name="changed")
    specs = [
        {"name": "kept", "upstream": echo_server, "listen": kept.listen},
        {"name": "changed", "upstream": f"127.0.0.1:{free_port}", "listen": changed.listen},
        {"name": "new", "upstream": echo_server},
    ]
    status, body = api(toxiproxy_server, "POST", "/populate", specs)
    assert status == 201
    got = {p["name"]: p for p in body["proxies"]}
    assert list(got) == ["kept", "changed", "new"]
    assert len(got["kept"]["toxics"]) == 1  # untouched, toxics and all
    assert got["changed"]["upstream"] == f"127.0.0.1:{free_port}" and got["changed"]["toxics"] == []
    assert got["new"]["enabled"] is True


def test_patch_proxy_disables_moves_and_reenables(
    toxiproxy: Toxiproxy, toxiproxy_server: ToxiproxyServer, echo_server: str, free_port: int
) -> None:
    old = toxiproxy.create(upstream=echo_server, name="p").listen
    status, body = api(toxiproxy_server, "PATCH", "/proxies/p", {"enabled": False})
    assert status == 200 and body["enabled"] is False and body["listen"] == old
    with pytest.raises(ConnectionRefusedError):
        connect(old)
    moved = f"127.0.0.1:{free_port}"
    status, body = api(toxiproxy_server, "PATCH", "/proxies/p", {"listen": moved, "enabled": True})
    assert status == 200 and body["listen"] == moved and body["enabled"] is True
    with connect(moved) as sock:
        echo(sock)


def test_patch_and_get_toxic(
    toxiproxy: Toxiproxy, toxiproxy_server: ToxiproxyServer, echo_server: str
) -> None:
    toxiproxy.create(upstream=echo_server, name="p")
    api(
        toxiproxy_server,
        "POST",
        "/proxies/p/toxics",
        {"type": "slicer", "attributes": {"average_size": 8}},
    )
    status, body = api(
        toxiproxy_server,
        "PATCH",
        "/proxies/p/toxics/slicer_downstream",
        {"attributes": {"delay": 5}, "toxicity": 0.25},
    )
    assert status == 200
    status, got = api(toxiproxy_server, "GET", "/proxies/p/toxics/slicer_downstream")
    assert status == 200 and got == body
    assert got == {
        "name": "slicer_downstream",
        "type": "slicer",
        "stream": "downstream",
        "toxicity": 0.25,
        "attributes": {"average_size": 8, "size_variation": 0, "delay": 5},
    }
    assert (
        api(
            toxiproxy_server,
            "POST",
            "/proxies/p/toxics/slicer_downstream",
            {"attributes": {"delay": 6}},
        )[1]["attributes"]["delay"]
        == 6
    )


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        ("POST", "/proxies", {"upstream": "127.0.0.1:1"}, 400, "missing required field: name"),
        ("POST", "/proxies", {"name": "x"}, 400, "missing required field: upstream"),
        ("POST", "/populate", [{"name": "x"}], 400, "missing required field: upstream"),
        ("POST", "/proxies", "not an object", 400, "bad request body: expected a JSON object"),
        ("POST", "/proxies", {"name": "p", "upstream": "127.0.0.1:1"}, 409, "proxy already exists"),
        ("GET", "/proxies/nope", None, 404, "proxy not found"),
        ("DELETE", "/proxies/nope", None, 404, "proxy not found"),
        (
            "PATCH",
            "/proxies/p",
            {"enabled": "yes"},
            400,
            "bad request body: enabled must be a boolean",
        ),
        ("GET", "/proxies/nope/toxics", None, 404, "proxy not found"),
        (
            "POST",
            "/proxies/p/toxics",
            {"type": "latency", "stream": "sideways"},
            400,
            "stream was invalid, can be either upstream or downstream",
        ),
        ("POST", "/proxies/p/toxics", {"type": "bogus"}, 400, "invalid toxic type"),
        ("POST", "/proxies/p/toxics", {"type": ["latency"]}, 400, "invalid toxic type"),
        (
            "POST",
            "/proxies/p/toxics",
            {"type": "latency", "attributes": {"latency": "x"}},
            400,
            "bad request body: attributes.latency must be a number",
        ),
        ("POST", "/proxies/p/toxics", {"type": "timeout"}, 409, "toxic already exists"),
        ("GET", "/proxies/p/toxics/nope", None, 404, "toxic not found"),
        ("PATCH", "/proxies/p/toxics/nope", {"toxicity": 1}, 404, "toxic not found"),
        ("DELETE", "/proxies/p/toxics/nope", None, 404, "toxic not found"),
        ("GET", "/nowhere", None, 404, "404 page not found"),
        ("DELETE", "/version", None, 405, "method not allowed"),
    ],
)
def test_errors_have_toxiproxy_codes_and_bodies(
    toxiproxy: Toxiproxy,
    toxiproxy_server: ToxiproxyServer,
    method: str,
    path: str,
    body: Any,
    status: int,
    error: str,
) -> None:
    toxiproxy.create(upstream="127.0.0.1:1", name="p").add_toxic(type="timeout")
    assert api(toxiproxy_server, method, path, body) == (status, {"error": error, "status": status})


def test_unexpected_server_error_still_answers_500(
    toxiproxy: Toxiproxy, toxiproxy_server: ToxiproxyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Any) -> None:
        raise RuntimeError("bug")

    toxiproxy.create(upstream="127.0.0.1:1", name="p")
    monkeypatch.setattr("chaos.toxiproxy_server.Proxy.to_json", broken)
    assert api(toxiproxy_server, "GET", "/proxies/p") == (
        500,
        {"error": "RuntimeError: bug", "status": 500},
    )


def test_cli_serves_the_api_until_terminated() -> None:
    cmd = [sys.executable, "-m", "chaos.toxiproxy_server", "--listen", "127.0.0.1:0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True) as proc:
        try:
            line = proc.stdout.readline() if proc.stdout else ""
            url = line.rsplit(" ", 1)[-1].strip()
            assert url.startswith("http://127.0.0.1:")
            with urllib.request.urlopen(url + "/version", timeout=5) as response:
                assert json.loads(response.read()) == {"version": VERSION}
        finally:
            proc.terminate()
        assert proc.wait(timeout=10) == 0


# --- behaviour: bytes through the proxy ---------------------------------------------


@pytest.fixture
def proxy(toxiproxy: Toxiproxy, echo_server: str) -> Any:
    return toxiproxy.create(upstream=echo_server, name="link")


def test_bytes_pass_through_unchanged(proxy: Any) -> None:
    payload = random.Random(7).randbytes(1 << 20)
    with connect(proxy.listen) as sock:
        sender = threading.Thread(target=sock.sendall, args=(payload,))
        sender.start()
        received = recv_exactly(sock, len(payload))
        sender.join()
    assert received == payload


def test_latency_delays_each_direction_on_an_open_connection(proxy: Any) -> None:
    with connect(proxy.listen) as sock:
        echo(sock)
        proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 100})
        proxy.add_toxic(type="latency", attributes={"latency": 150, "jitter": 20})
        assert echo(sock) >= 0.1 + 0.15 - 0.02


def test_timeout_zero_blackholes_until_removed_then_closes(proxy: Any) -> None:
    with connect(proxy.listen, timeout=0.3) as sock:
        echo(sock)
        proxy.add_toxic(type="timeout", stream="upstream", attributes={"timeout": 0})
        proxy.add_toxic(type="timeout", stream="downstream", attributes={"timeout": 0})
        sock.sendall(b"lost")
        with pytest.raises(TimeoutError):
            sock.recv(100)  # nothing comes back, the connection stays open
        proxy.destroy_toxic("timeout_upstream")
        sock.settimeout(3)
        assert read_until_closed(sock) == (b"", "eof")  # the cut stream cannot resume
    proxy.destroy_toxic("timeout_downstream")
    with connect(proxy.listen) as sock:
        echo(sock)


def test_timeout_closes_the_connection_after_its_delay(proxy: Any) -> None:
    proxy.add_toxic(type="timeout", attributes={"timeout": 200})
    with connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(b"swallowed")
        assert read_until_closed(sock) == (b"", "eof")
        assert time.monotonic() - start >= 0.19


def test_reset_peer_resets_the_connection(proxy: Any) -> None:
    proxy.add_toxic(type="reset_peer", stream="upstream", attributes={"timeout": 0})
    with connect(proxy.listen) as sock:
        sock.sendall(b"boom")
        assert read_until_closed(sock) == (b"", "reset")


def test_limit_data_closes_after_n_bytes(proxy: Any) -> None:
    proxy.add_toxic(type="limit_data", attributes={"bytes": 5})
    with connect(proxy.listen) as sock:
        sock.sendall(b"0123456789")
        assert read_until_closed(sock) == (b"01234", "eof")


def test_bandwidth_limits_throughput(proxy: Any) -> None:
    proxy.add_toxic(type="bandwidth", attributes={"rate": 250})  # KB/s
    with connect(proxy.listen) as sock:
        assert echo(sock, b"b" * 50_000) >= 50_000 / 250_000 - 0.01


def test_slicer_splits_writes_but_preserves_bytes(proxy: Any) -> None:
    proxy.add_toxic(
        type="slicer", attributes={"average_size": 16, "size_variation": 4, "delay": 3000}
    )
    payload = bytes(range(256)) * 3
    with connect(proxy.listen) as sock:
        sock.sendall(payload)
        received, reads = b"", 0
        while len(received) < len(payload):
            received += sock.recv(65536)
            reads += 1
    assert received == payload
    assert reads >= 5  # 48 slices 3 ms apart cannot all arrive in one read


def test_slice_sizes_stay_within_variation_and_sum_to_total() -> None:
    sizes = slice_sizes(1000, 16, 4, random.Random(1))
    assert sum(sizes) == 1000
    assert all(12 <= s <= 20 for s in sizes[:-1]) and 1 <= sizes[-1] <= 20
    assert slice_sizes(10, 0, 0, random.Random(1)) == [10]


def test_slow_close_delays_the_close_in_each_direction(proxy: Any) -> None:
    proxy.add_toxic(type="slow_close", attributes={"delay": 200})
    proxy.add_toxic(type="slow_close", stream="upstream", attributes={"delay": 200})
    with connect(proxy.listen) as sock:
        start = time.monotonic()
        sock.sendall(b"CLOSE")  # the echo server closes: downstream EOF
        assert read_until_closed(sock) == (b"", "eof")
        assert time.monotonic() - start >= 0.19
    with connect(proxy.listen) as sock:
        echo(sock)
        start = time.monotonic()
        sock.shutdown(socket.SHUT_WR)  # client EOF: upstream
        assert read_until_closed(sock) == (b"", "eof")
        assert time.monotonic() - start >= 0.19


def test_disable_closes_open_connections_and_refuses_new_ones(proxy: Any) -> None:
    with connect(proxy.listen) as sock:
        echo(sock)
        proxy.disable()
        assert read_until_closed(sock)[0] == b""
    with pytest.raises(ConnectionRefusedError):
        connect(proxy.listen)
    proxy.enable()
    with connect(proxy.listen) as sock:
        echo(sock)


def test_toxicity_zero_never_applies(proxy: Any) -> None:
    proxy.add_toxic(type="timeout", stream="upstream", toxicity=0.0)
    proxy.add_toxic(type="timeout", stream="downstream", toxicity=0.0)
    for _ in range(10):
        with connect(proxy.listen) as sock:
            echo(sock)


def test_toxicity_is_decided_once_per_connection(proxy: Any) -> None:
    proxy.add_toxic(type="limit_data", attributes={"bytes": 0}, toxicity=0.5)
    outcomes = set()
    for _ in range(40):
        with connect(proxy.listen) as sock:
            sock.sendall(b"x")
            first = sock.recv(1)
            if first:  # spared: stays spared for later chunks
                echo(sock)
                echo(sock)
            outcomes.add(bool(first))
    assert outcomes == {True, False}


def test_upstream_refusing_closes_the_client(toxiproxy: Toxiproxy, free_port: int) -> None:
    proxy = toxiproxy.create(upstream=f"127.0.0.1:{free_port}", name="dead")
    with connect(proxy.listen) as sock:
        assert read_until_closed(sock)[0] == b""
