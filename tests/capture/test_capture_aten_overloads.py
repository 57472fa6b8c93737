"""aten overloads, ``torch._foreach_*`` and dropout in init code (issue 37, "Refused, but
ordinary"): ``torch.ops.aten.fill_.Scalar(w, 1.0)`` or ``mul_.Scalar`` were refused as
reads, since their names were not the routes' names. An overload is its packet's op
(the same arguments, the same meaning); a ``_foreach_<op>`` is ``<op>`` on each tensor;
dropout that drops nothing is the identity. Dropout that drops draws a mask from torch's
generator: refused, naming the parameter, the dropout and the line (not as a read)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shardinit

aten = torch.ops.aten
Init = Callable[[nn.Linear], object]


def _materialized(init: Init | None) -> nn.Linear:
    with torch.device("meta"):
        model = nn.Linear(16, 32)
    shardinit.materialize(model, seed=0, init_fn=None if init is None else lambda: init(model))
    return model


def _eager(init: Init) -> nn.Linear:
    model = nn.Linear(16, 32)
    with torch.no_grad():
        init(model)
    return model


def _fill_then(step: Init) -> Init:
    def init(m: nn.Linear) -> None:
        with torch.no_grad():
            m.weight.copy_(torch.arange(512.0).reshape(32, 16) * 0.25 - 7)
            m.bias.fill_(0.5)
            step(m)

    return init


# Deterministic init code: the model is eager's, bit for bit.
DETERMINISTIC: dict[str, Init] = {
    name: _fill_then(step)
    for name, step in {
        "fill_Scalar": lambda m: aten.fill_.Scalar(m.weight, 1.0),
        "fill_Tensor": lambda m: aten.fill_.Tensor(m.weight, torch.tensor(0.25)),
        "zero_default": lambda m: aten.zero_.default(m.bias),
        "foreach_zero_": lambda m: torch._foreach_zero_([m.weight, m.bias]),
        "add_Tensor": lambda m: aten.add_.Tensor(m.weight, torch.ones(32, 16), alpha=2),
        "mul_Scalar": lambda m: aten.mul_.Scalar(m.weight, 3.0),
        # An out= overload: the result computed by its packet, then written to out.
        "add_out": lambda m: aten.add.out(torch.ones(32, 16), m.weight, alpha=2, out=m.weight),
        "mul_out": lambda m: aten.mul.out(m.bias, torch.full((32,), 3.0), out=m.bias),
        "copy_default": lambda m: aten.copy_.default(m.weight, torch.full((32, 16), 2.0)),
        "foreach_mul_scalars": lambda m: torch._foreach_mul_([m.weight, m.bias], [2.0, -3.0]),
        "foreach_add_tensors": lambda m: torch._foreach_add_(
            [m.weight, m.bias], [torch.ones(32, 16), torch.ones(32)]
        ),
        "foreach_copy_": lambda m: torch._foreach_copy_(
            [m.weight, m.bias], [torch.full((32, 16), 1.5), torch.arange(32.0)]
        ),
        "dropout_not_training_inplace": lambda m: F.dropout(
            m.weight, 0.5, training=False, inplace=True
        ),
        "dropout_p0_inplace": lambda m: F.dropout(m.weight, 0.0, True, True),
        "dropout_identity_copied": lambda m: m.weight.copy_(
            F.dropout(torch.ones(32, 16), 0.5, training=False) * 3
        ),
    }.items()
}


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_deterministic_aten_foreach_and_dropout_are_eagers(name: str) -> None:
    init = DETERMINISTIC[name]
    model, eager = _materialized(init), _eager(init)
    assert torch.equal(model.weight, eager.weight)
    assert torch.equal(model.bias, eager.bias)


# On the stream's values: the op applied to what the same code gives without it.
ON_DEFAULTS: dict[str, tuple[Init, Callable[[torch.Tensor, torch.Tensor], object]]] = {
    "mul_Scalar": (
        lambda m: aten.mul_.Scalar(m.weight, 2.0),
        lambda w, b: w.mul_(2.0),
    ),
    "foreach_mul_": (
        lambda m: torch._foreach_mul_([m.weight, m.bias], 2.0),
        lambda w, b: (w.mul_(2.0), b.mul_(2.0)),
    ),
    "foreach_div_list": (
        lambda m: torch._foreach_div_((m.weight, m.bias), [3.0, 7.0]),
        lambda w, b: (w.div_(3.0), b.div_(7.0)),
    ),
    "dropout_training_false": (
        lambda m: F.dropout(m.weight, 0.3, training=False, inplace=True),
        lambda w, b: None,
    ),
    "dropout_p0_functional": (lambda m: torch.dropout_(m.bias, 0.0, True), lambda w, b: None),
}


@pytest.mark.parametrize("name", sorted(ON_DEFAULTS))
def test_steps_on_the_streams_values_are_torchs(name: str) -> None:
    init, step = ON_DEFAULTS[name]
    model, plain = _materialized(init), _materialized(None)
    with torch.no_grad():
        step(plain.weight, plain.bias)
    assert torch.equal(model.weight, plain.weight)
    assert torch.equal(model.bias, plain.bias)


def test_an_aten_normal_is_the_tensor_methods_fill() -> None:
    model = _materialized(lambda m: aten.normal_.default(m.weight, 0.0, 0.02))
    method = _materialized(lambda m: m.weight.data.normal_(0.0, 0.02))
    assert torch.equal(model.weight, method.weight)
    assert 0.01 < float(model.weight.detach().std()) < 0.03


@pytest.mark.parametrize(
    "init",
    [
        lambda m: F.dropout(m.weight, 0.5, training=True, inplace=True),
        lambda m: torch.dropout_(m.weight, 0.1, True),
        lambda m: m.weight.data.copy_(F.dropout(m.weight, 0.5) * 1),
    ],
    ids=["functional_inplace", "torch_dropout_", "out_of_place"],
)
def test_dropout_that_drops_is_refused_as_a_random_mask(init: Init) -> None:
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(init)
    message = str(raised.value)
    assert "parameter 'weight'" in message and "dropout" in message
    assert "random mask drawn from torch's generator" in message
    assert "reads" not in message.split(". shardinit can replay")[0]
    assert "test_capture_aten_overloads.py" in message


def test_a_foreach_op_without_a_method_is_refused_as_a_write() -> None:
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(lambda m: torch._foreach_maximum_([m.weight, m.bias], 0.0))
    message = str(raised.value)
    assert "parameter 'weight': _foreach_maximum_ at" in message
    assert "this in-place operation on the parameter's values is not replayable" in message
    assert "test_capture_aten_overloads.py" in message


def test_an_unfollowed_inplace_op_on_a_temporary_that_reads_a_parameter_names_the_read() -> None:
    """``index_add_`` into a temporary reads the parameter, it does not write it: the
    refusal says so (a write of the parameter keeps "not replayable", above)."""

    def init(m: nn.Linear) -> None:
        rows = torch.zeros(32, 16).index_add_(0, torch.tensor([0, 1]), m.weight[:2])
        m.weight.copy_(rows)

    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(init)
    message = str(raised.value)
    assert "parameter 'weight': index_add_ at" in message
    assert "it reads the parameter's values" in message
    assert "an operation shardinit does not follow" in message
    assert "not replayable" not in message


def test_index_add_writing_a_parameter_is_refused_as_a_write() -> None:
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(lambda m: m.weight.index_add_(0, torch.tensor([0, 0]), torch.ones(2, 16)))
    message = str(raised.value)
    assert "parameter 'weight': index_add_ at" in message
    assert "this in-place operation on the parameter's values is not replayable" in message
