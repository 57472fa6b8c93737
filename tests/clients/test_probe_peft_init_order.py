"""peft's recipe (``peft_adapter`` in tests/clients/ecosystem_recipes.py) keeps eager's
order: the base model's constructors, transformers' own init (post_init's on the CPU),
then peft's constructors, which initialize the adapters over the base's init values.

* Adapters that only initialize themselves (LoRA's default, LoHa) give the library's own
  CPU values: the base weights transformers' init draws (std 0.02, not nn.Linear's
  kaiming bound), the adapters peft's constructors draw.
* Adapters computed from the base weights' values (PiSSA's SVD, OLoRA's QR, which also
  rewrite the base weight to the residual) are refused by materialize, naming the base
  weight and peft's function. Before, init_fn ran transformers' init after peft had read
  the constructor's values: an adapter of a weight the model never holds, silently.
* peft code that skips its init on the meta device, where it expects a checkpoint (MiCA's
  ``mica_init``, DeLoRA's weight norm, DeFT's and PSOFT's ``reset_*``, KaSA's truncation,
  MonteCLoRA's sampler, ShadowPEFT's backbone), takes eager's branch: the capture answers
  ``is_meta`` / ``device`` of the tensors it builds on meta as the CPU tensors they
  stand for (tests/capture/test_constructor_device_questions.py). What that branch
  computes from the base weights' values is refused, naming the tensor and peft's
  function (MonteCLoRA's sampler, drawn from torch's generator, naming its line); what
  it draws or sets is eager's (before, the adapters kept the constructor's values, a
  weight norm of ones and no sampler, silently). So does transformers' own
  ``post_init``, which skips its init where a fresh tensor lands on meta: inside
  ``record_constructors`` the constructor runs it, as on the CPU (ShadowPEFT's own
  Llama backbone too)."""

from __future__ import annotations

import warnings
from typing import Any

import ecosystem_recipes as recipes
import pytest
import torch
from test_clients import _like_library, _zeros_agree

import shardinit

pytestmark = pytest.mark.clients

SEED = 1234


def _llama() -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM, config


def _peft_config(config_name: str, **kwargs: Any) -> Any:
    import peft

    return getattr(peft, config_name)(target_modules=["q_proj", "v_proj"], **kwargs)


def _recipe(config_name: str, **kwargs: Any) -> torch.nn.Module:
    with warnings.catch_warnings():
        # peft 0.21.2 calls transformers' deprecated is_gradient_checkpointing.
        warnings.simplefilter("ignore", FutureWarning)
        model: torch.nn.Module = recipes.peft_adapter(
            *_llama(), _peft_config(config_name, **kwargs), lambda module: None, SEED
        )
    return model


def _eager(config_name: str, **kwargs: Any) -> torch.nn.Module:
    from peft import get_peft_model

    torch.manual_seed(0)
    model_class, config = _llama()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model: torch.nn.Module = get_peft_model(
            model_class(config), _peft_config(config_name, **kwargs)
        )
    return model


@pytest.mark.parametrize(
    ("config_name", "kwargs"),
    [("LoraConfig", {"r": 4}), ("LoHaConfig", {"r": 4})],
    ids=["lora", "loha"],
)
def test_self_initialized_adapters_match_eager(config_name: str, kwargs: dict[str, Any]) -> None:
    ours = dict(_recipe(config_name, **kwargs).named_parameters())
    theirs = dict(_eager(config_name, **kwargs).named_parameters())
    assert sorted(ours) == sorted(theirs)
    for name, value in ours.items():
        _zeros_agree(name, value.detach(), theirs[name].detach())
        _like_library(name, value.detach(), theirs[name].detach())
    # The distinction this file is about: transformers' std 0.02, not the constructor's.
    base = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    assert abs(float(ours[base].std()) / 0.02 - 1) < 0.1


@pytest.mark.parametrize(("init", "function"), [("pissa", "pissa_init"), ("olora", "olora_init")])
def test_adapters_computed_from_base_values_are_refused(init: str, function: str) -> None:
    with pytest.raises(shardinit.ShardInitError) as raised:
        _recipe("LoraConfig", r=4, init_lora_weights=init)
    message = str(raised.value)
    assert "self_attn.q_proj.base_layer.weight" in message
    assert "cannot be replayed" in message
    assert function in message


