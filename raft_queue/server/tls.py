"""The node's gRPC TLS: the listening port's credentials and those it dials other nodes with.

With ``[tls]`` on, the node's only gRPC port is a TLS port (a plaintext
client fails its handshake), and every node-to-node call (forwarding,
registration heartbeats, metadata polls, status, moves: all of them go
through server/peers.py) is made over TLS, checking the other node's
certificate against ``tls.ca_file``. With ``require_client_cert`` the port
asks every client for a certificate signed by that CA, and this node
presents its own when it dials (node certificates carry clientAuth too);
``peer_identity`` tells who a verified client certificate names, for the
authentication layer to map to a principal.
"""

from __future__ import annotations

import grpc

from raft_queue.config import TlsConfig
from raft_queue.security.tls import CertIdentity, Material, identity_of, load_node_material


class NodeTls:
    """A node's TLS material, loaded and checked once at start (None = plaintext)."""

    def __init__(self, config: TlsConfig) -> None:
        self.config = config
        self.material: Material | None = load_node_material(config)

    @property
    def enabled(self) -> bool:
        return self.material is not None

    def add_port(self, server: grpc.aio.Server, address: str) -> int:
        """Listen on ``address``: TLS only when on, plaintext otherwise."""
        m = self.material
        if m is None:
            port: int = server.add_insecure_port(address)
            return port
        creds = grpc.ssl_server_credentials(
            [(m.key_pem, m.cert_pem)],
            root_certificates=m.ca_pem,
            require_client_auth=self.config.require_client_cert,
        )
        port = server.add_secure_port(address, creds)
        return port

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """What this node dials other nodes with; None when TLS is off."""
        m = self.material
        if m is None:
            return None
        if self.config.require_client_cert:
            return grpc.ssl_channel_credentials(m.ca_pem, m.key_pem, m.cert_pem)
        return grpc.ssl_channel_credentials(m.ca_pem)


def peer_identity(context: grpc.ServicerContext | grpc.aio.ServicerContext) -> CertIdentity | None:
    """Who the caller's TLS client certificate names (``raftq://node/<id>``,
    ``raftq://principal/<name>``, else its CN as a principal); None without
    one. Only a node with ``require_client_cert`` asks for certificates, and
    gRPC hands over only one that the handshake verified against ``ca_file``,
    so the name can be trusted as far as the CA is."""
    pems = (context.auth_context() or {}).get("x509_pem_cert") or []
    return identity_of(pems[0]) if pems else None
