"""One manager process's Raft side: the driver (RaftHost) and its replica of
the manager group (replication/manager.py).

Thread contract (as server/node.py): the replica is created and driven on the
driver thread; ``view`` is a read-only copy of the state, replaced after every
change, so the gRPC handlers (asyncio thread) never read state being mutated.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from raft_queue import errors
from raft_queue.manager.config import ManagerConfig
from raft_queue.manager.state import ManagerMachine
from raft_queue.replication.host import RaftHost
from raft_queue.replication.manager import ManagerReplica
from raft_queue.replication.raft import check_version
from raft_queue.security.secret import RAFT_LINK, derive_key


class ManagerNode:
    def __init__(self, config: ManagerConfig, secret: bytes | None) -> None:
        check_version()
        self.config = config
        self.id = config.manager_id
        self.secret = secret
        self.link_key = derive_key(secret, RAFT_LINK) if secret is not None else None
        self.host = RaftHost(idle_tick_s=config.raft.tick_period_s)
        me = f"{config.raft_host}:{config.raft_port}"
        voters = config.peer_table("voters") or {self.id: me}
        self.raft_address = voters.get(self.id, me)
        self.peers = [a for nid, a in voters.items() if nid != self.id]
        # Raft address -> gRPC address of every manager, to name the leader to clients.
        grpc_of = config.peer_table("addresses")
        grpc_of.setdefault(self.id, config.address)
        self._grpc_by_raft = {a: grpc_of.get(nid, "") for nid, a in voters.items()}
        self.replica: ManagerReplica | None = None
        self.view = ManagerMachine()

    def start(self) -> None:
        self.host.start()
        self.replica = self.host.call(self._open).result(30)

    def _open(self) -> ManagerReplica:
        tuning = self.config.raft
        replica = ManagerReplica(
            self.host,
            self.raft_address,
            self.peers,
            os.path.join(self.config.data_dir, "manager"),
            election_timeout_s=(tuning.election_timeout_min_s, tuning.election_timeout_max_s),
            heartbeat_s=tuning.heartbeat_period_s,
            on_change=self._on_change,
            bind_host=self.config.raft_host,
            link_key=self.link_key,
        )
        self.replica = replica
        self.host.add(replica)
        self._on_change()
        return replica

    def _on_change(self) -> None:
        """Driver thread: publish a copy when the state changed."""
        assert self.replica is not None
        if self.replica.machine.version != self.view.version or self.view.version == 0:
            self.view = ManagerMachine.from_bytes(self.replica.machine.to_bytes())

    def stop(self) -> None:
        self.host.stop()

    def is_leader(self) -> bool:
        return self.replica is not None and self.replica.is_leader()

    def can_serve(self) -> bool:
        """Leader whose copy is current: it applied its own term's first entry
        (before that a new leader, e.g. after a restart, may lack entries
        committed under the last one) and has heard from a quorum lately."""
        return self.replica is not None and self.replica.can_serve_leader_reads()

    def leader_address(self) -> str:
        """The manager leader's gRPC address ("" when unknown)."""
        if self.replica is None:
            return ""
        return self._grpc_by_raft.get(self.replica.leader_address(), "")

    async def submit(self, cmd: Any, timeout_s: float = 10.0) -> Any:
        """Propose ``cmd``; NotLeader (with the leader's address) on a follower.
        A rejected command raises its error; the result otherwise."""
        if not self.is_leader() or self.replica is None:
            raise errors.NotLeader("not the manager leader", self.leader_address())
        result = await asyncio.wrap_future(self.replica.submit(cmd, timeout_s))
        if isinstance(result, BaseException):
            raise result
        return result
