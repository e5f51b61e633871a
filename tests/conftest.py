"""Loaded before every other conftest and test module, so before grpc is imported.

gRPC's fork handlers (pthread_atfork; on by default in our grpcio 1.85.3) restart
its epoll poller thread in a forked child. subprocess.Popen with a
``preexec_fn`` forks (no vfork), and the child then closes every descriptor
above 2 before its exec (close_fds), gRPC's epoll among them: while the
pytest process holds live channels, the child's poller sometimes hits
"(event_engine) Epoll1Poller ... encountered epoll_wait error: Bad file
descriptor" and aborts before the exec (grpc/grpc#43055). pyspark's
launch_gateway starts spark-submit that way, so the session-scoped ``spark``
fixture (tests/spark/conftest.py), after chaos and integration have left
channels open in this process, failed with JAVA_GATEWAY_EXITED and every
Spark test errored. Nothing in the suite forks without exec; with the
handlers off the child never runs gRPC code. Read at gRPC's initialization,
so it must be set here, before any import of grpc (a conftest further down
is too late: the first import of grpc is a test module's, via raft_queue.client).
tests/unit/test_grpc_fork.py checks it holds.
"""

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
