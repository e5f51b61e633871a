"""The ``raftq`` command line (entry point: ``raft_queue.cli.main:main``)."""
