"""Toxics and the per-connection data plane of the Toxiproxy-compatible server.

A ``Toxic`` is the API object (``{name, type, stream, toxicity, attributes}``), parsed and
validated here with Toxiproxy v2's error messages. A ``Link`` is one accepted client
connection plus its upstream connection; it runs four tasks (a reader and a writer per
direction, joined by a small bounded queue) so that a latency toxic delays each chunk
from the moment it was *read*, the way Toxiproxy's chunk timestamps do, instead of
adding up sleeps. Links consult the proxy's toxic chain for every chunk, so toxics apply
to connections that are already open.

Everything here runs on the server's event-loop thread; nothing is thread-safe.

Deviations from the Go server, chosen on purpose:
- EOF in either direction closes the whole link (as Go does: the destination is closed
  and the other direction then fails), after any ``slow_close`` delay.
- ``reset_peer`` resets *both* sockets (SO_LINGER 0), so each side sees a reset.
- Several latency toxics on one stream add up; a chunk already waiting in a latency
  sleep is not released early when the toxic is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

STREAMS = ("upstream", "downstream")
READ_CHUNK_BYTES = 32 * 1024
# Chunks buffered between a direction's reader and writer: enough to pipeline latency,
# small enough that a slow destination pushes back on the source through TCP.
QUEUE_CHUNKS = 16

# Attribute names and defaults per toxic type, as Toxiproxy's Go structs marshal them
# (a toxic's JSON always carries every attribute of its type; unknown keys are dropped).
ATTRIBUTES: dict[str, dict[str, int]] = {
    "noop": {},
    "latency": {"latency": 0, "jitter": 0},  # ms
    "bandwidth": {"rate": 0},  # KB/s (1 KB = 1000 bytes); 0 = unlimited
    "slow_close": {"delay": 0},  # ms
    "timeout": {"timeout": 0},  # ms; 0 = never close
    "reset_peer": {"timeout": 0},  # ms after the first chunk
    "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},  # bytes, bytes, us
    "limit_data": {"bytes": 0},
}


class ApiError(Exception):
    """An error the HTTP API reports as ``{"error": message, "status": status}``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class LinkClosed(Exception):
    """Raised inside a toxic pipe to end the link; ``rst`` asks for a TCP reset."""

    def __init__(self, rst: bool = False) -> None:
        super().__init__("rst" if rst else "close")
        self.rst = rst


def bad_body(detail: str) -> ApiError:
    return ApiError(f"bad request body: {detail}", 400)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_body(f"{where} must be a number")
    return float(value)


def _attributes(kind: str, raw: Any, base: Mapping[str, int]) -> dict[str, int]:
    if raw is None:
        return dict(base)
    if not isinstance(raw, dict):
        raise bad_body("attributes must be an object")
    out = dict(base)
    for key in ATTRIBUTES[kind]:
        if key in raw:
            out[key] = int(_number(raw[key], f"attributes.{key}"))
    return out


@dataclass(eq=False)
class Toxic:
    """One toxic of one proxy. Identity (not value) equality: links key state by it.

    ``generation`` is bumped by every update so links re-roll ``toxicity``, as Go
    restarts a toxic's stubs on update.
    """

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]
    generation: int = 0

    @classmethod
    def from_json(cls, body: Any) -> Toxic:
        """Parse a create request, checking in Go's order: stream, type, attributes."""
        if not isinstance(body, dict):
            raise bad_body("expected a JSON object")
        stream = body.get("stream", "downstream")
        if stream is None:
            stream = "downstream"
        if stream not in STREAMS:
            raise ApiError("stream was invalid, can be either upstream or downstream", 400)
        kind = body.get("type") or ""
        name = body.get("name") or f"{kind}_{stream}"
        if not isinstance(kind, str) or kind not in ATTRIBUTES:
            raise ApiError("invalid toxic type", 400)
        if not isinstance(name, str):
            raise bad_body("name must be a string")
        toxicity = _number(body.get("toxicity", 1.0), "toxicity")
        base = ATTRIBUTES[kind]
        return cls(name, kind, stream, toxicity, _attributes(kind, body.get("attributes"), base))

    def update(self, body: Any) -> None:
        """Apply a PATCH: only ``attributes`` and ``toxicity`` change, as in Go."""
        if not isinstance(body, dict):
            raise bad_body("expected a JSON object")
        attributes = _attributes(self.type, body.get("attributes"), self.attributes)
        toxicity = _number(body.get("toxicity", self.toxicity), "toxicity")
        self.attributes, self.toxicity = attributes, toxicity
        self.generation += 1

    def attr(self, key: str) -> int:
        return self.attributes.get(key, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }


