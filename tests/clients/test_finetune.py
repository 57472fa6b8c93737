"""Fine-tuning with peft (issue 29): LoRA on a tiny transformers Llama, ``modules_to_save``
on its head, FSDP2 on gloo at W = 1, 2, 3. The code run is the recipe of
docs/capturing-init.md (``finetune_recipes``).

What is checked, against the library's own CPU init and shardinit's whole-model
materialize:

* the copy peft's ``ModulesToSaveWrapper`` deep-copies starts equal to the original, as
  in eager peft (in process, whole model on meta, no checkpoint);
* the recipe (base loaded from a checkpoint saved from a CPU model, adapters filled with
  ``only=``): gathered at every world size, every base tensor and the head's copy are
  the checkpoint's bytes, every adapter equals the whole-model materialize's, byte for
  byte; one training step gives every adapter a gradient.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import finetune_recipes
import pytest
import torch
from materialize_workers import Checks, check, expect_equal, gloo_scenario, scenario_tests
from torch import nn

import shardinit

pytestmark = pytest.mark.clients

SEED = 2929
COPY = "base_model.model.lm_head.modules_to_save.default.weight"
ORIGINAL = "base_model.model.lm_head.original_module.weight"
Weights = dict[str, torch.Tensor]


def _llama() -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, max_position_embeddings=32,
        tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM, config


def _lora() -> Any:
    from peft import LoraConfig

    return LoraConfig(r=4, target_modules=["q_proj", "v_proj"], modules_to_save=["lm_head"])


@functools.cache
def _checkpoint() -> Weights:
    """The base model's state dict, saved from the library's own CPU init."""
    model_class, config = _llama()
    torch.manual_seed(0)
    return {k: v.clone() for k, v in model_class(config).state_dict().items()}


def _peft_on_meta() -> tuple[nn.Module, Any]:
    from peft import get_peft_model

    model_class, config = _llama()
    with torch.device("meta"), shardinit.record_constructors(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft calls a deprecated transformers name
        base = model_class(config)
        model = get_peft_model(base, _lora())
    return model, base


def _init_fn(model: nn.Module, base: Any) -> Any:
    """The whole model's init, as the recipe's: transformers', then peft's adapters'."""
    from peft.tuners.lora import LoraLayer

    def init_fn() -> None:
        base.init_weights()
        for module in model.modules():
            if isinstance(module, LoraLayer):
                module.reset_lora_parameters("default", True)

    return init_fn


@functools.cache
def _whole() -> Weights:
    """shardinit's whole-model materialize of the peft model, unsharded."""
    model, base = _peft_on_meta()
    shardinit.materialize(model, seed=SEED, init_fn=_init_fn(model, base))
    return {name: p.detach().clone() for name, p in model.named_parameters()}


# --------------------------------------------------------------------------- in process


def test_modules_to_save_copy_starts_equal_to_the_original_as_in_eager_peft() -> None:
    from peft import get_peft_model

    model_class, config = _llama()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        base = model_class(config)
        eager = dict(get_peft_model(base, _lora()).named_parameters())
    assert torch.equal(eager[COPY], eager[ORIGINAL])  # the library's own CPU init
    base.init_weights()  # again after wrapping: transformers skips initialized modules
    assert torch.equal(eager[COPY], eager[ORIGINAL])
    ours = _whole()
    expect_equal(COPY, ours[COPY], ours[ORIGINAL])
    for name, value in ours.items():  # the adapters as peft makes them
        if ".lora_B." in name:
            expect_equal(name, value, torch.zeros_like(value))
        elif ".lora_A." in name:
            bound = 1 / value.shape[1] ** 0.5  # kaiming_uniform(a=sqrt(5)): 1/sqrt(fan_in)
            assert 0 < value.abs().max() <= bound and eager[name].abs().max() <= bound, name


# --------------------------------------------------------------------------- rank side


def _base_key(name: str) -> str:
    name = name.removeprefix("base_model.model.")
    for inserted in (".base_layer.", ".original_module.", ".modules_to_save.default."):
        name = name.replace(inserted, ".")
    return name


def _recipe() -> None:
    model_class, config = _llama()
    model = finetune_recipes.peft_lora_from_checkpoint(
        model_class, config, _lora(), _checkpoint(), SEED
    )
    got = {name: p.full_tensor().detach() for name, p in model.named_parameters()}
    whole, checkpoint = _whole(), _checkpoint()
    assert sorted(got) == sorted(whole)
    adapters = [name for name in got if ".lora_" in name]
    assert len(adapters) == 8, adapters
    for name, value in got.items():
        expected = whole[name] if name in adapters else checkpoint[_base_key(name)]
        expect_equal(name, value, expected)
    expect_equal(COPY, got[COPY], checkpoint["lm_head.weight"])
    tokens = torch.randint(1, 100, (2, 8), generator=torch.Generator().manual_seed(0))
    model(input_ids=tokens, labels=tokens).loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"no gradient for {missing}"


@gloo_scenario(1, 2, 3)  # joins the clients' groups of worlds 1, 2 and 3
def finetune_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecations, DCP's device notes
        check(checks, "peft_lora_from_checkpoint", _recipe)
    return checks


test_peft_lora_from_checkpoint_gives_checkpoint_bytes_and_whole_model_adapters = scenario_tests(
    finetune_scenario, ["peft_lora_from_checkpoint"], [1, 2, 3]
)
