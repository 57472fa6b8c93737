"""Python's cyclic garbage collector, paused for the span of a materialize or a capture.

Both allocate several small objects per parameter (stand-ins, tracks, records, targets)
that live until the call returns and form no reference cycles, so reference counting
frees them (tests/capture/test_capture_garbage.py checks that none is left for the
collector). With the collector running, those allocations alone trigger its
collections, and every full one visits every object of the process, model included:
the cost per parameter then grows with the model (issue 28). Paused, the collector finds
after the call what it would have found before it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector for the ``with`` block; resumes it after
    unless it was off before (a caller's own ``gc.disable()`` stands)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
