"""Sections of shardinit that one thread holds at a time (a capture, a patch of a
library's module attributes): the holding thread entering again is refused at once with a
clear error, where a plain lock would deadlock (init code that calls ``capture_init``, a
nested ``deferred_init()``). Another thread either waits its turn or, for a section
that says so (``wait=False``: a capture, whose init code may start a thread that
captures and join it, which waiting would deadlock), is refused at once too."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ..errors import ShardInitError

__all__ = ["ThreadExclusive"]

#: Per thread: the names of the sections it holds, innermost last.
_HELD = threading.local()


class ThreadExclusive:
    """A process-wide section held by one thread at a time.

    Args:
        name: what the caller entered, for messages (``"capture_init"``).
        hint: what to do instead of nesting, appended to the refusal.
        clashes_with: names of other sections this one may not run inside in the same
            thread.
        reentrant: whether this thread may enter it again while it holds it (otherwise
            that is refused too).
        wait: whether another thread waits while one holds it (otherwise it is refused
            at once, naming the holder).
    """

    def __init__(
        self, name: str, hint: str, clashes_with: tuple[str, ...] = (), reentrant: bool = False,
        wait: bool = True,
    ) -> None:  # fmt: skip
        self.name = name
        self._wait = wait
        self._holder: str | None = None
        self._hint = hint
        self._clashes = set(clashes_with) if reentrant else {name, *clashes_with}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Holds the section for the ``with`` block.

        Raises:
            ShardInitError: this thread already holds this section (not reentrant), or
                one it clashes with, or (``wait=False``) another thread holds it; raised
                before waiting, so nothing is left locked.
        """
        held: list[str] = _HELD.__dict__.setdefault("names", [])
        clash = next((name for name in reversed(held) if name in self._clashes), None)
        if clash is not None:
            raise ShardInitError(
                f"{self.name} called while {clash} is already running in this thread "
                f"(nested): {self._hint}"
            )
        # Entered again by its holder (reentrant): the lock is this thread's already.
        lock: contextlib.AbstractContextManager[object] = (
            contextlib.nullcontext() if self.name in held else self._lock
        )
        if self.name not in held and not self._wait:
            if not self._lock.acquire(blocking=False):
                raise ShardInitError(
                    f"{self.name} called while {self.name} is already running in thread "
                    f"{self._holder!r}: one capture runs at a time in a process (waiting "
                    "for it could deadlock: init code that starts a capture in another "
                    "thread and joins it); run the captures one after another"
                )
            lock = _Acquired(self._lock)
        with lock:
            outer, self._holder = self._holder, threading.current_thread().name
            held.append(self.name)
            try:
                yield
            finally:
                held.pop()
                self._holder = outer


class _Acquired(contextlib.AbstractContextManager[object]):
    """A lock this thread acquired already, released at the end of the ``with`` block."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
