"""Encryption at rest on a node: seal on the way in, open on the way out.

- In: ``seal`` turns one partition's record blobs of a Send (or a dead-letter
  move) into one sealed batch under the queue's current data key, before the
  Append is proposed: no Raft entry, LMDB page or snapshot holds a body or
  a header in plain form (``core/sealing.py``).
- Out: ``open_segment`` / ``open_records`` / ``open_read`` decrypt where
  records leave the node (Read, Receive and Subscribe leases, dead-letter
  moves). A sealed batch is opened whole: reading one record of a batch of
  N costs the decryption of all N (AES-GCM runs at GB/s; a 1 MiB batch is
  well under a millisecond), and the last opened batches are kept in a small
  cache so a drain of one batch in small leases opens it once.
- Keys: the first data key comes with CreateQueue; ``rotate_key`` adds one,
  ``rotate_master`` rewraps all under the current master key; DeleteQueue
  drops them (and ``DataKeys.keep_only`` the plain copies in memory).

A node without a key provider seals nothing and cannot open sealed batches
(FailedPrecondition naming ``security.keyring_file``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from raft_queue import errors
from raft_queue.core import metadata as meta
from raft_queue.core import sealing
from raft_queue.core.segments import SEALED, Segment, Summary
from raft_queue.security.encryption import DataKeys, decrypt, encrypter

if TYPE_CHECKING:
    from raft_queue.core.metadata_records import QueueRecord
    from raft_queue.server.node import Node

log = logging.getLogger(__name__)
_OPENED_CACHE = 64  # batches


class NodeCrypto:
    def __init__(self, node: Node) -> None:
        self.node = node
        provider = getattr(node, "key_provider", None)
        self.keys: DataKeys | None = DataKeys(provider) if provider is not None else None
        self._opened: OrderedDict[tuple[int, int, int], list[Any]] = OrderedDict()
        self._view_version = -1

    # ---- keys ---------------------------------------------------------------------------
    def first_key(self, name: str, spec: Any) -> meta.DataKey | None:
        """The data key a new queue is created with (None: not encrypted)."""
        if not spec.encryption or self.keys is None:
            return None
        return self.keys.new_key(name, 1)

    async def rotate_key(self, name: str) -> meta.DataKey:
        """Metadata leader: a new current data key for queue ``name``."""
        self._require_leader()
        keys = self._require_keys()
        q = self.node.queue_spec(name)
        have = self.node.view.data_keys(name)
        key = keys.new_key(name, have[-1].key_id + 1 if have else 1)
        await self.node.submit_metadata(meta.AddDataKey(name, q.uid, key))
        return key

    async def rotate_master(self) -> tuple[int, str]:
        """Metadata leader: rewrap every data key under the current master key;
        how many keys were rewrapped, and that master key's id."""
        self._require_leader()
        keys = self._require_keys()
        master = keys.provider.current_master_id()
        done = 0
        for q in self.node.view.queues():
            have = self.node.view.data_keys(q.name)
            new = tuple(keys.rewrap(q.name, k, master) for k in have)
            if new != have:
                await self.node.submit_metadata(meta.RewrapDataKeys(q.name, q.uid, new))
                done += sum(a != b for a, b in zip(new, have, strict=True))
        return done, master

    def _require_leader(self) -> None:
        md = self.node.metadata
        if md is None or not md.is_leader():
            raise errors.NotLeader("not the metadata leader", self.node.metadata_leader_address())

    def _require_keys(self) -> DataKeys:
        if self.keys is None:
            raise errors.FailedPrecondition(
                "this node has no key provider: set security.keyring_file (docs/security.md)"
            )
        return self.keys

    def _forget_gone(self) -> None:
        """Drop plain keys and opened batches of keys the metadata no longer has."""
        view = self.node.view
        if view.version == self._view_version or self.keys is None:
            return
        self._view_version = view.version
        self.keys.keep_only(k for q in view.queues() for k in view.data_keys(q.name))
        live = {q.uid for q in view.queues()}
        for k in [k for k in self._opened if k[0] not in live]:
            del self._opened[k]

    # ---- in -----------------------------------------------------------------------------
    def seal(
        self, q: QueueRecord, part: int, blobs: tuple[bytes, ...], summary: Summary
    ) -> tuple[tuple[bytes, ...], Summary]:
        """``blobs`` as one sealed batch, or as they are when the queue is not
        encrypted (or has no data key: created without a key provider)."""
        if not q.spec.encryption or self.keys is None or not blobs:
            return blobs, summary
        self._forget_gone()
        have = self.node.view.data_keys(q.name)
        if not have:
            return blobs, summary
        key = have[-1]
        aes = self.keys.cipher(q.name, key)
        return sealing.seal_blobs(blobs, summary, q.uid, part, key.key_id, encrypter(aes))

    # ---- out ----------------------------------------------------------------------------
    def open_segment(self, queue: str, uid: int, part: int, seg: Segment) -> list[Any]:
        """Every record of the sealed segment ``seg``, decrypted."""
        self._forget_gone()
        cached = self._opened.get((uid, part, seg.base))
        if cached is not None and len(cached) == seg.count:
            self._opened.move_to_end((uid, part, seg.base))
            return cached
        keys = self._require_keys()
        by_id = {k.key_id: k for k in self.node.view.data_keys(queue)}

        def dec(key_id: int, nonce: bytes, sealed: bytes, aad: bytes) -> bytes:
            key = by_id.get(key_id)
            if key is None:
                raise errors.FailedPrecondition(
                    f"data key {key_id} of queue {queue!r} is gone (the queue was deleted: "
                    "its messages cannot be decrypted)"
                )
            return decrypt(keys.cipher(queue, key), nonce, sealed, aad)

        records = sealing.open_records(seg, uid, part, dec)
        self._opened[(uid, part, seg.base)] = records
        while len(self._opened) > _OPENED_CACHE:
            self._opened.popitem(last=False)
        return records

    def opener(self, queue: str, uid: int, part: int) -> Any:
        """``open(seg, i, j)``: records [i, j) of sealed segment ``seg``."""
        return partial(self._slice, queue, uid, part)

    def _slice(self, queue: str, uid: int, part: int, seg: Segment, i: int, j: int) -> Any:
        return self.open_segment(queue, uid, part, seg)[i:j]

    def open_read(
        self, q: QueueRecord, part: int, replica: Any, records: Sequence[Any]
    ) -> list[Any]:
        """``records`` (a Read's, in offset order) with sealed ones decrypted."""
        if not records:
            return list(records)
        first, end = records[0].offset, records[-1].offset + 1
        opened: dict[int, Any] = {}
        for seg in replica.segments(first, end):
            if seg.flags & SEALED:
                for rec in self.open_segment(q.name, q.uid, part, seg):
                    opened[rec.offset] = rec
        if not opened:
            return list(records)
        return [opened.get(r.offset, r) for r in records]
