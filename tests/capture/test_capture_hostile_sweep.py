"""Init code a hostile user writes, that no other test names (issue 37's sweep, second
round): each pattern gives eager's result or a clear refusal. Eager's result is the same
code run eagerly, under ``no_grad``, on the model ``materialize`` gives without init_fn
(the stream's defaults, so steps that read a default have one known answer); a refusal
names the parameter or buffer (or the temporary), the operation and this file's line,
before anything is allocated."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import shardinit
from shardinit.errors import UnsupportedInitOpError

SEED = 3
Init = Callable[["_Model"], object]


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 32)
        self.emb = nn.Embedding(10, 8)
        self.ln = nn.LayerNorm(8)
        self.conv = nn.Conv1d(4, 6, 3)
        self.register_buffer("buf", torch.zeros(5, device="cpu"))  # real on meta
        self.register_buffer("mbuf", torch.empty(4))  # meta


def _zero(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
    tensor.zero_()


def _meta() -> _Model:
    with torch.device("meta"):
        return _Model()


def _materialized(init: Init | None) -> _Model:
    model = _meta()
    init_fn = None if init is None else (lambda: init(model))
    shardinit.materialize(model, seed=SEED, init_fn=init_fn, buffer_init=_zero)
    return model


EAGER: dict[str, Init] = {
    "padding row zeroed by index": lambda m: m.emb.weight.data[0].zero_(),
    "fill then add": lambda m: (m.ln.weight.data.fill_(1.0), m.ln.weight.data.add_(0.5)),
    "add_ on a default": lambda m: m.ln.bias.data.add_(1.0),
    "sub_ on a default": lambda m: m.lin.bias.data.sub_(0.25),
    "addcmul_ on a default": lambda m: m.lin.weight.data.addcmul_(
        torch.ones(32, 16), torch.full((32, 16), 2.0)
    ),
    "lerp_ toward zero": lambda m: m.lin.weight.data.lerp_(torch.zeros(32, 16), 0.5),
    "clamp_min_": lambda m: m.lin.weight.data.clamp_min_(0.0),
    "abs_": lambda m: m.lin.weight.data.abs_(),
    "sign_": lambda m: m.lin.weight.data.sign_(),
    "p.data = -p.data": lambda m: setattr(m.lin.bias, "data", -m.lin.bias.data),
    "fill then div_ by a tensor": lambda m: (
        m.lin.weight.data.fill_(3.0),
        m.lin.weight.data.div_(torch.arange(1.0, 17.0)),
    ),
    "meta buffer from arange": lambda m: m.mbuf.copy_(torch.arange(4.0)),
    "real buffer add_ of a table": lambda m: m.buf.add_(torch.arange(5.0) * 2),
    "real buffer index_fill_": lambda m: m.buf.index_fill_(0, torch.tensor([1, 3]), 7.0),
    "real buffer replaced": lambda m: setattr(m, "buf", torch.ones(5)),
    "where on its own default": lambda m: m.lin.weight.data.copy_(
        torch.where(m.lin.weight > 0, m.lin.weight, 0.0)
    ),
    "F.relu_": lambda m: F.relu_(m.lin.weight.data),
    "pow_": lambda m: m.lin.weight.data.pow_(2),
    "dirac_ of a part, then add_": lambda m: (
        nn.init.dirac_(m.conv.weight[:4]),
        m.conv.weight.data.add_(1.0),
    ),
    "fill through t()": lambda m: m.lin.weight.data.t().fill_(1.0),
    "mul_(0)": lambda m: m.lin.weight.data.mul_(0),
    "clamp_ by tensor bounds": lambda m: m.lin.weight.data.clamp_(
        min=torch.full((32, 16), -0.05), max=torch.full((32, 16), 0.05)
    ),
}


@pytest.mark.parametrize("name", sorted(EAGER))
def test_a_hostile_pattern_gives_eagers_result(name: str) -> None:
    init = EAGER[name]
    ours = _materialized(init)
    eager = _materialized(None)
    with torch.no_grad():
        init(eager)
    want = eager.state_dict()
    assert ours.state_dict().keys() == want.keys()
    for key, got in ours.state_dict().items():
        assert torch.equal(got, want[key]), key


REFUSED: dict[str, tuple[Init, str, str]] = {
    "copy of its own values flipped": (
        lambda m: m.conv.weight.data.copy_(m.conv.weight.data.flip(0)),
        "parameter 'conv.weight'",
        "flip",
    ),
    "bias from a weight column": (
        lambda m: m.lin.bias.data.copy_(m.lin.weight.data[:, 0]),
        "parameter 'lin.bias'",
        "reads the values of parameter 'lin.weight'",
    ),
    "real buffer uniform_": (lambda m: m.buf.uniform_(), "buffer 'buf'", "uniform_"),
    "real buffer exponential_": (lambda m: m.buf.exponential_(), "buffer 'buf'", "exponential_"),
    "real buffer random_": (lambda m: m.buf.random_(0, 10), "buffer 'buf'", "random_"),
    "real buffer geometric_": (lambda m: m.buf.geometric_(0.5), "buffer 'buf'", "geometric_"),
    "real buffer cauchy_": (lambda m: m.buf.cauchy_(), "buffer 'buf'", "cauchy_"),
    "real buffer log_normal_": (lambda m: m.buf.log_normal_(), "buffer 'buf'", "log_normal_"),
    "real buffer copy_ of randn_like": (
        lambda m: m.buf.copy_(torch.randn_like(m.buf)),
        "buffer 'buf'",
        "randn_like",
    ),
    "real buffer torch.normal(out=)": (
        lambda m: torch.normal(0.0, 1.0, (5,), out=m.buf),
        "buffer 'buf'",
        "global generator",
    ),
    "item() of torch.rand into a buffer": (
        lambda m: m.buf.fill_(torch.rand(()).item()),
        "temporary rand()",
        "item",
    ),
    "a branch on torch.rand": (
        lambda m: m.lin.bias.data.fill_(1.0 if float(torch.rand(())) < 0.5 else 0.0),
        "temporary rand()",
        "global generator",
    ),
    "atan_": (
        lambda m: m.lin.weight.data.atan_(),
        "parameter 'lin.weight'",
        "no exact formula",
    ),
    "fmod_": (lambda m: m.lin.weight.data.fmod_(0.1), "parameter 'lin.weight'", "fmod_"),
    "round_(decimals=1)": (
        lambda m: m.lin.weight.data.round_(decimals=1),
        "parameter 'lin.weight'",
        "decimals",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_hostile_pattern_is_refused_naming_it(name: str) -> None:
    init, what, why = REFUSED[name]
    model = _meta()
    with pytest.raises(UnsupportedInitOpError) as raised:
        shardinit.materialize(model, seed=SEED, init_fn=lambda: init(model), buffer_init=_zero)
    message = str(raised.value)
    assert what in message and why in message, message
    assert "test_capture_hostile_sweep.py" in message
    assert model.lin.weight.is_meta and torch.equal(model.buf, torch.zeros(5))


def test_pythons_random_into_a_buffer_is_a_value_init_code_computed() -> None:
    # Python's generator is not torch's: its number is kept as init code computed it
    # (the same on every rank only when that generator is seeded alike, as documented).
    random.seed(0)
    model = _materialized(lambda m: m.buf.fill_(random.random()))
    random.seed(0)
    assert torch.equal(model.buf, torch.full((5,), random.random()))
