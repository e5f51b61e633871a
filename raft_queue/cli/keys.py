"""Encryption at rest from the CLI (docs/security.md "Encryption at rest").

``raftq queue rotate-key Q``: a new data key for queue Q (new messages are
sealed with it; older ones stay readable with the older keys).

``raftq keys init [FILE]``: make a new keyring file (one random master key,
mode 0600; default ``data/keyring.json``, what configs/*.toml name). An
existing file is kept. Copy it to every node.

``raftq keys add-master --keyring FILE``: add a random master key to a
keyring file and make it current (copy the file to every node afterwards).

``raftq keys rotate-master [--keyring FILE]``: (with --keyring: add a master
key to FILE first) then have the metadata leader rewrap every queue's data
keys under the current master key. Old master keys can leave the keyring once
this has run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from raft_queue.cli.output import json_option, print_json, print_line
from raft_queue.cli.queue import queue
from raft_queue.security.keyring import add_master_key, generate_keyring_file

if TYPE_CHECKING:
    from raft_queue.cli.main import Session


@queue.command("rotate-key")
@click.argument("name")
@json_option
@click.pass_obj
def rotate_key(session: Session, /, name: str, as_json: bool) -> None:
    """Seal new messages of queue NAME with a new data key (old ones stay readable)."""
    res = session.client.rotate_queue_key(name)
    if as_json:
        print_json({"queue": name, "key_id": res.key_id, "master_id": res.master_id})
    else:
        print_line(f"{name}: data key {res.key_id} (wrapped by master key {res.master_id})")


@click.group()
def keys() -> None:
    """Master keys of encryption at rest: add one, rewrap every data key."""


@keys.command("init")
@click.argument("keyring", default="data/keyring.json", required=False,
                type=click.Path(dir_okay=False, path_type=Path))  # fmt: skip
def init(keyring: Path) -> None:
    """Make KEYRING (one random master key, mode 0600) if it does not exist:
    the nodes' [security] keyring_file. Copy it, mode 0600, to every node."""
    existed = keyring.exists()
    generate_keyring_file(keyring)  # the same writer `raftq dev up` uses
    state = "kept (it exists)" if existed else "new keyring, master key m1 is current"
    print_line(f"{keyring}: {state}  ([security] keyring_file)")


@keys.command("add-master")
@click.option("--keyring", type=click.Path(dir_okay=False, path_type=Path), required=True)
def add_master(keyring: Path) -> None:
    """Add a random master key to KEYRING (made, mode 0600, if missing) and make it current."""
    if not keyring.exists():
        generate_keyring_file(keyring)
        print_line(f"{keyring}: new keyring, master key m1 is current")
        return
    print_line(f"{keyring}: master key {add_master_key(keyring)} is current")


@keys.command("rotate-master")
@click.option(
    "--keyring",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Add a new master key to this keyring file first (shared by the nodes).",
)
@json_option
@click.pass_obj
def rotate_master(session: Session, /, keyring: Path | None, as_json: bool) -> None:
    """Rewrap every queue's data keys under the current master key."""
    if keyring is not None:
        add_master_key(keyring)
    res = session.client.rotate_master_key()
    if as_json:
        print_json({"rewrapped": res.rewrapped, "master_id": res.master_id})
    else:
        print_line(f"rewrapped {res.rewrapped} data keys under master key {res.master_id}")
