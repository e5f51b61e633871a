"""The cluster as the status page and ``raftq top`` show it (``/api/status``).

The serving node asks every other node for its ``NodeStatus`` (replicas,
message counters, readiness) in parallel, as ``ClusterStatus`` does, and
merges them with its metadata view into one JSON document:

    {"node": "n1", "time": 1764106801.2, "metadata_leader": "n2",
     "nodes":      [{"id", "address", "state", "controller", "metadata_leader",
                     "reachable", "ready", "heartbeat_age_s", "metrics_address"}],
     "partitions": [{"queue", "partition", "leader", "commit_index", "lag",
                     "replicas": [{"node", "role", "last_applied"}]}],
     "queues":     [{"name", "partitions", "messages", "in_flight", "delayed",
                     "dead", "bytes", "oldest_age_s", "sent", "received", "acked"}]}

``sent``/``received``/``acked`` are counters summed over the nodes that
answered (raftq_messages_*_total); clients turn two snapshots into rates.
A node that does not answer within ``ASK_TIMEOUT_S`` is ``reachable: false``.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from raft_queue._proto.raft_queue.v1 import admin_pb2
from raft_queue.observability.metrics import ACKED, RECEIVED, SENT

if TYPE_CHECKING:
    from raft_queue.server.cluster import Cluster

ASK_TIMEOUT_S = 2.0


def counters_pb() -> list[Any]:
    """This node's message counters as QueueCounters (for NodeStatus)."""
    table: dict[tuple[str, str], list[float]] = {}
    for pos, metric in enumerate((SENT, RECEIVED, ACKED)):
        for family in metric.collect():
            for s in family.samples:
                if s.name.endswith("_total"):
                    key = (s.labels["queue"], s.labels["partition"])
                    table.setdefault(key, [0.0, 0.0, 0.0])[pos] = s.value
    return [
        admin_pb2.QueueCounters(
            queue=q, partition=int(p), sent=int(v[0]), received=int(v[1]), acked=int(v[2])
        )
        for (q, p), v in table.items()
    ]


def fill_node_status(resp: Any, ready: bool, metrics_address: str) -> None:
    resp.counters.extend(counters_pb())
    resp.ready = ready
    resp.metrics_address = metrics_address


class StatusSource:
    """Builds the document; remembers when each node last answered."""

    def __init__(self, cluster: Cluster, health: Any, liveness: Any, metrics_address: str) -> None:
        self.cluster = cluster
        self.node = cluster.node
        self.health = health
        self.liveness = liveness
        self.metrics_address = metrics_address
        self.last_answer: dict[str, float] = {}

    def own_status(self) -> Any:
        resp = admin_pb2.NodeStatusResponse(
            node=self.node.id,
            replicas=self.cluster.local_status(False),
            metadata_version=self.node.view.version,
        )
        fill_node_status(resp, self.health.verdict.ready, self.metrics_address)
        return resp

    async def _ask_all(self) -> dict[str, Any]:
        others = [n for n in self.node.view.nodes().values() if n.node_id != self.node.id]

        async def ask(n: Any) -> Any:
            req = admin_pb2.NodeStatusRequest(include_counters=True)
            return await self.cluster.peers.node(n.address).NodeStatus(req, timeout=ASK_TIMEOUT_S)

        answers = await asyncio.gather(*(ask(n) for n in others), return_exceptions=True)
        out = {self.node.id: self.own_status()}
        now = time.time()
        for n, ans in zip(others, answers, strict=True):
            if not isinstance(ans, BaseException):
                out[n.node_id] = ans
                self.last_answer[n.node_id] = now
        self.last_answer[self.node.id] = now
        return out

    async def document(self) -> dict[str, Any]:
        answers = await self._ask_all()
        view = self.node.view
        now = time.time()
        leader = self.node.metadata_leader_id() or ""
        replicas = [r for ans in answers.values() for r in ans.replicas]
        return {
            "node": self.node.id,
            "time": now,
            "metadata_leader": leader,
            "metadata_version": view.version,
            "nodes": self._nodes(answers, leader, now),
            "partitions": _partitions(view, replicas),
            "queues": _queues(view, replicas, answers, now),
        }

    def _nodes(self, answers: dict[str, Any], leader: str, now: float) -> list[dict[str, Any]]:
        out = []
        md = self.node.metadata
        # Heartbeat ages are only kept (and fresh) on the metadata leader.
        leads = self.liveness is not None and md is not None and md.is_leader()
        for n in sorted(self.node.view.nodes().values(), key=lambda n: n.node_id):
            ans = answers.get(n.node_id)
            age = self.liveness.age_s(n.node_id) if leads else None
            if age is None and n.node_id in self.last_answer:
                age = now - self.last_answer[n.node_id]  # as this node last heard from it
            out.append(
                {
                    "id": n.node_id,
                    "address": n.address,
                    "state": n.state,
                    "controller": bool(n.controller),
                    "metadata_leader": n.node_id == leader,
                    "reachable": ans is not None,
                    "ready": bool(ans.ready) if ans is not None else False,
                    "heartbeat_age_s": round(age, 1) if age is not None else None,
                    "metrics_address": ans.metrics_address if ans is not None else "",
                }
            )
        return out


def _partitions(view: Any, replicas: list[Any]) -> list[dict[str, Any]]:
    by_key: dict[tuple[str, int], list[Any]] = {}
    for r in replicas:
        by_key.setdefault((r.queue, r.partition), []).append(r)
    out = []
    for q in sorted(view.queues(), key=lambda q: q.name):
        for a in view.assignments(q.name):
            seen = by_key.get((q.name, a.partition), [])
            lead = next((r for r in seen if r.role == "leader"), None)
            commit = lead.commit_index if lead is not None else 0
            out.append(
                {
                    "queue": q.name,
                    "partition": a.partition,
                    "leader": lead.node if lead is not None else "",
                    "commit_index": commit,
                    "lag": max((max(0, commit - r.last_applied) for r in seen), default=0),
                    "replicas": [_replica(ref.node_id, seen) for ref in a.replicas],
                }
            )
    return out


def _replica(node_id: str, seen: list[Any]) -> dict[str, Any]:
    r = next((r for r in seen if r.node == node_id), None)
    if r is None:
        return {"node": node_id, "role": "unknown", "last_applied": 0}
    return {"node": node_id, "role": r.role, "last_applied": r.last_applied}


def _queues(
    view: Any, replicas: list[Any], answers: dict[str, Any], now: float
) -> list[dict[str, Any]]:
    sums: dict[str, dict[str, float]] = {}
    for ans in answers.values():
        for c in ans.counters:
            row = sums.setdefault(c.queue, {"sent": 0, "received": 0, "acked": 0})
            row["sent"] += c.sent
            row["received"] += c.received
            row["acked"] += c.acked
    out = []
    for q in sorted(view.queues(), key=lambda q: q.name):
        leaders = [r for r in replicas if r.queue == q.name and r.role == "leader"]
        oldest = min((r.oldest_timestamp_ms for r in leaders if r.oldest_timestamp_ms), default=0)
        row = {
            "name": q.name,
            "partitions": q.spec.partitions,
            "leaders": len(leaders),
            **{k: sum(getattr(r, k) for r in leaders) for k in ("messages", "in_flight",
                                                                "delayed", "dead", "bytes")},
            "oldest_age_s": round(max(0.0, now - oldest / 1000), 1) if oldest else 0.0,
            **sums.get(q.name, {"sent": 0, "received": 0, "acked": 0}),
        }  # fmt: skip
        out.append(row)
    return out
