"""A Toxiproxy-compatible fault proxy: Toxiproxy v2's HTTP API on asyncio, stdlib only.

The real server (Shopify's Go binary) cannot be installed here, so this one speaks the
same API (paths, status codes, JSON shapes, ``{"error", "status"}`` bodies; see
``../shared/CHAOS.md``) and the real ``toxiproxy-python`` client drives it.

Use it in-process (tests) or as a process::

    server = ToxiproxyServer("127.0.0.1", 0).start()   # loop in a background thread
    ...  server.url, server.port  ...
    server.stop()

    python -m chaos.toxiproxy_server --listen 127.0.0.1:8474

A proxy costs one listening socket; each proxied connection costs two sockets and four
small tasks on the one event loop (no threads), so a Raft cluster can route dozens of
links through one server. Disabling a proxy closes its listener and every open
connection (a crash-like fault); toxics apply to open connections too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from chaos.toxics import STREAMS, ApiError, Link, Streams, Toxic, bad_body

VERSION = "2.12.0-raftq"
log = logging.getLogger(__name__)
UPSTREAM_CONNECT_TIMEOUT_S = 5.0


def split_address(address: str) -> tuple[str, int]:
    """``"host:port"`` -> (host, port); ``[::1]:80`` allowed; raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"missing port in address {address}")
    return host.strip("[]"), int(port)


