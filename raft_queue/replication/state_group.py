"""A Raft group whose whole state is a small machine kept in memory: the
cluster's metadata group (``metadata.py``) and the external manager's group
(``manager.py``) are two of these, with their own machines and codecs.

Commands are encoded one per line in an entry; each is applied in order and
its result (or the exception it raised, the same on every replica) returned.
Snapshots are the machine's deterministic bytes; the journal is ours (fsynced,
``raft.py``). ``on_change`` is called on the driver thread after every applied
entry and after a snapshot is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, ClassVar

from raft_queue.replication import snapshot
from raft_queue.replication.group import ReplicatedGroup
from raft_queue.replication.host import RaftHost
from raft_queue.replication.raft import bind_address_for, make_conf

_SEP = b"\n"


class StateGroup(ReplicatedGroup):
    # Followers learn each commit at once, not on the next AppendEntries
    # (ticks.py): every node answers reads from its own copy, and a new
    # leader's copy is current.
    commit_notify_s = 0.0
    KEY: ClassVar[str]  # the group's key on the host

    def __init__(
        self,
        host: RaftHost,
        self_address: str,
        peers: Sequence[str],
        data_dir: str,
        election_timeout_s: tuple[float, float] = (1.0, 2.0),
        heartbeat_s: float | None = None,
        dial: Callable[[str], str | None] = lambda a: None,
        on_change: Callable[[], None] = lambda: None,
        bind_host: str | None = None,
        link_key: bytes | None = None,
    ) -> None:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)  # private: docs/security.md
        self.machine = self.load_machine(None)
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
            self.KEY,
            host,
            self_address,
            peers,
            conf,
            dial=dial,
            link_key=link_key,
            lease_quorum_s=election_timeout_s[0],
        )

    def encode_batch(self, cmds: list[Any]) -> bytes:
        return _SEP.join(self.encode_command(c) for c in cmds)

    def split_results(self, result: Any, count: int) -> list[Any]:
        if isinstance(result, BaseException):
            return [result] * count
        return list(result)

    def apply_bytes(self, index: int, data: bytes) -> Any:
        results: list[Any] = []
        applied: list[Any] = []
        for raw in data.split(_SEP):
            try:
                cmd = self.decode_command(raw)
                results.append(self.machine.apply(cmd))
                applied.append(cmd)
            except Exception as exc:  # deterministic on every replica
                results.append(exc)
        self.after_apply(applied)
        self._on_change()
        return results

    # What a subclass gives: its machine (empty, or from a snapshot's image)
    # and the codec of one command.
    def load_machine(self, image: bytes | None) -> Any:
        raise NotImplementedError

    def encode_command(self, cmd: Any) -> bytes:
        raise NotImplementedError

    def decode_command(self, raw: bytes) -> Any:
        raise NotImplementedError

    def after_apply(self, applied: list[Any]) -> None:
        """Called on the driver thread with the commands of an entry that applied."""

    def _serialize(self, path: str, data: Any) -> None:
        image = self.machine.to_bytes()

        def write_image(f: BinaryIO) -> None:
            f.write(image)

        snapshot.write(path, data, write_image)

    def _deserialize(self, path: str) -> Any:
        meta_tuple, image_len = self.snapshot_meta(path)
        self.machine = self.load_machine(snapshot.read_image(path, image_len))
        self._on_change()
        return meta_tuple
