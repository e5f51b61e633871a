"""What keeps the cluster right, mostly on the metadata leader: queue
lifecycle (queues.py), replica moves and cluster operations (mover.py,
members.py, operations.py), the metadata voters (controllers.py), node
liveness (liveness.py), the metadata copy of a non-voter
(metadata_follower.py), periodic partition work (housekeeping.py) and the
node's disk health (disk.py)."""
