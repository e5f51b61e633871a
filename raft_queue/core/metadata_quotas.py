"""The metadata machine's quotas and usage (pure): a mixin of MetadataMachine.

Quotas are part of the view (a change bumps ``version``, so every node's
copy follows). Usage batches do not bump ``version``: they change no routing,
and are read from the metadata leader (``raftq usage``). A batch applies
once per ``(node_id, seq)``: a retried flush is ignored (core/usage.py).
"""

from __future__ import annotations

from typing import Any

from raft_queue import errors
from raft_queue.core import quotas as q
from raft_queue.core import usage
from raft_queue.core.metadata_commands import RecordUsage, RemoveQuota, SetQuota


class QuotasAndUsage:
    version: int

    def _init_quotas(self) -> None:
        self._quotas: dict[tuple[str, str], q.Quota] = {}
        self._usage: dict[usage.Key, usage.Counts] = {}
        self._usage_seq: dict[str, int] = {}  # node id -> last flush applied

    def _changed(self) -> None:  # pragma: no cover - MetadataMachine's
        raise NotImplementedError

    # -- queries --
    def quotas(self) -> list[q.Quota]:
        """Every quota, by principal then queue."""
        return [self._quotas[k] for k in sorted(self._quotas)]

    def quota(self, principal: str, queue: str = "") -> q.Quota | None:
        return self._quotas.get((principal, queue))

    def usage(self, principal: str = "", queue: str = "", since_ms: int = 0) -> list[usage.Row]:
        return usage.select(self._usage, principal, queue, since_ms)

    def usage_seq(self, node_id: str) -> int:
        """The last usage flush applied from ``node_id`` (0: none)."""
        return self._usage_seq.get(node_id, 0)

    # -- apply --
    def _apply_SetQuota(self, cmd: SetQuota) -> q.Quota:
        new = q.check_quota(q.Quota(cmd.principal, cmd.queue, cmd.messages_per_s,
                                    cmd.bytes_per_s, float(cmd.burst_s)))  # fmt: skip
        if self._quotas.get(new.key) != new:
            self._quotas[new.key] = new
            self._changed()
        return new

    def _apply_RemoveQuota(self, cmd: RemoveQuota) -> q.Quota:
        old = self._quotas.pop((cmd.principal, cmd.queue), None)
        if old is None:
            where = f" on queue {cmd.queue!r}" if cmd.queue else ""
            raise errors.NotFound(f"no quota for principal {cmd.principal!r}{where}")
        self._changed()
        return old

    def _apply_RecordUsage(self, cmd: RecordUsage) -> int:
        """Returns the node's last applied sequence (``cmd.seq`` when applied)."""
        last = self._usage_seq.get(cmd.node_id, 0)
        if cmd.seq <= last:
            return last  # a retried flush: already counted
        rows: list[Any] = [tuple(r) for r in cmd.rows]
        usage.check_rows(rows)
        usage.merge(self._usage, rows)
        self._usage_seq[cmd.node_id] = cmd.seq
        return cmd.seq

    # -- snapshot --
    def _quotas_to_plain(self) -> dict[str, Any]:
        return {
            "quotas": [q.to_plain(x) for x in self.quotas()],
            "usage": [list(r) for r in usage.to_rows(self._usage)],
            "usage_seq": [[n, self._usage_seq[n]] for n in sorted(self._usage_seq)],
        }

    def _quotas_from_plain(self, obj: dict[str, Any]) -> None:
        for plain in obj.get("quotas", ()):
            quota = q.from_plain(plain)
            self._quotas[quota.key] = quota
        usage.merge(self._usage, [tuple(r) for r in obj.get("usage", ())])
        self._usage_seq = {str(n): int(s) for n, s in obj.get("usage_seq", ())}
