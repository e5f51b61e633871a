"""RaftHost's EpollPoller gives pysyncobj's connections the events PollPoller
gave them, including across re-subscription, unsubscription and a descriptor
number closed and reused without an unsubscribe."""

from __future__ import annotations

import socket
from typing import Any

from pysyncobj.poller import POLL_EVENT_TYPE

from raft_queue.replication.host import EpollPoller

READ, WRITE, ERROR = POLL_EVENT_TYPE.READ, POLL_EVENT_TYPE.WRITE, POLL_EVENT_TYPE.ERROR


def recorder() -> tuple[list[tuple[int, int]], Any]:
    events: list[tuple[int, int]] = []
    return events, lambda fd, ev: events.append((fd, ev))


def test_read_write_and_hangup_events_reach_the_callback() -> None:
    poller = EpollPoller()
    a, b = socket.socketpair()
    events, cb = recorder()
    poller.subscribe(a.fileno(), cb, READ | ERROR)
    poller.poll(0.0)
    assert events == []
    b.send(b"x")
    poller.poll(0.0)
    assert events == [(a.fileno(), READ)]
    events.clear()
    poller.subscribe(a.fileno(), cb, READ | WRITE | ERROR)  # modify
    poller.poll(0.0)
    assert events == [(a.fileno(), READ | WRITE)]
    events.clear()
    b.close()
    a.recv(10)
    poller.poll(0.0)
    assert events and events[0][1] & READ
    a.close()
    poller.close()


def test_an_unsubscribed_descriptor_is_silent() -> None:
    poller = EpollPoller()
    a, b = socket.socketpair()
    events, cb = recorder()
    poller.subscribe(a.fileno(), cb, READ)
    poller.unsubscribe(a.fileno())
    poller.unsubscribe(a.fileno())  # twice is harmless
    b.send(b"x")
    poller.poll(0.0)
    assert events == []
    a.close()
    b.close()
    poller.close()


def test_a_descriptor_closed_without_unsubscribe_and_reused_is_watched_again() -> None:
    poller = EpollPoller()
    a, b = socket.socketpair()
    events, cb = recorder()
    fd = a.fileno()
    poller.subscribe(fd, cb, READ)
    a.close()  # pysyncobj closes first, unsubscribes later (or never)
    c, d = socket.socketpair()
    reused = fd in (c.fileno(), d.fileno())
    mine = c if c.fileno() == fd else d
    other = d if mine is c else c
    poller.subscribe(mine.fileno(), cb, READ)
    other.send(b"y")
    poller.poll(0.0)
    assert (mine.fileno(), READ) in events, f"no event (descriptor reused: {reused})"
    for s in (b, c, d):
        s.close()
    poller.close()