class Proxy:
    """One named proxy: a listener on ``listen`` forwarding to ``upstream``."""

    def __init__(self, name: str, listen: str, upstream: str, rng: random.Random) -> None:
        self.name, self.listen, self.upstream = name, listen, upstream
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}
        self.links: set[Link] = set()
        self._rng = rng
        self._server: asyncio.Server | None = None
        self._epoch = 0  # bumped by stop(): connections accepted before it are dropped

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [t.to_json() for s in STREAMS for t in self.chain(s)],
        }

    def chain(self, stream: str) -> list[Toxic]:
        return [t for t in self.toxics.values() if t.stream == stream]

    async def start(self) -> None:
        """Listen (no-op if enabled); ``listen`` becomes the real bound address."""
        if self.enabled:
            return
        try:
            host, port = split_address(self.listen)
            self._server = await asyncio.start_server(
                self._accept, host or None, port, reuse_address=True
            )
        except (OSError, ValueError) as exc:
            raise ApiError(f"listen tcp {self.listen}: {exc}", 500) from exc
        bound = self._server.sockets[0].getsockname()
        self.listen = f"[{bound[0]}]:{bound[1]}" if ":" in bound[0] else f"{bound[0]}:{bound[1]}"
        self.enabled = True

    def stop(self) -> None:
        """Stop listening and close every open connection (clients see EOF)."""
        self._epoch += 1
        if self._server is not None:
            self._server.close()
            self._server = None
        self.enabled = False
        for link in list(self.links):
            link.close()

    def add_toxic(self, body: Any) -> Toxic:
        toxic = Toxic.from_json(body)
        if toxic.name in self.toxics:
            raise ApiError("toxic already exists", 409)
        self.toxics[toxic.name] = toxic
        for link in list(self.links):
            link.toxic_added(toxic)
        return toxic

    def get_toxic(self, name: str) -> Toxic:
        if name not in self.toxics:
            raise ApiError("toxic not found", 404)
        return self.toxics[name]

    def update_toxic(self, name: str, body: Any) -> Toxic:
        toxic = self.get_toxic(name)
        toxic.update(body)
        for link in list(self.links):
            link.toxic_updated(toxic)
        return toxic

    def remove_toxic(self, name: str) -> None:
        toxic = self.get_toxic(name)
        del self.toxics[name]
        for link in list(self.links):
            link.toxic_removed(toxic)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Dial upstream for a new client; if that fails, close the client (as Go)."""
        epoch = self._epoch
        try:
            host, port = split_address(self.upstream)
            connect = asyncio.open_connection(host, port)
            upstream: Streams = await asyncio.wait_for(connect, UPSTREAM_CONNECT_TIMEOUT_S)
        except (OSError, ValueError, TimeoutError):
            writer.close()
            return
        if epoch != self._epoch:  # disabled while we were dialing
            writer.close()
            upstream[1].close()
            return
        link = Link((reader, writer), upstream, self.chain, self._rng, self.links.discard)
        self.links.add(link)
        link.start()


Handler = Callable[..., Awaitable[tuple[int, Any]]]


class ToxiproxyApp:
    """The proxies and the HTTP API over them. Runs on one event loop; not thread-safe."""

    def __init__(self, seed: int | None = None) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.rng = random.Random(seed)
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = [
            ("GET", re.compile(r"/version"), self._version),
            ("POST", re.compile(r"/reset"), self._reset),
            ("GET POST", re.compile(r"/proxies"), self._proxies),
            ("POST", re.compile(r"/populate"), self._populate),
            ("GET POST PATCH DELETE", re.compile(r"/proxies/([^/]+)"), self._proxy),
            ("GET POST", re.compile(r"/proxies/([^/]+)/toxics"), self._toxics),
            ("GET POST PATCH DELETE", re.compile(r"/proxies/([^/]+)/toxics/([^/]+)"), self._toxic),
        ]

    async def dispatch(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """Route one request; returns (status, JSON-able body or None for no body)."""
        for methods, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method not in methods.split():
                return 405, {"error": "method not allowed", "status": 405}
            try:
                return await handler(method, body, *map(unquote, match.groups()))
            except ApiError as exc:
                return exc.status, {"error": exc.message, "status": exc.status}
            except Exception as exc:  # a bug: answer (the client has no timeout), log it
                log.exception("%s %s failed", method, path)
                return 500, {"error": f"{type(exc).__name__}: {exc}", "status": 500}
        return 404, {"error": "404 page not found", "status": 404}

    def close(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()

    def _get(self, name: str) -> Proxy:
        if name not in self.proxies:
            raise ApiError("proxy not found", 404)
        return self.proxies[name]

    async def _version(self, method: str, body: bytes) -> tuple[int, Any]:
        return 200, {"version": VERSION}

    async def _reset(self, method: str, body: bytes) -> tuple[int, Any]:
        for proxy in self.proxies.values():
            await proxy.start()
            for name in list(proxy.toxics):
                proxy.remove_toxic(name)
        return 204, None

    async def _proxies(self, method: str, body: bytes) -> tuple[int, Any]:
        if method == "GET":
            return 200, {name: p.to_json() for name, p in self.proxies.items()}
        spec = _proxy_spec(_json(body))
        if spec["name"] in self.proxies:
            raise ApiError("proxy already exists", 409)
        return 201, (await self._add_proxy(spec)).to_json()

    async def _populate(self, method: str, body: bytes) -> tuple[int, Any]:
        """Create or replace each proxy; one that matches (listen, upstream) is kept."""
        specs = _json(body)
        if not isinstance(specs, list):
            raise bad_body("expected a JSON array")
        out = []
        for spec in [_proxy_spec(s) for s in specs]:
            old = self.proxies.get(spec["name"])
            if old is not None and (old.listen, old.upstream) == (spec["listen"], spec["upstream"]):
                out.append(old)
                continue
            if old is not None:
                old.stop()
                del self.proxies[old.name]
            out.append(await self._add_proxy(spec))
        return 201, {"proxies": [p.to_json() for p in out]}

    async def _add_proxy(self, spec: dict[str, Any]) -> Proxy:
        proxy = Proxy(spec["name"], spec["listen"], spec["upstream"], self.rng)
        if spec["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return proxy

    async def _proxy(self, method: str, body: bytes, name: str) -> tuple[int, Any]:
        proxy = self._get(name)
        if method == "DELETE":
            proxy.stop()
            del self.proxies[name]
            return 204, None
        if method != "GET":
            await self._update(proxy, _json(body))
        return 200, proxy.to_json()

    async def _update(self, proxy: Proxy, spec: Any) -> None:
        """Change listen/upstream (restarts the listener) and/or enabled, as Go's Update."""
        if not isinstance(spec, dict):
            raise bad_body("expected a JSON object")
        listen = _string(spec, "listen", proxy.listen)
        upstream = _string(spec, "upstream", proxy.upstream)
        enabled = _boolean(spec, "enabled", proxy.enabled)
        if (listen, upstream) != (proxy.listen, proxy.upstream):
            proxy.stop()
            proxy.listen, proxy.upstream = listen, upstream
        if enabled:
            await proxy.start()
        else:
            proxy.stop()

    async def _toxics(self, method: str, body: bytes, name: str) -> tuple[int, Any]:
        proxy = self._get(name)
        if method == "GET":
            return 200, proxy.to_json()["toxics"]
        return 200, proxy.add_toxic(_json(body)).to_json()

    async def _toxic(self, method: str, body: bytes, name: str, toxic: str) -> tuple[int, Any]:
        proxy = self._get(name)
        proxy.get_toxic(toxic)  # 404 before any 400, as Go
        if method == "DELETE":
            proxy.remove_toxic(toxic)
            return 204, None
        if method != "GET":
            proxy.update_toxic(toxic, _json(body))
        return 200, proxy.get_toxic(toxic).to_json()


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise bad_body(str(exc)) from exc


