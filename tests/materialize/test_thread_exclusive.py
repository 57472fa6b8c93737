"""A section held by one thread at a time (shardinit._integration.exclusive): another
thread waits its turn, or for a section with ``wait=False`` is refused at once, naming
the holder. Threads only, each join bounded."""

from __future__ import annotations

import threading

import pytest

from shardinit._integration.exclusive import ThreadExclusive
from shardinit.errors import ShardInitError


def _second_thread_outcome(section: ThreadExclusive) -> tuple[list[str], bool]:
    """What a second thread got entering ``section`` while the thread ``holder`` held it,
    and whether it was still waiting a moment later."""
    entered, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with section.hold():
            entered.set()
            leave.wait(10)

    outcome: list[str] = []

    def enter() -> None:
        try:
            with section.hold():
                outcome.append("entered")
        except ShardInitError as error:
            outcome.append(str(error))

    holder = threading.Thread(target=hold, name="holder")
    holder.start()
    assert entered.wait(10)
    second = threading.Thread(target=enter)
    second.start()
    second.join(timeout=0.2)
    waiting = second.is_alive()
    leave.set()
    holder.join(10)
    second.join(10)
    return outcome, waiting


@pytest.mark.parametrize("wait", [True, False])
def test_another_thread_waits_or_is_refused_naming_the_holder(wait: bool) -> None:
    outcome, waiting = _second_thread_outcome(ThreadExclusive("s", "one at a time", wait=wait))
    if wait:
        assert (outcome, waiting) == (["entered"], True)
    else:
        assert len(outcome) == 1 and not waiting
        assert "s called while s is already running in thread 'holder'" in outcome[0]
