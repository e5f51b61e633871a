"""``raftq``'s global TLS options: ``--tls --ca FILE`` (and ``--cert/--key`` for mTLS).

Each has an environment variable (RAFTQ_TLS=1, RAFTQ_CA_FILE, RAFTQ_CERT_FILE,
RAFTQ_KEY_FILE), which ``raftq dev up --tls`` prints for pasting. Giving a
file implies ``--tls``: ``--ca FILE`` alone means "TLS, checked against FILE";
an explicit ``--no-tls`` (or RAFTQ_TLS=0) means plaintext whatever files are set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


def tls_options(f: F) -> F:
    """Add the four TLS options to a click command."""
    options = [
        click.option(
            "--tls/--no-tls",
            "tls",
            envvar="RAFTQ_TLS",
            default=None,
            show_envvar=True,
            help="Connect over TLS (implied by --ca/--cert; --no-tls: plaintext).",
        ),
        click.option(
            "--ca",
            "ca_file",
            envvar="RAFTQ_CA_FILE",
            show_envvar=True,
            type=click.Path(dir_okay=False),
            help="PEM CA the nodes' certificates are checked against (default: system roots).",
        ),
        click.option(
            "--cert",
            "cert_file",
            envvar="RAFTQ_CERT_FILE",
            show_envvar=True,
            type=click.Path(dir_okay=False),
            help="PEM client certificate, for nodes that require one (with --key).",
        ),
        click.option(
            "--key",
            "key_file",
            envvar="RAFTQ_KEY_FILE",
            show_envvar=True,
            type=click.Path(dir_okay=False),
            help="PEM key of --cert.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def tls_arguments(
    tls: bool | None, ca_file: str | None, cert_file: str | None, key_file: str | None
) -> dict[str, Any]:
    """Client keyword arguments from the options ({} for plaintext)."""
    if tls is False or not (tls or ca_file or cert_file or key_file):
        return {}
    return {"tls": True, "ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
