"""Durations on the command line: ``30``, ``1.5s``, ``250ms``, ``10m``, ``12h``, ``400d``.

A plain number is seconds (as every time option of ``raftq`` always took);
a unit suffix says otherwise: ``ms``, ``s``, ``m`` (minutes), ``h``, ``d``
(days of 24 h), as Kafka's and systemd's time spans read. The value reaches
the command as float seconds; the server checks the limits (a message's
delay: 3653 days; a queue's: 365 days) and its error names them.
"""

from __future__ import annotations

import re
from typing import Any

import click

UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)


def parse_seconds(text: str) -> float:
    """Seconds of ``text`` (see the module doc); ValueError naming the forms."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: a number of seconds, or with a unit "
                         "(250ms, 30s, 10m, 12h, 400d)")  # fmt: skip
    number, unit = match.groups()
    return float(number) * UNITS_S[(unit or "s").lower()]


class Duration(click.ParamType[float]):
    """A click parameter of ``parse_seconds``; float seconds >= 0."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value < 0:
                self.fail(f"{value} is negative", param, ctx)
            return float(value)
        try:
            return parse_seconds(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SECONDS = Duration()
