"""Refusals name the user's (or the library's) init code line, never a line inside torch
(issue 29, item 7): weight_norm parametrizations read the parametrized weight inside
``torch/nn/utils/parametrizations.py``; the message names transformers' ``_init_weights``
(wav2vec2, HuBERT) or this file. peft DoRA's magnitude (a norm of the base weight) names
peft's ``dora.py``. torch.nn modules' own ``reset_parameters`` stays the named line of
what it records (it is the init code that made the call)."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import shardinit

pytestmark = pytest.mark.clients

HERE = os.path.basename(__file__)
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _refusal(model: nn.Module, init_fn: object) -> str:
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.materialize(model, seed=0, init_fn=init_fn)  # type: ignore[arg-type]
    message = str(raised.value)
    assert TORCH_DIR not in message, message
    return message


def test_weight_norm_refusal_names_the_init_line() -> None:
    with torch.device("meta"):
        conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3), dim=2)
    message = _refusal(conv, lambda: nn.init.normal_(conv.weight, std=0.02))
    assert "parametrizations.weight.original" in message
    assert f"{HERE}:" in message and "parametrizations.py" not in message


@pytest.mark.parametrize("family", ["wav2vec2", "hubert"])
def test_transformers_weight_norm_refusal_names_init_weights(family: str) -> None:
    transformers = pytest.importorskip("transformers")
    config_class, model_class = {
        "wav2vec2": (transformers.Wav2Vec2Config, transformers.Wav2Vec2Model),
        "hubert": (transformers.HubertConfig, transformers.HubertModel),
    }[family]
    config = config_class(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
        conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
    )  # fmt: skip
    with torch.device("meta"):
        model = model_class(config)
    message = _refusal(model, model.init_weights)
    assert "pos_conv_embed.conv.parametrizations.weight.original" in message
    assert f"{os.sep}transformers{os.sep}" in message and "in _init_weights" in message


def test_peft_dora_refusal_names_dora_py() -> None:
    peft = pytest.importorskip("peft")

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(8, 8)

    with torch.device("meta"), shardinit.record_constructors():
        model = peft.get_peft_model(
            Tiny(), peft.LoraConfig(target_modules=["q"], r=2, use_dora=True)
        )
    message = _refusal(model, None)
    assert "lora_magnitude_vector.default.weight" in message
    assert f"peft{os.sep}tuners{os.sep}lora{os.sep}dora.py:" in message


def test_torch_reset_parameters_is_the_recorded_line() -> None:
    with torch.device("meta"):
        linear = nn.Linear(4, 3)
    captured = shardinit.capture_init(linear, linear.reset_parameters)
    where = captured["weight"].ops[0].where
    assert f"{os.sep}torch{os.sep}nn{os.sep}modules{os.sep}linear.py:" in where
    assert where.endswith("in reset_parameters")
