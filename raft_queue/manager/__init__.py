"""The external cluster manager: several independent clusters under one
Raft-replicated map of queues to clusters (docs/operations.md "Two levels of
manager"). ``state.py`` is its pure state machine; ``main.py`` its process."""
