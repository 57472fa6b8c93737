"""Parameters and modules that a real library's init code creates or replaces (issue 37,
item 5), with peft: a DoRA magnitude that init code replaces by a new Parameter takes
the new tensor's values (eager's ``ones``), the LoRA layers keep their in-place init,
and ``add_adapter`` inside ``init_fn`` (peft builds new ``nn.Linear`` modules for the
adapter) is refused at peft's own line, before allocation, with the model as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import shardinit

pytestmark = pytest.mark.clients

SEED = 37


class Base(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(16, 16)
        self.v = nn.Linear(16, 16)


def _dora(device: str) -> nn.Module:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["q", "v"], use_dora=True)
    if device == "meta":
        with torch.device("meta"), shardinit.record_constructors():
            return peft.get_peft_model(Base(), config)
    return peft.get_peft_model(Base(), config)


def _reset_magnitudes(model: nn.Module) -> None:
    from peft.tuners.lora import LoraLayer

    for module in model.modules():
        if isinstance(module, LoraLayer):
            module.lora_magnitude_vector["default"].weight = nn.Parameter(torch.ones(16))
            nn.init.zeros_(module.lora_B["default"].weight)


def test_a_dora_magnitude_init_code_replaces_is_eager() -> None:
    model = _dora("meta")
    # Its constructor computes the magnitude from the base weight's norm: not replayable
    # on meta, so refused, unless init code gives it values.
    with pytest.raises(shardinit.ShardInitError, match=r"lora_magnitude_vector.*linalg_norm"):
        shardinit.materialize(model, seed=SEED)
    shardinit.materialize(model, seed=SEED, init_fn=lambda: _reset_magnitudes(model))
    eager = _dora("cpu")
    with torch.no_grad():
        _reset_magnitudes(eager)
    ours, theirs = dict(model.named_parameters()), dict(eager.named_parameters())
    assert [(n, p.shape) for n, p in ours.items()] == [(n, p.shape) for n, p in theirs.items()]
    for name, param in ours.items():
        assert not param.is_meta, name
        if "magnitude" in name or "lora_B" in name:
            assert torch.equal(param, theirs[name]), name


def test_adding_an_adapter_in_init_code_is_refused_at_peft_line() -> None:
    peft = pytest.importorskip("peft")
    model = _dora("meta")
    before = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    second = peft.LoraConfig(r=2, target_modules=["q"])
    with pytest.raises(
        shardinit.UnsupportedInitOpError,
        match=r"^capture_init: module 'base_model\.model\.q\.lora_A\.second': init code adds "
        r"a module with a new Linear at .*peft/tuners/lora/layer\.py:\d+ in update_layer",
    ):
        shardinit.materialize(model, seed=SEED, init_fn=lambda: model.add_adapter("second", second))
    assert [(n, tuple(p.shape)) for n, p in model.named_parameters()] == before
    assert all(p.is_meta for p in model.parameters())
