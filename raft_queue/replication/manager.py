"""The external cluster manager's Raft group (docs/operations.md "Two levels
of manager"): the metadata group's machinery (``state_group.py``) with the
manager's state machine (``manager/state.py``), kept in memory; its data
directory holds sealed cluster tokens.
"""

from __future__ import annotations

from typing import Any

from raft_queue.manager import state
from raft_queue.replication.state_group import StateGroup


class ManagerReplica(StateGroup):
    KEY = "__manager__"
    machine: state.ManagerMachine

    def load_machine(self, image: bytes | None) -> state.ManagerMachine:
        return state.ManagerMachine() if image is None else state.ManagerMachine.from_bytes(image)

    def encode_command(self, cmd: Any) -> bytes:
        return state.encode_command(cmd)

    def decode_command(self, raw: bytes) -> Any:
        return state.decode_command(raw)
