"""What init code does to the modules themselves (issue 37, item 4): ``eval()``, plain
attributes set, changed or deleted, hooks registered, transformers' ``_is_hf_initialized``
and timm's ``set_grad_checkpointing``: after ``materialize`` each module is as the same
init code leaves it run eagerly on the CPU, while what the capture swapped (parameters,
buffers, its own ``_apply``) is put back."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import shardinit

SEED = 5
_PLAIN = (bool, int, float, str, type(None))


def module_state(model: nn.Module) -> dict[str, dict[str, Any]]:
    """Per module path, its plain attributes (``training`` among them) and how many hooks
    of each kind it holds."""
    state = {}
    for path, module in model.named_modules():
        attrs: dict[str, Any] = {k: v for k, v in vars(module).items() if isinstance(v, _PLAIN)}
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
            attrs[kind] = len(getattr(module, kind))
        attrs["class"] = type(module).__name__
        state[path] = attrs
    return state


def _seq() -> nn.Sequential:
    seq = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    seq[2].old_flag = "set by the constructor"
    return seq


def _hook(module: nn.Module, args: Any) -> None:
    return None


def _eval(seq: nn.Sequential) -> None:
    seq.eval()


def _scale(seq: nn.Sequential) -> None:
    seq[0].scale = 0.5
    nn.init.ones_(seq[0].weight)


def _new_and_changed(seq: nn.Sequential) -> None:
    seq.some_flag = True
    seq[0].out_features = 7
    seq[2].training = False


def _deleted(seq: nn.Sequential) -> None:
    del seq[2].old_flag


def _hooks(seq: nn.Sequential) -> None:
    seq[0].register_forward_pre_hook(_hook)
    nn.init.zeros_(seq[2].bias)


@pytest.mark.parametrize(
    "code", [_eval, _scale, _new_and_changed, _deleted, _hooks],
    ids=["eval", "scale", "new-and-changed", "deleted", "hooks"],
)  # fmt: skip
def test_module_state_set_by_init_code_is_eagers(code: Callable[[nn.Sequential], None]) -> None:
    eager = _seq()
    with torch.no_grad():
        code(eager)
    with torch.device("meta"):
        model = _seq()
    before = module_state(model)
    shardinit.materialize(model, seed=SEED, init_fn=lambda: code(model))
    after = module_state(model)
    assert after == module_state(eager)
    assert after != before  # the init code did change the modules
    assert all("_apply" not in vars(m) for m in model.modules())  # the capture's own
    assert not any(p.is_meta for p in model.parameters())


def test_capture_init_keeps_init_codes_state_and_tensors_it_assigns() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 2))
    marker = torch.zeros(1)

    def init_fn() -> None:
        model[0]._is_hf_initialized = True
        model[1].marker = marker
        model[1].training = False
        for layer in model:
            nn.init.zeros_(layer.weight)

    captured = shardinit.capture_init(model, init_fn)
    assert model[0]._is_hf_initialized is True and model[1].training is False
    assert model[1].marker is marker
    assert sorted(captured.params) == ["0.weight", "1.weight"]
    assert all(type(p) is nn.Parameter and p.is_meta for p in model.parameters())


def test_transformers_init_weights_marks_modules_as_eager() -> None:
    tf = pytest.importorskip("transformers")
    config = tf.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip
    torch.manual_seed(0)
    eager = tf.LlamaForCausalLM(config)  # on the CPU its constructor runs init_weights
    with torch.device("meta"):
        model = tf.LlamaForCausalLM(config)
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    marked = [p for p, s in module_state(model).items() if s.get("_is_hf_initialized")]
    assert "model.layers.0.self_attn.q_proj" in marked
    assert module_state(model) == module_state(eager)


def test_timm_grad_checkpointing_and_eval_as_eager() -> None:
    timm = pytest.importorskip("timm")
    kwargs = dict(img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=5)

    def init_fn(model: nn.Module) -> None:
        model.set_grad_checkpointing(True)
        model.eval()

    eager = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs)
    init_fn(eager)
    with torch.device("meta"), shardinit.record_constructors():
        model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs)
    shardinit.materialize(model, seed=SEED, init_fn=lambda: init_fn(model))
    assert model.grad_checkpointing is True and not model.training
    assert module_state(model) == module_state(eager)


class Tagged(nn.Module):
    """A constructor that tags a parameter, as Mamba tags ``A_log._no_weight_decay``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.lin.weight._no_weight_decay = True  # type: ignore[attr-defined]


def _tags(model: nn.Module) -> dict[str, dict[str, Any]]:
    return {name: dict(vars(p)) for name, p in model.named_parameters()}


def test_attributes_on_parameters_are_eagers() -> None:
    def init_fn(model: Tagged) -> None:
        nn.init.zeros_(model.lin.weight)
        model.lin.bias.group = "no_decay"  # type: ignore[attr-defined]

    eager = Tagged()
    with torch.no_grad():
        init_fn(eager)
    with torch.device("meta"):
        model = Tagged()
    model.lin.bias._shardinit_note = 1  # type: ignore[attr-defined]  # shardinit's own: dropped
    shardinit.materialize(model, seed=SEED, init_fn=lambda: init_fn(model))
    assert _tags(model) == _tags(eager)
    assert _tags(model) == {
        "lin.weight": {"_no_weight_decay": True},
        "lin.bias": {"group": "no_decay"},
    }
    assert not model.lin.weight.is_meta and torch.equal(model.lin.weight, torch.zeros(2, 3))
