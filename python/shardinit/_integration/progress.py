"""A one-line progress bar on stderr: bytes done of the total, rate, ETA."""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: Redraws at most this often (seconds): a bar must not slow the work it shows.
REDRAW_S = 0.25


def _human(nbytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} B"


def _clock(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBar:
    """``label  1.20 GiB / 4.00 GiB  30%  310.25 MiB/s  ETA 0:00:09``, redrawn in place.

    Args:
        label: what is being written.
        total: the bytes to write.
        stream: where it is drawn (default stderr).
    """

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.stream = sys.stderr if stream is None else stream
        self.started = time.monotonic()
        self.drawn = -REDRAW_S  # the first update draws
        self.done = 0

    def update(self, done: int) -> None:
        """Shows ``done`` bytes (redrawn at most every :data:`REDRAW_S`)."""
        self.done = done
        now = time.monotonic()
        if now - self.drawn >= REDRAW_S:
            self.drawn = now
            self.stream.write("\r" + self.line(now - self.started))
            self.stream.flush()

    def advance(self, nbytes: int) -> None:
        """Adds ``nbytes`` to what is shown."""
        self.update(self.done + nbytes)

    def line(self, elapsed: float) -> str:
        """The bar's text after ``elapsed`` seconds."""
        rate = self.done / elapsed if elapsed > 0 else 0.0
        share = 100 * self.done // self.total if self.total else 100
        eta = _clock((self.total - self.done) / rate) if rate > 0 else "?"
        return (
            f"{self.label}  {_human(self.done)} / {_human(self.total)}  {share}%  "
            f"{_human(rate)}/s  ETA {eta}   "
        )

    def close(self) -> None:
        """Draws the last state and ends the line."""
        self.stream.write("\r" + self.line(time.monotonic() - self.started) + "\n")
        self.stream.flush()
