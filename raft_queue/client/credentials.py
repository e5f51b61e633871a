"""Where the SDK and ``raftq`` find the bearer token, first found wins (as
boto3 looks for AWS credentials):

1. the ``token=`` argument (``raftq --token``); ``""`` sends none;
2. the environment variable ``RAFTQ_TOKEN``;
3. a profile file: ``RAFTQ_CREDENTIALS_FILE``, default
   ``~/.config/raftq/credentials``, TOML with one table per profile
   (``[default]`` unless ``RAFTQ_PROFILE`` names another) holding
   ``token = "rqt_..."``.

No token at all is allowed here: a node then answers UNAUTHENTICATED, unless
it runs with ``[security] insecure = true``.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from raft_queue.errors import InvalidArgument

ENV_TOKEN = "RAFTQ_TOKEN"
ENV_PROFILE = "RAFTQ_PROFILE"
ENV_FILE = "RAFTQ_CREDENTIALS_FILE"
DEFAULT_FILE = "~/.config/raftq/credentials"


def profile_token(profile: str | None = None, path: str | None = None) -> str | None:
    """The token of ``profile`` in the credentials file, None when the file
    does not exist; InvalidArgument when it is malformed or lacks the profile
    that was asked for by name."""
    file = Path(os.path.expanduser(path or os.environ.get(ENV_FILE) or DEFAULT_FILE))
    asked = profile or os.environ.get(ENV_PROFILE)
    if not file.is_file():
        return None
    try:
        data = tomllib.loads(file.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgument("credentials", f"cannot read {file}: {exc}") from exc
    section = data.get(asked or "default")
    if not isinstance(section, dict):
        if asked:
            raise InvalidArgument("profile", f"no [{asked}] in {file}")
        return None
    token = section.get("token")
    return str(token) if token else None


def resolve_token(token: str | None = None) -> str | None:
    """The token to send: the argument, else $RAFTQ_TOKEN, else the profile
    file. ``token=""`` means none at all (for a node with ``insecure = true``)."""
    if token is not None:
        return token or None
    return os.environ.get(ENV_TOKEN) or profile_token()


def call_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """gRPC call metadata carrying ``token`` (none without one)."""
    return (("authorization", f"Bearer {token}"),) if token else ()