def _string(spec: dict[str, Any], key: str, default: str) -> str:
    value = spec.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad_body(f"{key} must be a string")
    return value


def _boolean(spec: dict[str, Any], key: str, default: bool) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):
        raise bad_body(f"{key} must be a boolean")
    return value


def _proxy_spec(spec: Any) -> dict[str, Any]:
    """Validate a proxy definition: name and upstream required, enabled defaults to true.

    A missing listen means 127.0.0.1:0 (Go would bind every interface).
    """
    if not isinstance(spec, dict):
        raise bad_body("expected a JSON object")
    out: dict[str, Any] = {key: _string(spec, key, "") for key in ("name", "upstream", "listen")}
    for key in ("name", "upstream"):
        if not out[key]:
            raise ApiError(f"missing required field: {key}", 400)
    out["listen"] = out["listen"] or "127.0.0.1:0"
    out["enabled"] = _boolean(spec, "enabled", True)
    return out


async def _serve_http(
    app: ToxiproxyApp, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Minimal HTTP/1.1: Content-Length bodies, keep-alive until the client closes."""
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, version = head[0].split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in head[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length") or 0))
            if headers.get("user-agent", "").startswith("Mozilla/"):  # Go's CSRF guard
                status, obj = 403, {"error": "User agent not allowed", "status": 403}
            else:
                status, obj = await app.dispatch(method, target.split("?", 1)[0], body)
            payload = b"" if obj is None else json.dumps(obj).encode()
            close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
            lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
            if status != 204:
                lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
            lines.append("Connection: close" if close else "Connection: keep-alive")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass  # the client went away or sent something that is not HTTP
    finally:
        writer.close()


async def serve(app: ToxiproxyApp, host: str, port: int) -> asyncio.Server:
    """Start the API listener for ``app``; ``port`` 0 picks a free port."""
    return await asyncio.start_server(
        lambda r, w: _serve_http(app, r, w), host, port, reuse_address=True
    )


class ToxiproxyServer:
    """The server on its own event-loop thread, for use inside a test process.

    ``start()`` returns once the API is listening (``port`` then holds the bound port);
    ``stop()`` closes every proxy and connection and joins the thread. The toxiproxy
    client is configured class-wide: ``Toxiproxy().update_api_consumer(s.host, s.port)``.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 8474, seed: int | None = None):
        self.host, self.port = host, port
        self.app = ToxiproxyApp(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ToxiproxyServer:
        """Run the API on a new daemon thread; returns once listening (raises OSError)."""
        self._ready.clear()
        self._thread = threading.Thread(target=self._run, name="toxiproxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop = self._thread = None

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            api = loop.run_until_complete(serve(self.app, self.host, self.port))
        except OSError as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self.port = api.sockets[0].getsockname()[1]
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_shutdown(api, self.app))
            loop.close()


async def _shutdown(api: asyncio.Server, app: ToxiproxyApp) -> None:
    """Close the API, every proxy and connection, and wait for their tasks to end."""
    api.close()
    app.close()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _main(host: str, port: int, seed: int | None) -> None:
    app = ToxiproxyApp(seed)
    api = await serve(app, host, port)
    bound = api.sockets[0].getsockname()
    print(f"toxiproxy API listening on http://{bound[0]}:{bound[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await _shutdown(api, app)


def main(argv: list[str] | None = None) -> int:
    """CLI: ``python -m chaos.toxiproxy_server --listen 127.0.0.1:8474 [--seed N]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:8474", help="API address host:port")
    parser.add_argument("--seed", type=int, default=None, help="seed for toxicity and jitter")
    args = parser.parse_args(argv)
    try:
        host, port = split_address(args.listen)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        asyncio.run(_main(host, port, args.seed))
    except OSError as exc:
        print(f"cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
