"""The external cluster manager's Raft group (docs/operations.md "Two levels
of manager"): the metadata group's machinery (``metadata.py``) with the
manager's state machine (``manager/state.py``).

Its state is small and kept in memory; snapshots are its deterministic JSON,
the journal is ours (fsynced, ``raft.py``). ``on_change`` is called on the
driver thread after every applied entry.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

from raft_queue.manager import state
from raft_queue.replication import snapshot
from raft_queue.replication.group import ReplicatedGroup
from raft_queue.replication.host import RaftHost
from raft_queue.replication.raft import bind_address_for, make_conf

_SEP = b"\n"


class ManagerReplica(ReplicatedGroup):
    # Followers learn each commit at once: a new leader's copy is current.
    commit_notify_s = 0.0

    def __init__(
        self,
        host: RaftHost,
        self_address: str,
        peers: Sequence[str],
        data_dir: str,
        election_timeout_s: tuple[float, float] = (1.0, 2.0),
        heartbeat_s: float | None = None,
        on_change: Callable[[], None] = lambda: None,
        bind_host: str | None = None,
        link_key: bytes | None = None,
    ) -> None:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)  # holds sealed cluster tokens
        self.machine = state.ManagerMachine()
        self._on_change = on_change
        conf = make_conf(
            journal_file=os.path.join(data_dir, "raft.journal"),
            dump_file=os.path.join(data_dir, "raft.dump"),
            election_timeout_min_s=election_timeout_s[0],
            election_timeout_max_s=election_timeout_s[1],
            heartbeat_s=heartbeat_s,
            bind_address=bind_address_for(bind_host, self_address),
            serializer=self._serialize,
            deserializer=self._deserialize,
            log_compaction_min_entries=2000,
        )
        super().__init__(
            "__manager__",
            host,
            self_address,
            peers,
            conf,
            link_key=link_key,
            lease_quorum_s=election_timeout_s[0],
        )

    def encode_batch(self, cmds: list[Any]) -> bytes:
        return _SEP.join(state.encode_command(c) for c in cmds)

    def split_results(self, result: Any, count: int) -> list[Any]:
        if isinstance(result, BaseException):
            return [result] * count
        return list(result)

    def apply_bytes(self, index: int, data: bytes) -> Any:
        results: list[Any] = []
        for raw in data.split(_SEP):
            try:
                results.append(self.machine.apply(state.decode_command(raw)))
            except Exception as exc:  # deterministic on every replica
                results.append(exc)
        self._on_change()
        return results

    def _serialize(self, path: str, data: Any) -> None:
        image = self.machine.to_bytes()

        def write_image(f: BinaryIO) -> None:
            f.write(image)

        snapshot.write(path, data, write_image)

    def _deserialize(self, path: str) -> Any:
        meta_tuple, image_len = self.snapshot_meta(path)
        self.machine = state.ManagerMachine.from_bytes(snapshot.read_image(path, image_len))
        self._on_change()
        return meta_tuple
