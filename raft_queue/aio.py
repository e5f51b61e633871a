"""``raft_queue.aio``: the asyncio SDK (see ``raft_queue.client.aio``)."""

from raft_queue.client.aio import AsyncClient

__all__ = ["AsyncClient"]