def slice_sizes(total: int, average: int, variation: int, rng: random.Random) -> list[int]:
    """Split ``total`` bytes into pieces of ``average +- variation`` bytes (each >= 1).

    The last piece may be shorter. ``average <= 0`` leaves the chunk whole (Go would
    crash on it). Sizes sum to ``total``.
    """
    if average <= 0 or total <= 0:
        return [total] if total > 0 else []
    variation = max(0, min(variation, average - 1))
    sizes: list[int] = []
    left = total
    while left > 0:
        size = min(left, average + rng.randint(-variation, variation))
        sizes.append(size)
        left -= size
    return sizes


@dataclass(eq=False)
class Direction:
    """One direction of a link: its sockets, queue and per-toxic state."""

    name: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    rng: random.Random
    queue: asyncio.Queue[tuple[float, bytes]] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_CHUNKS)
    )
    rolls: dict[Toxic, tuple[int, bool]] = field(default_factory=dict)
    sent: dict[Toxic, int] = field(default_factory=dict)  # limit_data bytes passed
    timers: dict[Toxic, asyncio.Task[None]] = field(default_factory=dict)

    def applies(self, toxic: Toxic) -> bool:
        """Whether ``toxic`` affects this connection: rolled once per toxic generation."""
        roll = self.rolls.get(toxic)
        if roll is None or roll[0] != toxic.generation:
            roll = (toxic.generation, self.rng.random() < toxic.toxicity)
            self.rolls[toxic] = roll
        return roll[1]


Pieces = AsyncGenerator[bytes, None]
_NOTHING: tuple[bytes, ...] = ()


async def _one(data: bytes) -> Pieces:
    yield data


async def _latency(toxic: Toxic, d: Direction, read_at: float, src: Pieces) -> Pieces:
    jitter = toxic.attr("jitter")
    delay_ms = toxic.attr("latency") + (d.rng.uniform(-jitter, jitter) if jitter > 0 else 0)
    async for piece in src:
        await asyncio.sleep(max(0.0, read_at + delay_ms / 1000 - time.monotonic()))
        yield piece


async def _bandwidth(toxic: Toxic, d: Direction, read_at: float, src: Pieces) -> Pieces:
    rate = toxic.attr("rate")
    async for piece in src:
        if rate <= 0:
            yield piece
            continue
        step = rate * 100  # Go sends what 100 ms allows at a time
        for start in range(0, len(piece), step):
            part = piece[start : start + step]
            await asyncio.sleep(len(part) / (rate * 1000))
            yield part


async def _slicer(toxic: Toxic, d: Direction, read_at: float, src: Pieces) -> Pieces:
    average, variation = toxic.attr("average_size"), toxic.attr("size_variation")
    async for piece in src:
        start = 0
        for i, size in enumerate(slice_sizes(len(piece), average, variation, d.rng)):
            if i and toxic.attr("delay") > 0:
                await asyncio.sleep(toxic.attr("delay") / 1e6)
            yield piece[start : start + size]
            start += size


async def _limit_data(toxic: Toxic, d: Direction, read_at: float, src: Pieces) -> Pieces:
    limit = toxic.attr("bytes")
    async for piece in src:
        part = piece[: max(0, limit - d.sent.get(toxic, 0))]
        if part:
            d.sent[toxic] = d.sent.get(toxic, 0) + len(part)
            yield part
        if d.sent.get(toxic, 0) >= limit:
            raise LinkClosed()


async def _timeout(toxic: Toxic, d: Direction, read_at: float, src: Pieces) -> Pieces:
    """Swallow every byte; the close-after-timeout timer lives on the Link."""
    async for _piece in src:
        pass
    for never in _NOTHING:  # makes this an async generator that yields nothing
        yield never


async def _reset_peer(toxic: Toxic, d: Direction, read_at: float, src: Pieces) -> Pieces:
    """Drop the first chunk, wait ``timeout`` ms, then reset the connection (as Go)."""
    async for _piece in src:
        await asyncio.sleep(toxic.attr("timeout") / 1000)
        raise LinkClosed(rst=True)
    for never in _NOTHING:
        yield never


