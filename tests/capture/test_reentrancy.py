"""Reentrancy of the process-wide sections: a capture nested in a capture (init code that
calls ``capture_init`` or ``materialize(..., init_fn=...)``) or run inside
``record_constructors()`` is refused at once, and the section is usable afterwards (it
used to deadlock, and every later capture in the process with it); a plain
``materialize`` inside init code and nested ``record_constructors()`` work; another
thread's capture started while one runs is refused at once too (waiting deadlocked init
code that captures in a thread and joins it)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

SEED = 5
NESTED = r"^capture_init called while capture_init is already running in this thread \(nested\)"


def _without_deadlock(work: Callable[[], object]) -> BaseException | None:
    """Runs ``work`` on a daemon thread and returns what it raised; fails instead of
    hanging the run if it never returns (the deadlock this file guards against)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            work()
        except BaseException as error:  # returned to the test
            raised[0] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(300)
    assert not thread.is_alive(), "no result after 300 s: deadlocked"
    return raised[0]


def _meta_linear() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(4, 3)


def _reference() -> nn.Linear:
    """What ``materialize(meta Linear(4, 3), seed=SEED)`` gives (the torch.nn default)."""
    model = _meta_linear()
    shardinit.materialize(model, seed=SEED)
    return model


def _later_capture_works() -> None:
    """The capture section is free again: a capture afterwards gives its values."""
    model = _meta_linear()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: nn.init.constant_(model.weight, 2.5))
    assert torch.equal(model.weight.detach(), torch.full((3, 4), 2.5))


def _nested_materialize(sub: nn.Module) -> Callable[[], object]:
    return lambda: shardinit.materialize(sub, seed=SEED, init_fn=lambda: nn.init.zeros_(sub.weight))


@pytest.mark.parametrize(
    "inner",
    [
        pytest.param(_nested_materialize, id="materialize-with-init_fn"),
        pytest.param(
            lambda sub: lambda: shardinit.capture_init(sub, lambda: None), id="capture_init"
        ),
    ],
)
def test_a_capture_inside_init_code_is_refused_and_the_lock_stays_usable(
    inner: Callable[[nn.Module], Callable[[], object]],
) -> None:
    model, sub = _meta_linear(), _meta_linear()
    nested = _without_deadlock(lambda: shardinit.materialize(model, seed=SEED, init_fn=inner(sub)))
    assert isinstance(nested, shardinit.ShardInitError)
    assert re.match(NESTED + r": init code may not capture", str(nested)), nested
    assert model.weight.is_meta and sub.weight.is_meta  # refused before anything was filled
    assert _without_deadlock(_later_capture_works) is None


def test_record_constructors_inside_init_code_is_refused() -> None:
    model = _meta_linear()

    def init_fn() -> None:
        with shardinit.record_constructors():
            pass

    with pytest.raises(
        shardinit.ShardInitError,
        match=r"^record_constructors\(\) called while capture_init is already running in this "
        r"thread \(nested\): build the model inside record_constructors\(\), outside init code",
    ):
        shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    _later_capture_works()
    with torch.device("meta"), shardinit.record_constructors():  # and free again
        scaled = _Scaled(3.0)
    shardinit.materialize(scaled, seed=SEED)
    assert torch.equal(scaled.scale.detach(), torch.full((3,), 3.0))


def test_a_capture_inside_record_constructors_is_refused() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = nn.Linear(4, 3)
        with pytest.raises(
            shardinit.ShardInitError,
            match=r"^capture_init called while record_constructors\(\) is already running in "
            r"this thread \(nested\).*leave record_constructors\(\) before capturing$",
        ):
            shardinit.materialize(model, seed=SEED, init_fn=lambda: nn.init.ones_(model.weight))
    _later_capture_works()


class _Scaled(nn.Module):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3) * value)


def test_nested_record_constructors_record_each_level() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        outer = _Scaled(2.0)
        with shardinit.record_constructors():
            inner = _Scaled(3.0)
        after = _Scaled(4.0)
    for model, value in ((outer, 2.0), (inner, 3.0), (after, 4.0)):
        shardinit.materialize(model, seed=SEED)
        assert torch.equal(model.scale.detach(), torch.full((3,), value))


def test_a_plain_materialize_inside_init_code_works() -> None:
    """materialize without init_fn captures nothing, so it may run inside init code: the
    inner model gets its values, the outer one its own (init_fn wrote none of it)."""
    model, sub = _meta_linear(), _meta_linear()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: shardinit.materialize(sub, seed=SEED))
    reference = _reference()
    for filled in (sub, model):
        assert torch.equal(filled.weight.detach(), reference.weight.detach())
        assert torch.equal(filled.bias.detach(), reference.bias.detach())


def test_a_capture_in_another_thread_is_refused_at_once() -> None:
    """Thread B's capture starts while thread A's init code holds the capture: B is
    refused at once with shardinit's error naming the running capture (waiting could
    deadlock, next test), its init code never run; A is not disturbed and gets its
    values, and a capture after A's works.

    Shown to fail (2026-12-05) with ``wait=False`` taken off the capture's section: B
    waits, and ``b.join(10)`` leaves it alive."""
    entered, release = threading.Event(), threading.Event()
    first, second, third = _meta_linear(), _meta_linear(), _meta_linear()
    errors: list[BaseException] = []
    ran: list[str] = []

    def holding() -> None:
        entered.set()
        assert release.wait(60)
        nn.init.constant_(first.weight, 1.5)

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as error:  # reported below
            errors.append(error)

    a = threading.Thread(
        target=run, args=(lambda: shardinit.materialize(first, seed=SEED, init_fn=holding),)
    )
    a.start()
    assert entered.wait(60)
    b = threading.Thread(
        target=run,
        args=(lambda: shardinit.materialize(second, seed=SEED, init_fn=lambda: ran.append("B")),),
    )
    b.start()
    b.join(10)
    assert not b.is_alive(), "B waited for A's capture"
    assert len(errors) == 1 and isinstance(errors[0], shardinit.ShardInitError), errors
    assert "already running in thread" in str(errors[0]), errors[0]
    assert ran == [] and second.weight.is_meta
    release.set()
    a.join(60)
    assert not a.is_alive() and len(errors) == 1, errors
    assert torch.equal(first.weight.detach(), torch.full((3, 4), 1.5))
    shardinit.materialize(third, seed=SEED, init_fn=lambda: nn.init.ones_(third.weight))
    assert torch.equal(third.weight.detach(), torch.ones(3, 4))


def test_init_code_that_captures_in_a_thread_and_joins_it_is_refused() -> None:
    """init_fn starts a capture in another thread and joins it: the inner capture is
    refused at once (it used to wait for the outer one forever), the outer one ends."""
    outer, inner = _meta_linear(), _meta_linear()
    raised: list[BaseException] = []

    def inner_capture() -> None:
        try:
            shardinit.materialize(inner, seed=SEED, init_fn=lambda: nn.init.ones_(inner.weight))
        except BaseException as error:  # checked below
            raised.append(error)

    def init_code() -> None:
        worker = threading.Thread(target=inner_capture)
        worker.start()
        worker.join(30)
        assert not worker.is_alive(), "the inner capture waited"
        nn.init.zeros_(outer.weight)

    error = _without_deadlock(lambda: shardinit.materialize(outer, seed=SEED, init_fn=init_code))
    assert error is None, error
    assert len(raised) == 1 and "already running in thread" in str(raised[0]), raised
    assert torch.equal(outer.weight.detach(), torch.zeros(3, 4))
    assert inner.weight.is_meta
