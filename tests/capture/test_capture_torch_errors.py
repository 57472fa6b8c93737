"""The capture's net on torch errors (issue 52): an error torch raises on the capture's
stand-ins becomes shardinit's refusal naming the tensor, the op and the line; an error of
shardinit's own code is never blamed on torch (an ``InternalError`` that says it is a
bug in shardinit), and a RecursionError is the capture's own depth limit, said so.
``resize_`` of a followed tensor to another shape is refused before it runs (it used to
reach a ``zip`` of the expression floor with the old shape, a raw ValueError)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit._integration.capture.dispatch import handlers
from shardinit._integration.capture.dispatch.mode import shardinits_own
from shardinit._program import index

SEED = 52
Code = Callable[[nn.Linear], object]


def _meta() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(4, 6)


def _raised(code: Callable[[], object]) -> BaseException:
    try:
        code()
    except Exception as error:
        return error
    raise AssertionError("no error")


def test_shardinits_own_errors_are_told_from_torchs() -> None:
    # A builtin's error in the expression floor (zip's strict check) is shardinit's.
    assert shardinits_own(_raised(lambda: index._in_box(((0, 1),), (1, 2))))
    # torch's C++ kernel error surfaces in the calling frame, here the test's: torch's.
    meta = torch.empty(2, device="meta")
    assert not shardinits_own(_raised(lambda: meta.tolist()))
    # An error of torch's Python (a meta kernel, a reference) is torch's.
    assert not shardinits_own(_raised(lambda: torch.empty(2, 3).view(-1, -1)))


def test_an_error_of_shardinits_own_code_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fault planted in the floor, reached while routing resize_: not torch's.
    monkeypatch.setattr(handlers, "resizes_to_itself", lambda *_: index._in_box(((0, 1),), (1, 2)))
    lin = _meta()
    with pytest.raises(shardinit.InternalError, match=r"zip\(\).*a bug in shardinit") as raised:
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: lin.weight.data.resize_(6, 4))
    assert "test_capture_torch_errors.py" in str(raised.value)  # the init code's line
    assert not isinstance(raised.value, shardinit.UnsupportedInitOpError)


def test_a_recursion_error_is_the_captures_own_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    def recurse(*_: object) -> bool:
        return recurse()

    monkeypatch.setattr(handlers, "resizes_to_itself", recurse)
    lin = _meta()
    with pytest.raises(shardinit.UnsupportedInitOpError, match="a limit of shardinit's capture"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: lin.weight.data.resize_(6, 4))


def test_a_torch_error_on_stand_ins_is_still_refused() -> None:
    lin = _meta()
    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"RuntimeError.*was raised"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: lin.weight.data.add_(torch.ones(5)))


@pytest.mark.parametrize(
    "code",
    [
        lambda lin: lin.weight.data.copy_(torch.arange(24.0).clone().resize_(6, 4)),
        lambda lin: lin.weight.data.copy_(torch.arange(48.0).clone().resize_(6, 4)),
        lambda lin: lin.weight.data.copy_(torch.randn(12).resize_(6, 4)),
        lambda lin: lin.weight.data.copy_(torch.randn(4, 6).clone().resize_(6, 4)),
        lambda lin: lin.weight.data.copy_(lin.weight.clone().resize_(24).view(6, 4)),
    ],
    ids=["clone_same_numel", "clone_smaller", "random_bigger", "random_clone", "param_clone"],
)
def test_resize_of_a_followed_tensor_to_another_shape_is_refused(code: Code) -> None:
    lin = _meta()
    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"resize_ at .*changes the shape"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))


def test_resize_to_its_own_shape_stays_the_identity() -> None:
    def code(lin: nn.Linear) -> None:
        lin.weight.data.copy_(torch.arange(24.0).view(6, 4).clone().resize_(6, 4))

    lin = _meta()
    shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))
    eager = nn.Linear(4, 6)
    with torch.no_grad():
        code(eager)
    assert torch.equal(lin.weight.detach(), eager.weight.detach())


@pytest.mark.parametrize(
    "code",
    [
        lambda lin: lin.weight.data.add_(torch.ones(5)),
        lambda lin: lin.weight.data.add_(torch.ones(2, 6, 4)),
        lambda lin: lin.weight.data.mul_(torch.arange(5.0)),
        lambda lin: lin.weight.data.copy_(torch.ones(5)),
        lambda lin: lin.weight.data.copy_(torch.ones(2, 6, 4)),
        lambda lin: lin.weight.data.__setitem__(slice(0, 2), torch.ones(5)),
        lambda lin: lin.weight.data.addcmul_(torch.ones(5), torch.ones(4)),
        lambda lin: lin.weight.data.clamp_(min=torch.zeros(5)),
        lambda lin: lin.weight.data.lerp_(torch.ones(5), 0.5),
        lambda lin: lin.weight.data.copy_(torch.zeros(6, 4).add_(torch.ones(5))),
    ],
    ids=[
        "add_", "add_larger", "mul_", "copy_", "copy_larger", "setitem", "addcmul_",
        "clamp_", "lerp_", "temporary_add_",
    ],
)  # fmt: skip
def test_an_operand_that_does_not_broadcast_is_refused_as_eager_raises(code: Code) -> None:
    # Eager torch raises; the capture used to read the operand's first elements silently.
    with pytest.raises(RuntimeError), torch.no_grad():
        code(nn.Linear(4, 6))
    lin = _meta()
    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"RuntimeError: .*size"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))
