"""Fault injection for raft_queue: a Toxiproxy-compatible proxy, history recorder, checker."""
