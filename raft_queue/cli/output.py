"""How raftq prints: rich tables for people, ``--json`` for scripts.

Contract for every command: with ``--json`` stdout holds exactly one JSON
document (the SDK dataclasses as objects); without it, tables. Errors and
warnings go to stderr. Cell text is never parsed as rich markup, so message
bodies such as ``[red]`` print as they are.

JSON encodes ``bytes`` as a string when they are valid UTF-8, else as
``{"base64": "..."}``: readable in the common case, lossless always.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

F = TypeVar("F", bound=Callable[..., Any])

BODY_PREVIEW_CHARS = 120
PIPE_WIDTH = 1000  # tables do not expand, so this only lifts the 80-column cap


def json_option(func: F) -> F:
    """The ``--json`` flag every command takes (passed as ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")(
        func
    )


def to_jsonable(value: Any) -> Any:
    """Dataclasses, lists, dicts and bytes -> plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    click.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False))


def print_json_line(value: Any) -> None:
    """One JSON document on one line (streams: ``raftq tail``), flushed at once."""
    click.echo(json.dumps(to_jsonable(value), ensure_ascii=False, separators=(",", ":")))
    sys.stdout.flush()


def _console(stderr: bool = False) -> Console:
    """A console on the current sys.stdout/stderr (click's test runner swaps them).

    Piped output is not cut to 80 columns: scripts and logs get whole values.
    """
    file = sys.stderr if stderr else sys.stdout
    width = None if file.isatty() else PIPE_WIDTH
    return Console(file=file, soft_wrap=False, width=width)


def _cell(value: Any) -> Text:
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if value is None:
        return Text("-")
    return Text(str(value))


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None
) -> None:
    """A table with one header row; cells are shown as plain text."""
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")  # wrap long values, never elide them
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    _console().print(table)


Column = tuple[str, Callable[[Any], Any]]


def print_objects(
    columns: Sequence[Column], items: Iterable[Any], title: str | None = None
) -> None:
    """A table with one row per item; each column is (header, item -> value)."""
    rows = ([value(item) for _, value in columns] for item in items)
    print_table([header for header, _ in columns], rows, title=title)


def print_fields(pairs: Iterable[tuple[str, Any]], title: str | None = None) -> None:
    """A two-column (field, value) table, for describing one object."""
    print_table(("field", "value"), pairs, title=title)


def print_line(text: str, *, stderr: bool = False) -> None:
    """One plain line (no markup), e.g. a summary under a table or a warning."""
    _console(stderr).print(Text(text))


def body_preview(body: bytes) -> str:
    """A message body for a table cell: text if it decodes, escaped if not, shortened."""
    text = body.decode("utf-8", errors="backslashreplace")
    if len(text) > BODY_PREVIEW_CHARS:
        return text[: BODY_PREVIEW_CHARS - 1] + "…"
    return text


def timestamp(ms: int) -> str:
    """Milliseconds since the epoch -> ISO 8601 UTC (second precision); 0 -> "-"."""
    if not ms:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
