"""``raftq``: the ops CLI, a thin layer over the SDK (``raft_queue.client``).

Exit codes: 0 success, 1 a failed operation (one line on stderr: the
QueueError's message, which names the field for bad input), 2 a usage error
(click's own). Never a traceback, unless ``RAFTQ_DEBUG`` is set.

Other engineers add command groups from their own modules (``node``,
``dev``, ``bench``): each module exposes a click command named like the
module and is registered at the bottom of this file.
"""

from __future__ import annotations

import os
from typing import Any

import click

from raft_queue.cli.access import grant, principal, secret
from raft_queue.cli.cluster import cluster
from raft_queue.cli.controller import controller
from raft_queue.cli.messages import ack, history, nack, read, receive, send, tail
from raft_queue.cli.partitions import leaders, partitions
from raft_queue.cli.queue import queue
from raft_queue.cli.quota import quota, usage
from raft_queue.cli.tls import tls_arguments, tls_options
from raft_queue.client import Client
from raft_queue.errors import QueueError

DEFAULT_SERVER = "127.0.0.1:7101"


class Session:
    """Per-invocation state: where to connect, and the client made on first use."""

    def __init__(
        self,
        server: str,
        timeout_s: float,
        token: str | None = None,
        tls: dict[str, Any] | None = None,
        manager: str = "",
    ) -> None:
        self.server = server
        self.manager = manager  # --manager: route through the external manager (cli/clusters.py)
        self.timeout_s = timeout_s
        self.token = token
        self.tls = tls or {}  # Client's TLS keyword arguments (client/tls.py)
        # --server on the command line: commands go to that cluster directly even
        # with $RAFTQ_MANAGER set (the manager still serves the `clusters` commands)
        self.direct = False
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None and self.manager and not self.direct:
            from raft_queue.client.managed import ManagedClient

            managed: Any = ManagedClient(
                self.manager, self.token, timeout_s=self.timeout_s, **self.tls
            )
            self._client = managed
        if self._client is None:
            self._client = Client(
                self.server, timeout_s=self.timeout_s, token=self.token, **self.tls
            )
        return self._client

    @property
    def manager_admin(self) -> Any:
        """The external manager's API (ManagerService), made on first use."""
        if getattr(self, "_manager_admin", None) is None:
            from raft_queue.client.manager_admin import ManagerAdmin

            self._manager_admin = ManagerAdmin(self.manager, self.token, self.timeout_s, **self.tls)
        return self._manager_admin

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if getattr(self, "_manager_admin", None) is not None:
            self._manager_admin.close()


class RaftqGroup(click.Group):
    """The root group: maps errors to one stderr line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except QueueError as exc:
            raise click.ClickException(exc.message) from exc
        except Exception as exc:
            if os.environ.get("RAFTQ_DEBUG"):
                raise
            raise click.ClickException(f"internal error: {type(exc).__name__}: {exc}") from exc


@click.group(cls=RaftqGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--server",
    envvar="RAFTQ_SERVER",
    default=DEFAULT_SERVER,
    show_default=True,
    show_envvar=True,
    help="Node address(es), comma separated; any node accepts any request.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds per command, retries included.",
)
@click.option(
    "--token",
    envvar="RAFTQ_TOKEN",
    default=None,
    show_envvar=True,
    help="Bearer token (else the profile file ~/.config/raftq/credentials, RAFTQ_PROFILE).",
)
@tls_options
@click.option(
    "--manager",
    envvar="RAFTQ_MANAGER",
    default="",
    show_envvar=True,
    help="External manager address(es): `clusters` commands, and message commands routed "
    "by its mapping (docs/operations.md).",
)
@click.pass_context
def main(
    ctx: click.Context,
    server: str,
    timeout_s: float,
    token: str | None,
    tls: bool | None,
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    manager: str = "",
) -> None:
    """raftq: operate a raft_queue cluster."""
    session = Session(server, timeout_s, token, tls_arguments(tls, ca_file, cert_file, key_file))
    session.manager = manager
    session.direct = ctx.get_parameter_source("server") == click.core.ParameterSource.COMMANDLINE
    ctx.obj = session
    ctx.call_on_close(session.close)


_COMMANDS = (cluster, controller, queue, partitions, leaders, send, receive, ack, nack, read,
             tail, history, principal, grant, secret, quota, usage)  # fmt: skip
for _command in _COMMANDS:
    main.add_command(_command)


# Commands owned by another engineer (node process, local dev cluster, bench).
# Each is optional: a module that is missing must not break the rest of the CLI.
try:
    from raft_queue.cli.node import node

    main.add_command(node)
except ImportError:
    pass
try:
    from raft_queue.cli.dev import dev

    main.add_command(dev)
except ImportError:
    pass
try:
    from raft_queue.cli.bench import bench

    main.add_command(bench)
except ImportError:
    pass
try:
    from raft_queue.cli.keys import keys  # also adds ``queue rotate-key``

    main.add_command(keys)
except ImportError:
    pass
try:
    from raft_queue.cli.clusters import clusters, manager  # also adds ``queue place``

    main.add_command(clusters)
    main.add_command(manager)
except ImportError:
    pass
try:
    from raft_queue.cli.top import top

    main.add_command(top)
except ImportError:
    pass


if __name__ == "__main__":
    main(prog_name="raftq")
