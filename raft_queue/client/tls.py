"""The SDK's TLS: which channels ``Client`` and ``AsyncClient`` open.

``ClientTls.of(tls, ca_file, cert_file, key_file)`` checks the keyword
arguments both clients take; ``sync_factory`` / ``aio_factory`` give the
``ChannelFactory`` a ``Router`` opens its channels with. ``ca_file`` is the
cluster's CA (``raftq dev up --tls`` prints it as ``RAFTQ_CA_FILE``);
without it the system's roots are used, as for any public server.
``cert_file`` + ``key_file`` are this client's own certificate, for a
cluster whose nodes set ``require_client_cert``. The files are read once,
when the client is made, and checked then (a bad path is an InvalidArgument
naming the argument, before any connection).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc

from raft_queue.client.routing import CHANNEL_OPTIONS, ChannelFactory, insecure_channel
from raft_queue.errors import ConfigError, InvalidArgument
from raft_queue.security.tls import load_material, read_ca


@dataclass(frozen=True, slots=True)
class ClientTls:
    """A client's TLS settings, read from files (None: plaintext)."""

    ca_pem: bytes | None
    cert_pem: bytes | None
    key_pem: bytes | None

    @staticmethod
    def of(
        tls: bool,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
    ) -> ClientTls | None:
        """Check and read the files; None when ``tls`` is false (then giving
        a file is a mistake, reported rather than silently ignored).
        InvalidArgument names the argument at fault."""
        given = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
        if not tls:
            named = [k for k, v in given.items() if v]
            if named:
                raise InvalidArgument(named[0], "is set but tls is off: pass tls=True")
            return None
        if bool(cert_file) != bool(key_file):
            missing = "key_file" if cert_file else "cert_file"
            raise InvalidArgument(missing, "cert_file and key_file go together")
        try:
            ca = read_ca("ca_file", ca_file) if ca_file else None
            if cert_file and key_file:
                m = load_material(cert_file, key_file, prefix="")
                return ClientTls(ca, m.cert_pem, m.key_pem)
        except ConfigError as exc:  # a file, not the node config: report it as bad input
            raise InvalidArgument(exc.field, str(exc).partition(": ")[2]) from exc
        return ClientTls(ca, None, None)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca_pem, self.key_pem, self.cert_pem)


def sync_factory(tls: ClientTls | None) -> ChannelFactory:
    if tls is None:
        return insecure_channel
    creds = tls.credentials()

    def secure(address: str) -> grpc.Channel:
        return grpc.secure_channel(address, creds, options=CHANNEL_OPTIONS)

    return secure


def aio_factory(tls: ClientTls | None) -> Callable[[str], grpc.aio.Channel]:
    creds = tls.credentials() if tls is not None else None

    def channel(address: str) -> grpc.aio.Channel:
        if creds is None:
            return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        return grpc.aio.secure_channel(address, creds, options=CHANNEL_OPTIONS)

    return channel
