"""Ordinary arguments and copies in init code (issue 37, "Refused, but ordinary"):
``trunc_normal_`` with infinite bounds, numpy scalars as arguments, ``.cpu()`` /
``.to()`` / casts of a parameter (``p.data = p.float() * 2``), a clone overwritten, and
``vector_to_parameters(torch.randn(n) * 0.02, ...)``. Each gives eager's values, or is
refused naming the parameter, the operation and the line, with the true reason."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

import shardinit

Init = Callable[[nn.Linear], object]


def _materialized(init: Init | None, dtype: torch.dtype = torch.float32) -> nn.Linear:
    with torch.device("meta"):
        model = nn.Linear(16, 32, dtype=dtype)
    shardinit.materialize(model, seed=0, init_fn=None if init is None else lambda: init(model))
    return model


def _eager(init: Init, dtype: torch.dtype = torch.float32) -> nn.Linear:
    model = nn.Linear(16, 32, dtype=dtype)
    with torch.no_grad():
        init(model)
    return model


def _refused(init: Init, *words: str) -> str:
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(init)
    message = str(raised.value)
    for word in words:
        assert word in message
    assert "test_capture_ordinary_arguments.py" in message
    return message


def _clone_overwritten_into_bias(m: nn.Linear) -> None:
    copy = m.weight.clone()
    copy.fill_(2.0)  # every value read from the weight is gone
    m.bias.copy_(copy.view(-1)[:32] * 3)


def _cast_round_trip(m: nn.Linear) -> None:
    nn.init.constant_(m.weight, 1.5)
    m.weight.data = (m.weight.double() * 2).to(m.weight.dtype)


DETERMINISTIC: dict[str, Init] = {
    "np_float32_fill": lambda m: m.weight.data.fill_(np.float32(0.1)),
    "np_float32_constant": lambda m: nn.init.constant_(m.weight, np.float32(0.5)),
    "np_int64_fill": lambda m: m.bias.data.fill_(np.int64(3)),
    "np_float32_mul_after_fill": lambda m: (
        m.weight.data.fill_(0.3),
        m.weight.mul_(np.float32(0.1)),
    ),
    "np_float32_in_a_step": lambda m: m.weight.copy_(
        torch.arange(512.0).view(32, 16) * np.float32(0.1)
    ),
    "cpu_of_a_cpu_parameter_is_itself": lambda m: m.weight.cpu().fill_(3.0),
    "to_cpu_is_itself": lambda m: m.weight.to("cpu").zero_(),
    "to_own_dtype_is_itself": lambda m: m.weight.data.to(torch.float32).fill_(0.25),
    "clone_overwritten_into_bias": _clone_overwritten_into_bias,
    "clone_of_written_values_back": lambda m: (
        nn.init.constant_(m.weight, 1.25),
        m.weight.copy_(m.weight.clone().mul_(4)),
    ),
    "cast_round_trip": _cast_round_trip,
    "data_is_float_of_itself_times_2": lambda m: (
        nn.init.constant_(m.weight, 0.75),
        setattr(m.weight, "data", m.weight.float() * 2),
    ),
}


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_ordinary_arguments_and_copies_are_eagers(name: str) -> None:
    init = DETERMINISTIC[name]
    model, eager = _materialized(init), _eager(init)
    written = "bias" if name.startswith(("np_int64", "clone_overwritten")) else "weight"
    assert torch.equal(getattr(model, written), getattr(eager, written))


def test_a_clone_overwritten_leaves_the_parameter_as_it_was() -> None:
    def init(m: nn.Linear) -> None:
        m.weight.clone().fill_(3.0)  # eager: a copy; the parameter keeps its default
        m.bias.clone().normal_()

    model, plain = _materialized(init), _materialized(None)
    assert torch.equal(model.weight, plain.weight)
    assert torch.equal(model.bias, plain.bias)


def test_a_cast_of_the_streams_values_is_torchs() -> None:
    def init(m: nn.Linear) -> None:
        nn.init.normal_(m.weight)
        m.weight.data = (m.weight.float() * 2).bfloat16()

    model, plain = (
        _materialized(init, torch.bfloat16),
        _materialized(lambda m: nn.init.normal_(m.weight), torch.bfloat16),
    )
    with torch.no_grad():
        assert torch.equal(model.weight, (plain.weight.float() * 2).bfloat16())


def test_trunc_normal_with_infinite_bounds_is_the_normal() -> None:
    model = _materialized(
        lambda m: nn.init.trunc_normal_(m.weight, 0.5, 0.02, a=-math.inf, b=math.inf)
    )
    normal = _materialized(lambda m: nn.init.normal_(m.weight, 0.5, 0.02))
    assert torch.equal(model.weight, normal.weight)
    one_sided = _refused(
        lambda m: nn.init.trunc_normal_(m.weight, a=-math.inf, b=1.0), "'weight'", "trunc_normal_"
    )
    assert "a must be a finite number" in one_sided


@pytest.mark.parametrize(
    ("init", "words"),
    [
        (
            lambda m: m.bias.copy_(m.weight.clone().view(-1)[:32]),
            ("parameter 'bias'", "reads the values of parameter 'weight'", "clone"),
        ),
        (
            lambda m: m.weight.to("cuda").fill_(1.0),
            ("'weight'", "to at", "copies the parameter's values to cuda"),
        ),
        (lambda m: m.weight.cuda(), ("'weight'", "cuda at", "will be on cpu")),
        (
            lambda m: setattr(m.weight, "data", m.weight.double() * 2),
            ("'weight'", "tensor.data = value", "float64 one"),
        ),
    ],
    ids=["clone_read_into_bias", "to_cuda", "cuda", "data_to_another_dtype"],
)
def test_reads_and_moves_are_refused_with_the_true_reason(
    init: Init, words: tuple[str, ...]
) -> None:
    message = _refused(init, *words)
    assert "(they do not exist on meta)" not in message


def test_vector_to_parameters_of_random_values_lands_each_value_once() -> None:
    def init(m: nn.Linear) -> None:
        torch.nn.utils.vector_to_parameters(torch.randn(32 * 16 + 32) * 0.02, m.parameters())

    model = _materialized(init)
    plain = _materialized(lambda m: (nn.init.normal_(m.weight), nn.init.normal_(m.bias)))
    with torch.no_grad():  # the stream's normal at each element's own index, times 0.02
        for got, unit in ((model.weight, plain.weight), (model.bias, plain.bias)):
            assert torch.allclose(got, unit * 0.02, rtol=2**-23, atol=0)
    assert 0.015 < float(model.weight.detach().std()) < 0.025
    shared = _refused(
        lambda m: (
            setattr(m.weight, "data", (t := torch.randn(512)).view(32, 16)),
            m.bias.copy_(t[:32]),
        ),
        "parameter 'bias'",
        "second place",
    )
    assert "random values" in shared


@pytest.mark.parametrize(
    "init",
    [
        lambda m: m.bias.copy_(torch.tensor(np.float64(0.1)).expand(32).float()),
        lambda m: m.bias.copy_(torch.tensor([np.float64(0.1)] * 32)),
        lambda m: m.bias.copy_(torch.full((32,), np.float64(0.1))),
        lambda m: m.bias.copy_(torch.arange(np.int64(32)) * np.float32(0.5)),
    ],
    ids=["tensor_of_np_float64", "tensor_of_a_list", "full", "arange"],
)
def test_numpy_scalars_keep_torchs_dtypes(init: Init) -> None:
    # torch.tensor keeps a numpy scalar's dtype (float64 here, then copied into float32);
    # operands and fill values are Python numbers (float32 arithmetic).
    model, eager = _materialized(init), _eager(init)
    assert torch.equal(model.bias, eager.bias)
