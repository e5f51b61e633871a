"""``raftq principal``, ``raftq grant`` and ``raftq secret``: who may use the
cluster (docs/security.md).

A token is printed once, by ``principal create`` and ``principal rotate``;
the cluster keeps only its SHA-256. ``secret generate`` makes the files a
hand-started cluster's configs name (the cluster secret, the admin token and
its hash file).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from raft_queue.cli.operations import message_json
from raft_queue.cli.output import json_option, print_json, print_line, print_objects
from raft_queue.core.access import OPERATIONS

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


def _grants(p: Any) -> str:
    return "; ".join(f"{g.pattern}: {','.join(g.operations)}" for g in p.grants) or "-"


PRINCIPAL_COLUMNS = [("principal", lambda p: p.name), ("grants", _grants),
                     ("created ms", lambda p: p.created_ms),
                     ("rotated ms", lambda p: p.rotated_ms)]  # fmt: skip


def _print_token(answer: Any, as_json: bool, verb: str) -> None:
    if as_json:
        print_json(message_json(answer))
        return
    print_line(f"principal {answer.principal.name} {verb}; its token (shown only this once):")
    click.echo(answer.token)


@click.group()
def principal() -> None:
    """Client identities, each with one bearer token."""


@principal.command("create")
@click.argument("name")
@json_option
@click.pass_obj
def principal_create(session: Session, name: str, as_json: bool) -> None:
    """Create NAME and print its token once (it has no grants yet: see `raftq grant add`)."""
    _print_token(session.client.create_principal(name), as_json, "created")


@principal.command("rotate")
@click.argument("name")
@json_option
@click.pass_obj
def principal_rotate(session: Session, name: str, as_json: bool) -> None:
    """Give NAME a new token (printed once); the old one stops working at once."""
    _print_token(session.client.rotate_principal(name), as_json, "rotated")


@principal.command("delete")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.pass_obj
def principal_delete(session: Session, name: str, yes: bool) -> None:
    """Delete NAME and its grants; its token stops working at once."""
    if not yes:
        click.confirm(f"delete principal {name}?", abort=True)
    session.client.delete_principal(name)
    print_line(f"principal {name} deleted")


@principal.command("list")
@json_option
@click.pass_obj
def principal_list(session: Session, as_json: bool) -> None:
    """Every principal with its grants (never a token)."""
    found = session.client.list_principals()
    if as_json:
        print_json([message_json(p) for p in found])
    else:
        print_objects(PRINCIPAL_COLUMNS, found)


def _operations(value: str) -> list[str]:
    ops = [op.strip() for op in value.split(",") if op.strip()]
    bad = [op for op in ops if op not in OPERATIONS]
    if bad:
        raise click.BadParameter(f"{', '.join(bad)}: each must be one of {', '.join(OPERATIONS)}")
    return ops


@click.group()
def grant() -> None:
    """What each principal may do, on which queues."""


@grant.command("add")
@click.argument("principal_name", metavar="PRINCIPAL")
@click.option("--queue", "pattern", required=True,
              help="A queue name, a prefix ending in '*' (orders.*), or '*'.")  # fmt: skip
@click.option("--allow", required=True, help=f"Comma separated: {', '.join(OPERATIONS)}.")
@json_option
@click.pass_obj
def grant_add(
    session: Session, principal_name: str, pattern: str, allow: str, as_json: bool
) -> None:
    """Allow PRINCIPAL the given operations on the queues PATTERN matches."""
    found = session.client.add_grant(principal_name, pattern, _operations(allow))
    _print_principals([found], as_json)


@grant.command("remove")
@click.argument("principal_name", metavar="PRINCIPAL")
@click.option("--queue", "pattern", required=True, help="The pattern of the grant.")
@click.option("--allow", default="", help="Operations to take back (default: all on PATTERN).")
@json_option
@click.pass_obj
def grant_remove(
    session: Session, principal_name: str, pattern: str, allow: str, as_json: bool
) -> None:
    """Take back operations of PRINCIPAL on PATTERN."""
    ops = _operations(allow) if allow else []
    _print_principals([session.client.remove_grant(principal_name, pattern, ops)], as_json)


@grant.command("list")
@click.argument("principal_name", metavar="[PRINCIPAL]", required=False, default="")
@json_option
@click.pass_obj
def grant_list(session: Session, principal_name: str, as_json: bool) -> None:
    """The grants of PRINCIPAL (of every principal without one)."""
    _print_principals(session.client.list_principals(principal_name), as_json)


def _print_principals(found: list[Any], as_json: bool) -> None:
    if as_json:
        print_json([message_json(p) for p in found])
        return
    rows = [(p.name, g.pattern, ",".join(g.operations)) for p in found for g in p.grants]
    print_objects([("principal", lambda r: r[0]), ("queue pattern", lambda r: r[1]),
                   ("allow", lambda r: r[2])], rows)  # fmt: skip


@click.group()
def secret() -> None:
    """Files a hand-started cluster needs."""


@secret.command("generate")
@click.argument("secret_file", default="data/cluster.secret", required=False)
def secret_generate(secret_file: str) -> None:
    """Make SECRET_FILE (the cluster secret), and next to it admin.token (an
    admin token) and admin.tokens (its SHA-256: the nodes' admin_tokens_file).
    Existing files are kept. Copy them, mode 0600, to every node."""
    from raft_queue.security.secret import generate_secret_file
    from raft_queue.security.tokens import write_admin_token

    path = generate_secret_file(secret_file)
    token_path, hashes_path = path.parent / "admin.token", path.parent / "admin.tokens"
    token = write_admin_token(token_path, hashes_path)
    print_line(f"cluster secret:     {path}  ([security] cluster_secret_file)")
    print_line(f"admin token hashes: {hashes_path}  ([security] admin_tokens_file)")
    print_line(f"admin token:        {token_path}")
    click.echo(f"export RAFTQ_TOKEN={token}")
