"""Signal handlers during a capture (issue 52).

A Python signal handler runs in the main thread between two bytecodes of whatever runs
there: of init code, or of the capture's own dispatch. A write it makes to a parameter
or buffer is ordered against init code's by chance (and, arriving while the dispatch
handles a call, would pass as that call's own write): it cannot be replayed. For the
span of the capture each Python handler is wrapped: while it runs, any torch call on a
followed tensor is refused, naming the signal and the handler
(:meth:`..trace.store.RecordStore.refuse_in_signal`); a handler that touches none runs
as it is. Handlers installed by init code itself are not wrapped."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ..trace import RecordStore

__all__ = ["signal_handlers_watched"]

Handler = Callable[[int, FrameType | None], Any]


@contextmanager
def signal_handlers_watched(store: RecordStore) -> Iterator[None]:
    """Wraps each Python signal handler for the block (module docstring); only the main
    thread may install handlers, and only its code can be interrupted by them, so a
    capture in another thread leaves them as they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wrapped: dict[int, tuple[Handler, Handler]] = {}
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if callable(handler):
            watched = _watched(store, signum, handler)
            try:
                signal.signal(signum, watched)
            except (OSError, ValueError, RuntimeError):
                continue
            wrapped[signum] = (handler, watched)
    try:
        yield
    finally:
        for number, (handler, watched) in wrapped.items():
            if signal.getsignal(number) is watched:  # else init code installed its own
                signal.signal(number, handler)


def _watched(store: RecordStore, signum: int, handler: Handler) -> Handler:
    name = getattr(handler, "__qualname__", repr(handler))

    def watched(number: int, frame: FrameType | None) -> Any:
        before = store.in_signal
        store.in_signal = f"{signal.Signals(signum).name} (handler {name})"
        try:
            return handler(number, frame)
        finally:
            store.in_signal = before

    return watched
