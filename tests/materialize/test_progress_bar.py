"""The progress bar's text and its redraws (shardinit._integration.progress), on a fake
clock: no sleeping, no process."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from shardinit._integration import progress
from shardinit._integration.progress import ProgressBar, _clock

MIB = 2**20


def test_clock_is_hours_minutes_seconds_rounded() -> None:
    assert _clock(3661) == "1:01:01"
    assert _clock(3599.4) == "0:59:59"
    assert _clock(59.5) == "0:01:00"
    assert _clock(7322) == "2:02:02"


def test_line_is_the_bytes_share_rate_and_eta() -> None:
    bar = ProgressBar("w", 4 * MIB, stream=io.StringIO())
    bar.done = MIB
    assert bar.line(1.0) == "w  1.00 MiB / 4.00 MiB  25%  1.00 MiB/s  ETA 0:00:03   "
    # Under a second: the rate is still the bytes over the time.
    assert bar.line(0.5) == "w  1.00 MiB / 4.00 MiB  25%  2.00 MiB/s  ETA 0:00:02   "
    bar.done = 0
    assert bar.line(1.0) == "w  0 B / 4.00 MiB  0%  0 B/s  ETA ?   "
    assert bar.line(0.0) == "w  0 B / 4.00 MiB  0%  0 B/s  ETA ?   "


def test_updates_redraw_at_most_every_redraw_s_with_the_time_since_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=lambda: now[0]))
    stream = io.StringIO()
    bar = ProgressBar("w", 4 * MIB, stream=stream)
    now[0] = 101.0
    bar.update(MIB)  # the first update draws
    first = "\r" + bar.line(1.0)
    assert stream.getvalue() == first
    now[0] = 101.0 + progress.REDRAW_S / 2
    bar.update(2 * MIB)  # too soon: not drawn
    assert stream.getvalue() == first
    now[0] = 101.0 + progress.REDRAW_S
    bar.advance(MIB)
    assert bar.done == 3 * MIB
    assert stream.getvalue().endswith("\r" + bar.line(1.0 + progress.REDRAW_S))
    assert stream.getvalue().count("\r") == 2
