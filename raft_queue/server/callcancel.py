"""Awaiting a grpc.aio unary call that may be cancelled, without grpc#43360's leak.

grpc.aio (grpcio 1.85.3, still on master) leaks a batch's ``grpc_op`` array
when the task awaiting the batch is cancelled while it is in flight
(grpc#43360; fix PRs #43361 and #43409 not merged): ``call.cancel()`` and
cancelling a task that awaits the call both cancel grpc's own invocation
task. Measured here, 1,500 cancelled loopback calls to a server in another
process: 963 bytes of glibc heap per call, never freed. A node cancelled
forwarded long polls all the time (``_first_non_empty`` in
``server/dataplane/receiving.py``, once another partition answered first):
2.5-4.7 a second on n1 in the soak, most of its main heap's growth. (Those
are now withdrawn instead, ``withdraw`` below: a cancel also lost what an
already answered poll had leased, dataplane/withdrawals.py.)

``settle(call)`` awaits ``call`` through a shield. If the awaiting task is
cancelled, the RPC is cancelled in gRPC Core only (the Cython call's
``cancel``, what ``call.cancel()`` does before it cancels the task): Core
completes the batch, grpc's task consumes its event and frees the array
(measured: 1 byte per call). The remote server sees the same cancellation
as before. A call without that Cython object (an intercepted call, another
grpc version) falls back to ``call.cancel()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

log = logging.getLogger(__name__)

DETAILS = "Locally cancelled by the caller"


async def settle(
    call: Any,
    late: Callable[[Any], None] | None = None,
    withdraw: Callable[[], None] | None = None,
) -> Any:
    """``await call``; on cancellation the RPC is cancelled in Core and
    CancelledError propagates. A response that arrives all the same (the
    call had completed in Core, or completes before the cancel reaches the
    server) is handed to ``late``: a caller whose call takes something (a
    forwarded Receive's leases) gives it back there. With ``withdraw``, the
    RPC is not cancelled at all: ``withdraw()`` is called instead (it asks
    the server to end the call), so the response always arrives (a cancel
    can discard a response the server already sent: dataplane/withdrawals.py)."""
    inner = asyncio.ensure_future(_wait(call))
    try:
        return await asyncio.shield(inner)
    except asyncio.CancelledError:
        if withdraw is not None:
            withdraw()
        else:
            cancel_in_core(call)
        inner.add_done_callback(_retrieve)
        if late is not None:
            inner.add_done_callback(partial(_hand_late, late))
        raise


async def _wait(call: Any) -> Any:
    return await call


def cancel_in_core(call: Any) -> None:
    """Cancel ``call`` without cancelling grpc's task that awaits its batch."""
    if call.done():
        return
    core = getattr(call, "_cython_call", None)
    if core is not None and hasattr(core, "cancel"):
        core.cancel(DETAILS)
    else:
        call.cancel()


def _hand_late(late: Callable[[Any], None], task: asyncio.Future[Any]) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # the cancel won: the server saw it (and undid its work)
    try:
        late(task.result())
    except Exception:  # a callback's failure must not vanish into the loop
        log.exception("handling a response that arrived after its call was cancelled")


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # the CANCELLED status: nobody waits for it any more