def _like_eager(ours_model: torch.nn.Module, theirs_model: torch.nn.Module) -> None:
    """The same parameters and buffers as eager's, each with eager's values (constants
    exactly, random ones as the library draws them)."""
    ours = {**dict(ours_model.named_parameters()), **dict(ours_model.named_buffers())}
    theirs = {**dict(theirs_model.named_parameters()), **dict(theirs_model.named_buffers())}
    assert sorted(ours) == sorted(theirs)
    for name, value in ours.items():
        mine, eager = value.detach(), theirs[name].detach()
        if mine.shape != eager.shape or not torch.allclose(mine, eager):  # tables: eager's
            _like_library(name, mine, eager)  # (rotary frequencies within rounding)


def test_post_init_inside_record_constructors_is_a_cpu_builds() -> None:
    # transformers' post_init skips its init where a fresh tensor lands on meta; inside
    # record_constructors that tensor answers as the CPU one it stands for, so the
    # constructor runs transformers' init, as on the CPU (before: torch.nn's defaults).
    model_class, config = _llama()
    with torch.device("meta"), shardinit.record_constructors():
        model = model_class(config)
    shardinit.materialize(model, seed=SEED)
    torch.manual_seed(0)
    _like_eager(model, model_class(config))
    weight = model.get_parameter("model.layers.0.self_attn.q_proj.weight").detach()
    assert abs(float(weight.std()) / 0.02 - 1) < 0.1  # transformers' std, not kaiming's


def _sub_config(name: str) -> Any:
    import peft

    return getattr(peft, name)()


@pytest.mark.parametrize(
    ("config_name", "kwargs", "sampler"),
    [
        ("DeftConfig", {"init_weights": False}, "deft_R"),
        ("ShadowConfig", {}, "shadow_backbone"),  # a Llama of its own: its post_init
    ],
    ids=["deft-random", "shadow"],
)
def test_adapters_peft_skips_on_meta_take_eagers_branch(
    config_name: str, kwargs: dict[str, Any], sampler: str
) -> None:
    kwargs = {k: _sub_config(v) if k.endswith("_config") else v for k, v in kwargs.items()}
    ours = _recipe(config_name, **kwargs)
    _like_eager(ours, _eager(config_name, **kwargs))
    assert any(sampler in name for name, _ in ours.named_parameters())


@pytest.mark.parametrize(
    ("config_name", "kwargs", "tensor", "function"),
    [
        ("LoraConfig", {"r": 4, "init_lora_weights": "mica"}, "lora_B.default.weight", "mica_init"),
        ("DeloraConfig", {"r": 4}, "delora_w_norm.default", "reset_delora_parameters"),
        ("DeftConfig", {}, "deft_R.default", "reset_deft_parameters"),
        (
            "LoraConfig",
            {"r": 4, "kasa_config": "KasaConfig"},
            "base_layer.weight",
            "_truncate_base_weight",
        ),
        (
            "PsoftConfig",
            {"r": 4, "psoft_orth": False},
            "_psoft_A_cache.default",
            "_compute_svd_factors",
        ),
    ],
    ids=["mica", "delora", "deft", "kasa", "psoft"],
)
def test_adapters_peft_skips_on_meta_computed_from_base_values_are_refused(
    config_name: str, kwargs: dict[str, Any], tensor: str, function: str
) -> None:
    kwargs = {k: _sub_config(v) if k.endswith("_config") else v for k, v in kwargs.items()}
    with pytest.raises(shardinit.ShardInitError) as raised:
        _recipe(config_name, **kwargs)
    message = str(raised.value)
    assert f"self_attn.q_proj.{tensor}" in message
    assert "cannot be" in message and function in message


def test_a_sampler_peft_builds_off_meta_from_torchs_generator_is_refused() -> None:
    # MonteCLoRA builds its sampler where lora_A is off meta (as on the CPU): the sampler
    # draws a buffer from torch's generator on lora_B's device (zeros: a CPU table) and
    # validates it in Python (Wishart's arguments), which no seed replays. Before, the
    # sampler was skipped on meta and the model had none of its parameters, silently.
    kwargs = {"r": 4, "monteclora_config": _sub_config("MontecloraConfig")}
    with pytest.raises(shardinit.ShardInitError) as raised:
        _recipe("LoraConfig", **kwargs)
    message = str(raised.value)
    assert "monteclora.py" in message and "torch's global generator" in message
