"""FakeClock: time as an input, moved by hand.

``core/`` never reads a clock: the leader stamps ``now_ms`` into each
command. A test drives it with a FakeClock, so a 400-day delay is checked in
microseconds: stamp commands with ``clock.now_ms()``, ``clock.advance(days=400)``,
stamp the next. ``sleep`` advances too, for code that takes a sleep function
(the SDK's ``Retrier``), and ``monotonic`` never goes back.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_MS = 86_400_000


@dataclass
class FakeClock:
    """Wall time (``now_ms``: milliseconds since the epoch, what commands
    carry) and a monotonic reading that starts at 0; both move only by
    ``advance``. Kept in whole milliseconds, so no float drift."""

    wall_ms: int = 1_800_000_000_000  # 2027-01-15, a fixed, realistic start
    mono_ms: int = 0

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic(self) -> float:
        return self.mono_ms / 1000

    __call__ = monotonic  # a ``clock=`` argument that wants a callable

    def advance(self, seconds: float = 0.0, *, ms: int = 0, days: float = 0.0) -> None:
        """Move both clocks on; the parts add up (``days=1, ms=-1``), the sum may not be < 0."""
        step = round(seconds * 1000) + ms + round(days * DAY_MS)
        if step < 0:
            raise ValueError("a FakeClock never goes back")
        self.wall_ms += step
        self.mono_ms += step

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))
