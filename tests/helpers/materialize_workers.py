"""Models, expected values and comparisons for the multi-rank materialize tests.

The multi-process harness itself (scenarios, shared gloo groups, ``check``) lives in
``gloo_groups``; its names are re-exported here for the modules that import them from
this file.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from gloo_groups import (
    Checks,
    Scenario,
    assert_check_passed,
    check,
    gloo_scenario,
    rank_results,
    run_group,
)
from torch import nn

import shardinit
from shardinit import init

__all__ = [
    "Attention",
    "Block",
    "Checks",
    "TinyLM",
    "assert_check_passed",
    "bias_default",
    "block_expected_defaults",
    "check",
    "expect_equal",
    "expected_full",
    "gloo_scenario",
    "kaiming_a5",
    "rank_results",
    "run_group",
    "scenario_tests",
    "tinylm_expected_defaults",
]


def expect_equal(name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), f"{name}: shape differs"
    if not torch.equal(actual, expected):
        differ = (actual != expected).nonzero()
        raise AssertionError(f"{name}: {len(differ)} elements differ, first at {differ[:3]}")


# --------------------------------------------------------------------------- models


class Attention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(torch.tanh(self.wq(x)))


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim)
        self.ffn_norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, hidden)  # bias of `hidden` elements
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.w2(torch.relu(self.w1(self.ffn_norm(x))))


class TinyLM(nn.Module):
    """Uneven shapes on purpose: vocab 37, dim 12, hidden 3 (a bias smaller than the
    world), a tied output head."""

    def __init__(self, vocab: int = 37, dim: int = 12, hidden: int = 3, layers: int = 2) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim, padding_idx=5)
        self.layers = nn.ModuleList(Block(dim, hidden) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def kaiming_a5(shape: tuple[int, ...]) -> init.Initializer:
    """Linear/Conv default weight bound, by torch's own formula (torch.nn.init)."""
    fan_in = shape[1] * math.prod(shape[2:])
    gain = math.sqrt(2.0 / (1 + 5))
    bound = math.sqrt(3.0) * (gain / math.sqrt(fan_in))
    return init.uniform(-bound, bound)


def bias_default(fan_in: int) -> init.Initializer:
    bound = 1 / math.sqrt(fan_in)
    return init.uniform(-bound, bound)


def block_expected_defaults(prefix: str, dim: int, hidden: int) -> dict[str, init.Initializer]:
    """Expected torch.nn defaults of one ``Block`` whose names start with ``prefix``,
    written out independently of shardinit."""
    return {
        prefix + "attention_norm.weight": init.ones(),
        prefix + "attention.wq.weight": kaiming_a5((dim, dim)),
        prefix + "attention.wo.weight": kaiming_a5((dim, dim)),
        prefix + "ffn_norm.weight": init.ones(),
        prefix + "ffn_norm.bias": init.zeros(),
        prefix + "w1.weight": kaiming_a5((hidden, dim)),
        prefix + "w1.bias": bias_default(dim),
        prefix + "w2.weight": kaiming_a5((dim, hidden)),
        prefix + "w2.bias": bias_default(hidden),
    }


def tinylm_expected_defaults(model: TinyLM, dtype: torch.dtype) -> dict[str, init.Initializer]:
    """Expected torch.nn defaults of TinyLM, written out independently of shardinit."""
    dim = model.norm.normalized_shape[0]
    hidden = model.layers[0].w1.out_features
    expected: dict[str, init.Initializer] = {"tok_embeddings.weight": init.normal(0.0, 1.0)}
    for i in range(len(model.layers)):
        expected.update(block_expected_defaults(f"layers.{i}.", dim, hidden))
    expected["norm.weight"] = init.ones()
    return expected


def expected_full(
    name: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    initializer: init.Initializer,
    seed: int,
    zero_rows: tuple[int, ...] = (),
) -> torch.Tensor:
    full = shardinit.full(shardinit.ParamSpec(name, shape, dtype, initializer, seed=seed))
    for row in zero_rows:
        full[row] = 0
    return full


def scenario_tests(
    scenario: Scenario, names: Sequence[Any], worlds: Sequence[int]
) -> Callable[[str, int], None]:
    """The test of a gloo scenario: each check of ``names`` on each world size of
    ``worlds``, the scenario run once per world size (:func:`gloo_groups.run_group`).
    Bind it to a module-level ``test_...`` name::

        test_bits_under_fsdp2 = scenario_tests(my_scenario, ["bits"], [1, 2])
    """
    results = functools.cache(lambda world: run_group(world, scenario))

    @pytest.mark.distributed
    @pytest.mark.parametrize("world", worlds)
    @pytest.mark.parametrize("name", names)
    def test(name: str, world: int) -> None:
        assert_check_passed(results(world), name)

    return test
