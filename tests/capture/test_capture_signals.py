"""A Python signal handler that runs during the capture (issue 52): its write to a
parameter is refused, naming the signal and the handler, however the signal lands (in
init code, or while the capture's dispatch handles a call); a handler that touches no
followed tensor runs as it is; the handlers are the user's again after."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn

import shardinit

SEED = 52

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread(),
    reason="Python runs signal handlers in the main thread only, and SIGUSR1 is POSIX-only "
    "(absent on Windows): the handler under test cannot be delivered there",
)


@pytest.fixture
def handler_slot() -> Iterator[list[Callable[[int, object], None]]]:
    """The SIGUSR1 handler the test installs (restored after)."""
    slot: list[Callable[[int, object], None]] = []
    before = signal.getsignal(signal.SIGUSR1)
    signal.signal(signal.SIGUSR1, lambda signum, frame: slot[0](signum, frame))
    yield slot
    signal.signal(signal.SIGUSR1, before)


def _init(lin: nn.Linear) -> None:
    lin.weight.data.fill_(0.5)
    os.kill(os.getpid(), signal.SIGUSR1)  # delivered at the next bytecode, in init code
    lin.bias.data.zero_()


def test_a_handlers_write_is_refused(handler_slot: list[Callable[[int, object], None]]) -> None:
    eager = nn.Linear(4, 6)
    handler_slot.append(lambda *_: eager.weight.data.fill_(2.0))
    with torch.no_grad():
        _init(eager)
    assert torch.equal(eager.weight.detach(), torch.full((6, 4), 2.0))  # eager: written

    with torch.device("meta"):
        lin = nn.Linear(4, 6)
    handler_slot[0] = lambda *_: lin.weight.data.fill_(2.0)
    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"handler of SIGUSR1 \(handler"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: _init(lin))


def test_a_handler_touching_no_tensor_runs(
    handler_slot: list[Callable[[int, object], None]],
) -> None:
    calls: list[int] = []
    handler_slot.append(lambda signum, _: calls.append(signum))
    installed = signal.getsignal(signal.SIGUSR1)
    with torch.device("meta"):
        lin = nn.Linear(4, 6)
    shardinit.materialize(lin, seed=SEED, init_fn=lambda: _init(lin))
    assert calls == [signal.SIGUSR1]
    assert torch.equal(lin.weight.detach(), torch.full((6, 4), 0.5))
    assert signal.getsignal(signal.SIGUSR1) is installed  # the user's handler again
