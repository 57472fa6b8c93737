"""Whether a call releases the GIL, proven rather than timed: while the call runs in
this thread, another Python thread records the time in a loop. With the GIL held for
the call no bytecode could run anywhere, so no tick could fall inside it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def ticks_inside(call: Callable[[], object], window: tuple[float, float]) -> tuple[int, float]:
    """(the ticks of a pure-Python thread within ``window`` of ``call``'s span, as
    fractions of it; the span in seconds), the best of up to 3 attempts (a loaded
    machine may starve the ticker once); a test asks for 5 ticks or more."""
    inside, span = 0, 0.0
    for _attempt in range(3):
        ticks: list[float] = []
        stop = threading.Event()

        def ticker(ticks: list[float] = ticks, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                ticks.append(time.perf_counter())
                sum(range(200))  # a little pure-Python work between ticks

        thread = threading.Thread(target=ticker)
        thread.start()
        time.sleep(0.02)
        start = time.perf_counter()
        call()
        end = time.perf_counter()
        stop.set()
        thread.join()
        span = end - start
        low, high = start + window[0] * span, start + window[1] * span
        inside = sum(1 for t in ticks if low < t < high)
        if inside >= 5:
            break
    return inside, span
