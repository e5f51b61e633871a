"""Benchmarks: the peer harness's workloads (W1-W4) plus idle CPU, run through the SDK.

``workloads`` holds the measurements (each takes a ``Target`` and ``Params``
and returns a ``Result``); ``raftq bench`` (``raft_queue.cli.bench``) starts a
cluster, repeats them and prints medians; ``peer_adapter`` lets the shared
peer harness (``../shared/bench/peers/loadgen.py``) drive raft_queue with
its own code, so both paths can be compared. Benchmarks report numbers and
targets; they never fail a build (docs/benchmarks.md).
"""
