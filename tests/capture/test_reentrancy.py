"""Reentrancy of the process-wide sections: a capture nested in a capture (init code that
calls ``capture_init`` or ``materialize(..., init_fn=...)``) or run inside
``record_constructors()`` is refused at once, and the section is usable afterwards (it
used to deadlock, and every later capture in the process with it); a plain
``materialize`` inside init code and nested ``record_constructors()`` work; another
thread's capture waits its turn instead of failing."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init

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


def test_a_capture_in_another_thread_waits_for_the_running_one() -> None:
    """Thread B's capture starts while thread A's init code holds the capture: B waits
    (no nesting error, its init code not started, B still running after a second), then
    both get their own values, B's init code having run after A's ended.

    Shown to fail (2026-12-04) with the lock of ``ThreadExclusive.hold`` replaced by
    ``contextlib.nullcontext()``: B's init code runs while A holds the capture; the old
    version of this test (no errors after ``b.join(0.5)``) passed under that breakage."""
    entered, release, b_entered = threading.Event(), threading.Event(), threading.Event()
    first, second = _meta_linear(), _meta_linear()
    errors: list[BaseException] = []
    order: list[str] = []

    def holding() -> None:
        entered.set()
        assert release.wait(60)
        nn.init.constant_(first.weight, 1.5)
        order.append("A ends")

    def waiting() -> None:
        b_entered.set()
        order.append("B starts")
        nn.init.ones_(second.weight)

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as error:  # reported below
            errors.append(error)

    rules = {"bias": init.zeros()}
    a = threading.Thread(
        target=run, args=(lambda: shardinit.materialize(first, seed=SEED, init_fn=holding),)
    )
    a.start()
    assert entered.wait(60)
    b = threading.Thread(
        target=run,
        args=(lambda: shardinit.materialize(second, seed=SEED, rules=rules, init_fn=waiting),),
    )
    b.start()
    # B's init code must not start while A holds the capture (a second is ample for an
    # unlocked B to reach it: the modules are imported and A's capture is set up).
    assert not b_entered.wait(1.0), "B's init code ran while A held the capture"
    assert b.is_alive() and not errors, errors  # B waits, and has not failed
    assert second.weight.is_meta
    release.set()
    a.join(60)
    b.join(60)
    assert not a.is_alive() and not b.is_alive()
    assert not errors, errors
    assert order == ["A ends", "B starts"]
    assert torch.equal(first.weight.detach(), torch.full((3, 4), 1.5))
    assert torch.equal(second.weight.detach(), torch.ones(3, 4))
    assert torch.equal(second.bias.detach(), torch.zeros(3))
