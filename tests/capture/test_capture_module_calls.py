"""Module calls inside init code (issue 29, item 4): ``to_empty``, ``.to(device)``,
``.cpu()``, ``.cuda()``, casts and ``_apply(fn)`` on the model while ``init_fn`` runs, as
OLMo-core's ``Transformer.init_weights`` does (``self.to_empty(device)`` first). Values
against the same init code run eagerly on a CPU model; refusals name the parameter (or
buffer) and this file's line."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init

HERE = os.path.basename(__file__)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 12)
        self.norm = nn.LayerNorm(12)
        self.register_buffer("freqs", torch.empty(6), persistent=False)


class OlmoLike(nn.Module):
    """OLMo-core's pattern: ``init_weights`` empties the model on its device first, then
    resets every module, then initializes, recomputing its buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList([Block(), Block()])

    def init_weights(self, device: torch.device, moves: Callable[[nn.Module], object]) -> None:
        self.to_empty(device=device)
        moves(self)
        for module in self.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
        nn.init.normal_(self.embeddings.weight, std=0.02)
        for block in self.blocks:
            nn.init.trunc_normal_(block.proj.weight, std=0.02, a=-0.04, b=0.04)
            nn.init.zeros_(block.proj.bias)
            with torch.device(block.freqs.device):
                block.freqs = 1.0 / (10000.0 ** (torch.arange(0, 12, 2).float() / 12))


def _moves(model: nn.Module) -> None:
    model.to("cpu")
    model.cpu()
    model.float()  # float32 already: no dtype change
    model.blocks[0].to(torch.device("cpu"))


@pytest.mark.parametrize(
    "moves", [lambda m: None, _moves, lambda m: m._apply(lambda t: t.to("cpu"))]
)
def test_olmo_like_to_empty_then_init(moves: Callable[[nn.Module], object]) -> None:
    with torch.device("meta"):
        model = OlmoLike()
    cpu = torch.device("cpu")
    shardinit.materialize(model, seed=3, init_fn=lambda: model.init_weights(cpu, moves))
    torch.manual_seed(0)
    eager = OlmoLike()
    eager.init_weights(cpu, moves)
    for name, value in eager.named_buffers():
        assert torch.equal(dict(model.named_buffers())[name], value), name
    ours = dict(model.named_parameters())
    for name, value in eager.named_parameters():
        got = ours[name].detach()
        assert got.device.type == "cpu" and got.dtype == value.dtype, name
        if "norm" in name or "bias" in name:
            assert torch.equal(got, value.detach()), name  # constants exact
    # The random ones: exactly the stream of their fill (the parameter's name, the seed).
    fills = {"embeddings.weight": init.normal(0.0, 0.02)}
    for index in range(2):
        fills[f"blocks.{index}.proj.weight"] = init.trunc_normal(0.0, 0.02, -0.04, 0.04)
        fills[f"blocks.{index}.proj.bias"] = init.zeros()
    for name, initializer in fills.items():
        got = ours[name].detach()
        spec = shardinit.ParamSpec(name, tuple(got.shape), torch.float32, initializer, seed=3)
        assert torch.equal(got, shardinit.full(spec)), name


def _capture_error(model: OlmoLike, init_fn: Callable[[], object]) -> str:
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.capture_init(model, init_fn)
    return str(raised.value)


@pytest.mark.parametrize(
    ("call", "dtype"),
    [
        (lambda m: m.blocks[1].to(torch.bfloat16), "torch.bfloat16"),
        (lambda m: m.half(), "torch.float16"),
        (lambda m: m._apply(lambda t: t.double()), "torch.float64"),
    ],
)
def test_dtype_change_is_refused_naming_parameter_and_line(
    call: Callable[[nn.Module], object], dtype: str
) -> None:
    with torch.device("meta"):
        model = OlmoLike()
    message = _capture_error(model, lambda: model.init_weights(torch.device("cpu"), call))
    assert "parameter 'blocks.1." in message or "parameter 'embeddings.weight'" in message
    assert f"converts torch.float32 to {dtype}" in message
    assert HERE in message and "module.py" not in message


def test_to_empty_after_writes_is_refused() -> None:
    with torch.device("meta"):
        model = OlmoLike()

    def late() -> None:
        nn.init.ones_(model.embeddings.weight)
        model.to_empty(device="cpu")

    message = _capture_error(model, late)
    assert "parameter 'embeddings.weight': to_empty()" in message
    assert "discards the values init_fn wrote before (torch.nn.init.ones_" in message
    assert HERE in message


def test_buffer_emptied_and_not_recomputed_is_refused() -> None:
    with torch.device("meta"):
        model = OlmoLike()
    message = _capture_error(model, lambda: model.to_empty(device="cpu"))
    assert "blocks.0.freqs (init_fn emptied it with to_empty)" in message


def test_apply_fn_that_cannot_be_followed_is_refused() -> None:
    with torch.device("meta"):
        model = OlmoLike()
    message = _capture_error(model, lambda: model._apply(lambda t: t.zero_()))
    assert "_apply(fn) of its module" in message and "in place" in message
    assert HERE in message


def test_module_methods_are_back_after_the_capture() -> None:
    with torch.device("meta"):
        model = OlmoLike()
    _capture_error(model, lambda: model.to_empty(device="cpu"))
    assert all("_apply" not in vars(module) for module in model.modules())
    assert all(t.is_meta for t in [*model.parameters(), *model.buffers()])


def test_apply_move_keeps_integer_and_bool_buffers() -> None:
    class Indexed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(2, 2)
            self.register_buffer("ids", torch.arange(4) * 2)
            self.register_buffer("mask", torch.arange(3) > 0)

    with torch.device("meta"), shardinit.record_constructors():
        model = Indexed()
    shardinit.materialize(model, seed=0, init_fn=lambda: model._apply(lambda t: t.to("cpu")))
    assert torch.equal(model.ids, torch.arange(4) * 2)  # a move: the constructor's values
    assert torch.equal(model.mask, torch.tensor([False, True, True]))
