"""Auto-registration of the ``raftq`` format.

Spark (4.0+) imports every top-level module named ``pyspark_*`` it finds on
the Python path of its workers and registers the module's ``DefaultSource``
under ``DefaultSource.name()``. Installing the raft-queue wheel on the
driver and executors is therefore enough for ``format("raftq")``; no
``spark.dataSource.register`` call is needed. (An editable install, ``pip
install -e``, is not seen by that scan: register explicitly there.)
"""

from spark.raftq.source import RaftQueueDataSource as DefaultSource

__all__ = ["DefaultSource"]
