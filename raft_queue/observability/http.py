"""The node's HTTP listener (``[metrics] address``), on the node's event loop.

    GET  /metrics      Prometheus text (prometheus-client's exposition)
    GET  /healthz      200 while the process's event loop answers
    GET  /readyz       200 ready / 503 not (JSON with each check; health.py)
    GET  /             the status page (static/index.html, app.js, style.css)
    GET  /api/status   the cluster as JSON (status.py); the page polls it
    GET  /login        a token form; POST /login sets an HttpOnly session cookie
    POST /logout

Access: ``authorize(token) -> bool`` is injected (the API door's
``page_authorizer``: the admin token; None = open, only with
``security.insecure``). When set, the page and /api/status need
``Authorization: Bearer <token>`` or the session cookie from /login;
/metrics, /healthz and /readyz stay open while ``open_probes`` (Prometheus
and load balancers scrape them; they reveal no message data), else they need
the same token. A session is a random id kept in this process's memory for
``SESSION_TTL_S``; the token itself is never put in a cookie.

HTTP/1.1 with one request per connection (``Connection: close``): a small
hand-written server rather than a framework dependency; requests over
``MAX_REQUEST_BYTES`` are refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from raft_queue.observability.metrics import REGISTRY

log = logging.getLogger(__name__)

Authorize = Callable[[str], bool]
MAX_REQUEST_BYTES = 16 * 1024
SESSION_TTL_S = 12 * 3600
COOKIE = "raftq_session"
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
PROBES = ("/metrics", "/healthz", "/readyz")


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int, body: bytes, ctype: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.status = status
        self.body = body
        self.headers = (("Content-Type", ctype), *headers)


def _json(status: int, data: Any) -> Response:
    return Response(status, json.dumps(data).encode(), "application/json")


def _text(status: int, text: str) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8")


REASONS = {200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized",
           404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


class Request:
    __slots__ = ("body", "headers", "method", "path")

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body

    def cookie(self, name: str) -> str:
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return ""

    def bearer(self) -> str:
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""


class HttpServer:
    def __init__(
        self,
        status: Callable[[], Awaitable[dict[str, Any]]],
        ready: Callable[[], dict[str, Any]],
        authorize: Authorize | None = None,
        open_probes: bool = True,
    ) -> None:
        self.status = status
        self.ready = ready
        self.authorize = authorize
        self.open_probes = open_probes
        self.sessions: dict[str, float] = {}  # session id -> expiry (time.time)
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._serve, host, port)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)

    # ---- access ---------------------------------------------------------------------------
    def allowed(self, req: Request) -> bool:
        if self.authorize is None:
            return True
        token = req.bearer()
        if token and self.authorize(token):
            return True
        session = req.cookie(COOKIE)
        expiry = self.sessions.get(session, 0.0) if session else 0.0
        return expiry > time.time()

    def _login(self, req: Request) -> Response:
        form = parse_qs(req.body.decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0]
        if self.authorize is None or not token or not self.authorize(token):
            return Response(401, _LOGIN_PAGE.replace("{msg}", "Wrong token.").encode(),
                            "text/html; charset=utf-8")  # fmt: skip
        now = time.time()
        self.sessions = {s: t for s, t in self.sessions.items() if t > now}
        session = secrets.token_urlsafe(32)
        self.sessions[session] = now + SESSION_TTL_S
        cookie = f"{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_TTL_S}"
        return Response(303, b"", "text/plain", (("Location", "/"), ("Set-Cookie", cookie)))

    # ---- routing ---------------------------------------------------------------------------
    async def handle(self, req: Request) -> Response:
        path = req.path.split("?", 1)[0]
        if path == "/login":
            if req.method == "POST":
                return self._login(req)
            return Response(200, _LOGIN_PAGE.replace("{msg}", "").encode(),
                            "text/html; charset=utf-8")  # fmt: skip
        if path == "/logout" and req.method == "POST":
            self.sessions.pop(req.cookie(COOKIE), None)
            return Response(303, b"", "text/plain", (("Location", "/login"),))
        if req.method != "GET":
            return _text(405, "method not allowed\n")
        if path == "/healthz" and self.open_probes:
            return _text(200, "ok\n")
        public = path.startswith("/static/") or (path in PROBES and self.open_probes)
        if not public and not self.allowed(req):
            if path == "/":
                return Response(303, b"", "text/plain", (("Location", "/login"),))
            return _text(401, "a token is required (Authorization: Bearer, or /login)\n")
        return await self._route(path)

    async def _route(self, path: str) -> Response:
        if path == "/metrics":
            return Response(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        if path == "/healthz":
            return _text(200, "ok\n")
        if path == "/readyz":
            verdict = self.ready()
            return _json(200 if verdict["ready"] else 503, verdict)
        if path == "/api/status":
            return _json(200, await self.status())
        if path in STATIC:
            name, ctype = STATIC[path]
            body = resources.files("raft_queue.observability").joinpath("static", name)
            return Response(200, body.read_bytes(), ctype, (("Cache-Control", "no-cache"),))
        return _text(404, "not found\n")

    # ---- the wire ---------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await asyncio.wait_for(_read_request(reader), 10.0)
            resp = _text(400, "bad request\n") if req is None else await self._safe(req)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            writer.close()
            return
        except ValueError:
            resp = _text(413, "request too large\n")
        head = [f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, '')}"]
        head += [f"{k}: {v}" for k, v in resp.headers]
        head += [f"Content-Length: {len(resp.body)}", "Connection: close", "", ""]
        with contextlib.suppress(ConnectionError):
            writer.write("\r\n".join(head).encode() + resp.body)
            await writer.drain()
        writer.close()

    async def _safe(self, req: Request) -> Response:
        try:
            return await self.handle(req)
        except Exception:
            log.exception("HTTP %s %s failed", req.method, req.path)
            return _text(500, "internal error\n")


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError as exc:
        raise ValueError("header too large") from exc
    if len(head) > MAX_REQUEST_BYTES:
        raise ValueError("header too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_REQUEST_BYTES:
        raise ValueError("body too large")
    body = await reader.readexactly(length) if length else b""
    return Request(parts[0], parts[1], headers, body)


_LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>raftq login</title>
<link rel="stylesheet" href="/static/style.css"></head><body class="login">
<form method="post" action="/login"><h1>raftq</h1><p>{msg}</p>
<label>Admin token <input type="password" name="token" autofocus></label>
<button type="submit">Sign in</button></form></body></html>"""
