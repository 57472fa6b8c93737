"""shardinit.megatron's choice of initializer when megatron-core is not installed: the
TransformerConfig's init methods are checked where a parameter takes one, so a config
field that is not an init callable ``fn(tensor)`` is a TypeError naming the field (it
was a bare AssertionError, "'float' object is not callable", or the user's lambda's own
TypeError). The embedding is the one parameter whose preset needs no megatron-core
import; tests/zoo/test_megatron.py checks the same on real models."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init
from shardinit._integration.megatron import MegatronChooser, MegatronTarget
from shardinit._integration.placements import full_runs
from shardinit._names import ParamSlot
from shardinit.shard import writer

SHAPE = (8, 4)
EMBEDDING = "embedding.word_embeddings.weight"
FIELD = (
    r"^config.embedding_init_method must be an init callable fn\(tensor\), as "
    r"TransformerConfig sets from init_method_std \(e.g. functools.partial\("
    r"torch.nn.init.normal_, mean=0.0, std=0.02\)\)"
)


def _embedding_target() -> MegatronTarget:
    holder = nn.Embedding(*SHAPE)
    slot = ParamSlot(EMBEDDING, holder.weight, [(holder, "weight")])
    return MegatronTarget(slot, "embedding.word_embeddings", SHAPE, full_runs(SHAPE))


def _chosen(method: object, rules: dict[str, object] | None = None) -> torch.Tensor:
    config = SimpleNamespace(
        init_method=None, output_layer_init_method=None, embedding_init_method=method
    )
    chooser = MegatronChooser(config, rules)  # type: ignore[arg-type]
    values = chooser.values(_embedding_target(), None, seed=3)
    assert values is not None
    out = torch.empty(SHAPE)
    values.write_runs(writer(), full_runs(SHAPE), out)
    return out


def _two_arguments(tensor: torch.Tensor, std: float) -> None:
    nn.init.normal_(tensor, std=std)


@pytest.mark.parametrize(
    ("method", "match"),
    [
        (None, FIELD + r", got NoneType None$"),
        (0.02, FIELD + r", got float 0.02$"),
        (init.normal(0.0, 0.02), FIELD + r", got Normal Normal\(mean=0.0, std=0.02\)$"),
        (init.Normal, FIELD + r", got the class Normal \(an instance"),
        (
            _two_arguments,
            FIELD + r": it is called with one tensor, but _two_arguments takes \(tensor, std\) "
            r"\(missing a required argument: 'std'\)$",
        ),
    ],
    ids=["None", "0.02", "an initializer", "a class", "two arguments"],
)
def test_a_config_init_method_that_is_not_fn_tensor_is_a_type_error_naming_it(
    method: object, match: str
) -> None:
    with pytest.raises(TypeError, match=match):
        _chosen(method)


def test_a_rule_overrides_a_bad_config_field_and_a_good_one_is_captured() -> None:
    """The field is only read when a parameter takes it: a rule for the embedding makes
    a None field harmless; a real init callable gives its values."""
    want = shardinit.full(shardinit.ParamSpec(EMBEDDING, SHAPE, init=init.normal(0, 0.5), seed=3))
    assert torch.equal(_chosen(None, {"embedding.*": init.normal(0.0, 0.5)}), want)
    method = functools.partial(nn.init.normal_, mean=0.0, std=0.5)
    assert torch.equal(_chosen(method), want)
