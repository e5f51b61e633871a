"""Key hashing must be the same in every process and agree with Kafka's default partitioner."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from raft_queue.client.partitioner import RoundRobin, murmur2, partition_for_key

# From Kafka's UtilsTest.testMurmur2 (clients/src/test/.../utils/UtilsTest.java).
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# Fixed expectations (literals): a change here moves existing keys to other
# partitions and breaks per-key order for running producers.
EXPECTED_PARTITIONS = {
    ("21", 12): 0,
    ("foobar", 7): 0,
    ("abc", 5): 2,
    ("order-1", 3): 1,
    ("order-1", 16): 6,
    ("order-2", 16): 3,
    ("user-42", 16): 12,
    ("clé", 16): 6,
    ("a" * 100, 16): 6,
}


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


@pytest.mark.parametrize(("key", "partitions"), sorted(EXPECTED_PARTITIONS))
def test_partition_of_known_keys_is_fixed(key, partitions):
    assert partition_for_key(key, partitions) == EXPECTED_PARTITIONS[(key, partitions)]


def test_str_keys_hash_as_their_utf8_bytes():
    assert partition_for_key("clé", 16) == partition_for_key("clé".encode(), 16)


def test_same_partition_in_a_fresh_process_with_another_hash_seed():
    code = (
        "from raft_queue.client.partitioner import partition_for_key;"
        "print([partition_for_key(f'key-{i}', 16) for i in range(50)])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str([partition_for_key(f"key-{i}", 16) for i in range(50)])


def test_keys_spread_over_all_partitions():
    counts = Counter(partition_for_key(f"user-{i}", 8) for i in range(8000))
    assert set(counts) == set(range(8))
    assert min(counts.values()) > 800  # ~1000 each


def test_zero_partitions_is_rejected():
    with pytest.raises(ValueError):
        partition_for_key("k", 0)


def test_round_robin_cycles_per_queue_from_zero():
    rr = RoundRobin()
    assert [rr.next("a", 3) for _ in range(4)] == [0, 1, 2, 0]
    assert rr.next("b", 3) == 0