Pipe = Callable[[Toxic, Direction, float, Pieces], Pieces]
PIPES: dict[str, Pipe] = {
    "latency": _latency,
    "bandwidth": _bandwidth,
    "slicer": _slicer,
    "limit_data": _limit_data,
    "timeout": _timeout,
    "reset_peer": _reset_peer,
}  # noop and slow_close pass data through unchanged


def _shut(writer: asyncio.StreamWriter, rst: bool) -> None:
    """Close one socket; with ``rst`` discard unsent data and send a TCP RST."""
    with contextlib.suppress(OSError, RuntimeError):
        if rst:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.close()


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Link:
    """A proxied connection: client <-> proxy <-> upstream, with toxics in between.

    ``chain(stream)`` returns the proxy's current toxics for a stream, in the order they
    were added; ``on_close`` is called once when the link ends (the proxy forgets it).
    """

    def __init__(
        self,
        client: Streams,
        upstream: Streams,
        chain: Callable[[str], list[Toxic]],
        rng: random.Random,
        on_close: Callable[[Link], None],
    ) -> None:
        self._chain = chain
        self._on_close = on_close
        self._dirs = {
            "upstream": Direction("upstream", client[0], upstream[1], rng),
            "downstream": Direction("downstream", upstream[0], client[1], rng),
        }
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False

    def start(self) -> None:
        for d in self._dirs.values():
            self._tasks.append(asyncio.ensure_future(self._read(d)))
            self._tasks.append(asyncio.ensure_future(self._write(d)))
            for toxic in self._chain(d.name):
                self.toxic_added(toxic)

    def toxic_added(self, toxic: Toxic) -> None:
        """Roll the toxic for this connection now; start a timeout toxic's close timer."""
        d = self._dirs[toxic.stream]
        if d.applies(toxic) and toxic.type == "timeout" and toxic.attr("timeout") > 0:
            d.timers[toxic] = asyncio.ensure_future(self._close_after(toxic.attr("timeout")))

    def toxic_updated(self, toxic: Toxic) -> None:
        timer = self._dirs[toxic.stream].timers.pop(toxic, None)
        if timer is not None:
            timer.cancel()
        self.toxic_added(toxic)

    def toxic_removed(self, toxic: Toxic) -> None:
        """Forget the toxic; removing an active timeout toxic closes the link (Go's Cleanup)."""
        d = self._dirs[toxic.stream]
        timer = d.timers.pop(toxic, None)
        if timer is not None:
            timer.cancel()
        d.sent.pop(toxic, None)
        roll = d.rolls.pop(toxic, None)
        if toxic.type == "timeout" and roll is not None and roll[1]:
            self.close()

    def close(self, rst: bool = False) -> None:
        """End the link now: both sockets closed (reset with ``rst``), tasks cancelled."""
        if self.closed:
            return
        self.closed = True
        for d in self._dirs.values():
            _shut(d.writer, rst)
            for timer in d.timers.values():
                timer.cancel()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._on_close(self)

    async def _close_after(self, timeout_ms: int) -> None:
        await asyncio.sleep(timeout_ms / 1000)
        self.close()

    async def _read(self, d: Direction) -> None:
        """Move chunks from the source socket to the queue; an empty chunk means EOF."""
        with contextlib.suppress(ConnectionError, OSError):
            while data := await d.reader.read(READ_CHUNK_BYTES):
                await d.queue.put((time.monotonic(), data))
        await d.queue.put((time.monotonic(), b""))

    async def _write(self, d: Direction) -> None:
        """Deliver queued chunks through the active toxics; close the link at EOF."""
        rst = False
        try:
            while True:
                read_at, data = await d.queue.get()
                active = [t for t in self._chain(d.name) if d.applies(t)]
                if not data:
                    delay_ms = sum(t.attr("delay") for t in active if t.type == "slow_close")
                    await asyncio.sleep(delay_ms / 1000)
                    break
                await self._deliver(d, read_at, data, active)
        except LinkClosed as exc:
            rst = exc.rst
        except (ConnectionError, OSError):
            pass
        self.close(rst)

    async def _deliver(
        self, d: Direction, read_at: float, data: bytes, active: list[Toxic]
    ) -> None:
        src = _one(data)
        for toxic in active:
            pipe = PIPES.get(toxic.type)
            if pipe is not None:
                src = pipe(toxic, d, read_at, src)
        async with contextlib.aclosing(src):
            async for piece in src:
                d.writer.write(piece)
                await d.writer.drain()
