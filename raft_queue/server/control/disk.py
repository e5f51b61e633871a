"""Disk health of the node: the free-space watermark and fail-stopped replicas.

Free space: ``[storage] min_free_bytes`` / ``min_free_percent`` of the file
system holding ``data_dir`` (statvfs, checked with every heartbeat). A node
below it is "low on disk": it says so in its heartbeat; the metadata leader
keeps the map of such nodes (its memory, as liveness) and returns it in every
heartbeat answer, so every node learns it within a heartbeat period. Then:

- a Send to a partition with a replica on a low node is refused with
  RESOURCE_EXHAUSTED naming the node and the disk (``check_send``); acks,
  receives and reads go on (acks free space);
- replicas on a low node hand their leadership away, and no replica hands it
  back to them (server/node.py, ``_prefer_leaders``);
- all of it ends by itself on the first heartbeat after space returns.

Failures: a replica that stopped on a storage error (fail-stop,
replication/group.py) is recorded here; the node reports the first reason in
its heartbeats, and the metadata leader does not count such heartbeats
(liveness.py), so the node turns suspect, then dead, and the existing repair
(mover.py, core/planner.py) re-creates its replicas on other nodes once it
stays dead ``repair_after``. A restart re-reads everything from disk.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from raft_queue import errors
from raft_queue.config import StorageConfig

log = logging.getLogger(__name__)


def low_space(path: str, cfg: StorageConfig) -> str:
    """Why ``path``'s file system is below the watermark, or ""."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return f"disk of {path} unreadable: {exc}"
    free = st.f_bavail * st.f_frsize
    total = st.f_blocks * st.f_frsize
    if cfg.min_free_bytes and free < cfg.min_free_bytes:
        return (
            f"disk of {path} has {free} bytes free, below "
            f"[storage] min_free_bytes = {cfg.min_free_bytes}"
        )
    if cfg.min_free_percent and total and free * 100.0 / total < cfg.min_free_percent:
        return (
            f"disk of {path} has {free * 100.0 / total:.2f}% free, below "
            f"[storage] min_free_percent = {cfg.min_free_percent}"
        )
    return ""


class DiskHealth:
    """This node's own disk state and the cluster's low-disk map (any thread)."""

    def __init__(self, node_id: str, data_dir: str, cfg: StorageConfig) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.cfg = cfg
        self.own_low = ""
        self.low: dict[str, str] = {}  # node id -> reason (from the metadata leader)
        self.reported: dict[str, str] = {}  # metadata leader: what each node said
        self.failures: dict[str, str] = {}  # replica key -> reason (fail-stop)
        self._lock = threading.Lock()

    # ---- this node ---------------------------------------------------------------------
    def check(self) -> str:
        """Re-check the watermark; the reason this node is low ("" if not)."""
        reason = low_space(self.data_dir, self.cfg)
        if reason != self.own_low:
            if reason:
                log.error("node %s is low on disk space: %s", self.node_id, reason)
            else:
                log.warning("node %s has disk space again", self.node_id)
            self.own_low = reason
        return reason

    def replica_failed(self, key: str, reason: str) -> None:
        """Driver thread: a replica stopped (fail-stop)."""
        with self._lock:
            self.failures.setdefault(key, reason)

    def failure(self) -> str:
        with self._lock:
            if not self.failures:
                return ""
            key, reason = next(iter(self.failures.items()))
            return f"replica {key} failed: {reason}"

    # ---- the cluster's map ---------------------------------------------------------------
    def report(self, node_id: str, reason: str) -> dict[str, str]:
        """Metadata leader: ``node_id`` says it is low (reason) or not (""); the map."""
        with self._lock:
            if reason:
                self.reported[node_id] = reason
            else:
                self.reported.pop(node_id, None)
            return dict(self.reported)

    def adopt(self, low: dict[str, str]) -> None:
        """The map as the metadata leader last answered it."""
        self.low = dict(low)

    def is_low(self, node_id: str) -> bool:
        if node_id == self.node_id and self.own_low:
            return True
        return node_id in self.low

    def low_reason(self, node_id: str) -> str:
        if node_id == self.node_id and self.own_low:
            return self.own_low
        return self.low.get(node_id, "")

    def check_send(self, queue: str, partition: int, replicas: Any) -> None:
        """ResourceExhausted if a replica of the partition is on a low node."""
        for ref in replicas:
            node_id = ref.node_id
            reason = self.own_low if node_id == self.node_id else ""
            reason = reason or self.low.get(node_id, "")
            if reason:
                raise errors.ResourceExhausted(
                    f"send to {queue}/{partition} refused: node {node_id} is low on "
                    f"disk space ({reason}); acks, receives and reads still work"
                )
