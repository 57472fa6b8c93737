"""Tensor-level state that init code (or a constructor) gives a parameter or buffer
(issue 52), against eager torch: each kept as eager keeps it, or refused.

- hooks (``register_hook``, ``register_post_accumulate_grad_hook``) on a buffer:
  refused (the stand-in is not the tensor materialize fills); on a temporary,
  registered (on a parameter: replayed, test_capture_grad_hooks.py);
- a ``nn.Parameter`` subclass keeps its class;
- Python attributes init code sets on a buffer stay on it (a parameter's did already);
- ``p.data = t`` of a dense ``t`` that is not row-major: the parameter takes ``t``'s
  strides, as in eager; strides with gaps are refused; ``view.data = t`` of a view
  rebinds the view alone in eager (the parameter keeps its values): refused;
- two parameters viewing one meta storage (eager shares their memory): refused;
- shardinit's own note of eager's layout (``_eager_layout``) never reaches the user's
  tensor.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

SEED = 52


def _both(
    make: Callable[[], nn.Module], code: Callable[[nn.Module], object]
) -> tuple[nn.Module, nn.Module]:
    """(materialized, eager): ``make()`` on meta with ``code`` as init_fn, and eager."""
    eager = make()
    with torch.no_grad():
        code(eager)
    with torch.device("meta"):
        model = make()
    shardinit.materialize(model, seed=SEED, init_fn=lambda: code(model))
    return model, eager


class _ScaledLinear(nn.Linear):
    """A Linear with a buffer that requires grad (a hook on it registers in eager)."""

    def __init__(self) -> None:
        super().__init__(4, 6)
        self.register_buffer("scale", torch.ones(6).requires_grad_())


@pytest.mark.parametrize(
    ("code", "op"),
    [
        (lambda m: m.scale.register_hook(lambda grad: grad * 2), "register_hook"),
        (
            lambda m: m.scale.register_post_accumulate_grad_hook(lambda p: None),
            "register_post_accumulate_grad_hook",
        ),
    ],
    ids=["hook", "post_accumulate_grad_hook"],
)
def test_a_hook_on_a_buffer_is_refused(code: Callable[[nn.Module], object], op: str) -> None:
    # Gradient hooks on parameters are replayed (test_capture_grad_hooks.py); a buffer
    # does not take its stand-in's hooks, so eager's hook would be lost: refused.
    eager = _ScaledLinear()
    code(eager)
    assert eager.scale._backward_hooks or eager.scale._post_accumulate_grad_hooks
    with torch.device("meta"):
        lin = _ScaledLinear()
    with pytest.raises(
        shardinit.UnsupportedInitOpError, match=rf"'scale': {op} at .*after materialize"
    ):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))


def test_a_hook_on_a_temporary_is_registered() -> None:
    def code(m: nn.Module) -> None:
        temp = torch.arange(24.0).view(6, 4).requires_grad_()
        temp.register_hook(lambda grad: grad)
        m.weight.data.copy_(temp.detach())

    model, eager = _both(lambda: nn.Linear(4, 6), code)
    assert torch.equal(model.weight.detach(), eager.weight.detach())


class _Tagged(nn.Parameter):
    """A Parameter subclass (as libraries mark sharded or quantized parameters)."""


def _tagged_linear() -> nn.Linear:
    lin = nn.Linear(4, 6)
    lin.weight = _Tagged(lin.weight.detach())
    lin.weight.kind = "tagged"
    return lin


@pytest.mark.parametrize("init_fn", [True, False], ids=["init_fn", "defaults"])
def test_a_parameter_subclass_keeps_its_class(init_fn: bool) -> None:
    with torch.device("meta"):
        lin = _tagged_linear()
    code = (lambda: lin.weight.data.fill_(0.5)) if init_fn else None
    shardinit.materialize(lin, seed=SEED, init_fn=code)
    eager = _tagged_linear()
    assert type(lin.weight) is type(eager.weight) is _Tagged
    assert lin.weight.kind == "tagged" and isinstance(lin.weight, nn.Parameter)
    if init_fn:
        assert torch.equal(lin.weight.detach(), torch.full((6, 4), 0.5))


class _WithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.zeros(3))
        self.weight = nn.Parameter(torch.zeros(2))


def test_attributes_init_code_sets_on_a_buffer_stay() -> None:
    def code(m: nn.Module) -> None:
        m.table.fill_(2.0)
        m.table.tag = "kept"
        m.weight.data.zero_()

    model, eager = _both(_WithBuffer, code)
    assert model.table.tag == eager.table.tag == "kept"
    assert torch.equal(model.table, eager.table)


@pytest.mark.parametrize(
    "value",
    [
        lambda: torch.arange(24.0).view(4, 6).t(),
        lambda: torch.arange(24.0).view(2, 6, 2).permute(1, 0, 2).reshape(6, 4).t().t(),
    ],
    ids=["transposed", "dense_row_major_after_all"],
)
def test_data_set_to_a_strided_tensor_takes_its_strides(value: Callable[[], torch.Tensor]) -> None:
    def code(m: nn.Module) -> None:
        m.weight.data = value()

    model, eager = _both(lambda: nn.Linear(4, 6), code)
    assert model.weight.stride() == eager.weight.stride()
    assert torch.equal(model.weight.detach(), eager.weight.detach())


def test_data_set_to_a_tensor_with_gaps_is_refused() -> None:
    eager = nn.Linear(4, 6)
    eager.weight.data = torch.zeros(6, 8)[:, ::2]
    assert eager.weight.stride() == (8, 2)
    with torch.device("meta"):
        lin = nn.Linear(4, 6)
    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"strides \(8, 2\), with gaps"):
        shardinit.materialize(
            lin, seed=SEED, init_fn=lambda: setattr(lin.weight, "data", torch.zeros(6, 8)[:, ::2])
        )


def test_data_set_on_a_view_is_refused() -> None:
    def code(m: nn.Module) -> None:
        m.weight.data.fill_(0.25)
        row = m.weight[0]
        row.data = torch.ones(4)  # eager: the row is another tensor now; weight unchanged
        row.mul_(3.0)

    eager = nn.Linear(4, 6)
    with torch.no_grad():
        code(eager)
    assert torch.equal(eager.weight.detach(), torch.full((6, 4), 0.25))
    with torch.device("meta"):
        lin = nn.Linear(4, 6)
    with pytest.raises(shardinit.UnsupportedInitOpError, match="it is set on a view"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: code(lin))


class _TwoViews(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        base = torch.zeros(8)
        self.first = nn.Parameter(base[:4])
        self.second = nn.Parameter(base[4:])


def test_parameters_viewing_one_storage_are_refused() -> None:
    eager = _TwoViews()
    assert eager.first.untyped_storage().data_ptr() == eager.second.untyped_storage().data_ptr()
    with torch.device("meta"):
        model = _TwoViews()
    with pytest.raises(shardinit.ShardInitError, match="'first' and 'second' are views of one"):
        shardinit.materialize(model, seed=SEED, rules=[("*", shardinit.init.zeros())])


def test_no_note_of_shardinits_stays_on_a_users_tensor() -> None:
    # A channels_last weight's stand-in carries eager's layout during the capture; an
    # attribute init code sets is given to the parameter, shardinit's note is not.
    with torch.device("meta"):
        conv = nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)

    def code() -> None:
        conv.weight.tag = 1
        conv.bias.data = torch.arange(4.0)
        nn.init.zeros_(conv.weight)

    shardinit.materialize(conv, seed=SEED, init_fn=code)
    for tensor in (conv.weight, conv.bias):
        assert not [k for k in vars(tensor) if "eager_layout" in k], vars(tensor)
    assert conv.weight.tag == 1
    assert conv.weight.stride() == (27, 1, 9, 3)  # channels_last, as eager
