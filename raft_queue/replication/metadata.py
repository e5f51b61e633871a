"""The metadata group: the cluster's manager (as Kafka's KRaft controller).

Its state (``core.metadata.MetadataMachine``) is small and kept in memory;
snapshots are its deterministic JSON (``state_group.py``). ``on_change`` is
called on the driver thread after every applied entry so the node's
reconciler can react at once.
"""

from __future__ import annotations

from typing import Any

from raft_queue.core import metadata as meta
from raft_queue.replication.state_group import StateGroup


class MetadataReplica(StateGroup):
    KEY = "__metadata__"
    machine: meta.MetadataMachine

    def load_machine(self, image: bytes | None) -> meta.MetadataMachine:
        return meta.MetadataMachine() if image is None else meta.MetadataMachine.from_bytes(image)

    def encode_command(self, cmd: Any) -> bytes:
        return meta.encode_meta(cmd)

    def decode_command(self, raw: bytes) -> Any:
        return meta.decode_meta(raw)

    def after_apply(self, applied: list[Any]) -> None:
        if any(type(cmd) is meta.ShredKeys for cmd in applied):
            # Crypto-shredding: a deleted queue's wrapped data keys must leave
            # this replica's journal too, not only its state. ShredKeys follows
            # the DeleteQueue in an entry of its own; compaction keeps the entry
            # before the last (the DeleteQueue's) and drops all older ones, the
            # keys' among them. The snapshot is of the state without them.
            self.forceLogCompaction()
