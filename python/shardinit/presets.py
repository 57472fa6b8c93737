"""Ready-made ``rules`` for common training recipes.

Example:
    >>> import shardinit
    >>> rules = shardinit.presets.llm(std=0.02, depth_scaled_output=32)
    >>> # shardinit.materialize(model, seed=0, rules=rules)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from torch import nn

from . import init
from ._integration.defaults import NORM_LAYERS
from ._integration.rules import RuleKey
from ._validate import check_int, check_real
from .errors import ShardInitError
from .init import Initializer

__all__ = ["DEFAULT_NORM_PATTERNS", "DEFAULT_OUTPUT_PROJ_PATTERNS", "llm"]

#: Output projections of attention and MLP blocks in common Llama/GPT code.
DEFAULT_OUTPUT_PROJ_PATTERNS: tuple[str, ...] = (
    "*.wo.weight",
    "*.w2.weight",
    "*.o_proj.weight",
    "*.down_proj.weight",
    "*.c_proj.weight",
    "*.out_proj.weight",
)
#: Weights of normalization layers written as custom modules (e.g. a Llama RMSNorm).
DEFAULT_NORM_PATTERNS: tuple[str, ...] = ("*norm.weight", "*norm.bias")


def llm(
    std: float = 0.02,
    *,
    depth_scaled_output: int | None = None,
    output_proj_patterns: Sequence[str] = DEFAULT_OUTPUT_PROJ_PATTERNS,
    norm_patterns: Sequence[str] = DEFAULT_NORM_PATTERNS,
) -> dict[RuleKey, Initializer]:
    """The common LLM recipe as ordered rules for :func:`shardinit.materialize`.

    * output projections (``output_proj_patterns``), if ``depth_scaled_output`` is the
      number of layers: ``normal(0, std / sqrt(2 * n_layers))`` (GPT-2 / Megatron);
    * every ``bias``: zeros;
    * norm weights (torch norm layers, or names matching ``norm_patterns``): ones, their
      biases zeros;
    * Linear and Embedding weights: ``normal(0, std)``.

    Args:
        std: the standard deviation of Linear and Embedding weights, > 0.
        depth_scaled_output: the number of layers for depth-scaled output projections,
            or None for ``std`` everywhere.
        output_proj_patterns: name globs of output projections.
        norm_patterns: name globs of norm weights and biases of custom norm modules.

    Returns:
        An ordered ``{rule key: initializer}`` (first match wins).

    Raises:
        ShardInitError: ``std`` <= 0 or ``depth_scaled_output`` < 1.
        TypeError: arguments of the wrong type.

    Example:
        >>> rules = llm(0.02, depth_scaled_output=2)
        >>> rules["*.wo.weight"]
        Normal(mean=0.0, std=0.01)
    """
    std = check_real("std", std)
    if not std > 0:
        raise ShardInitError(f"std must be > 0, got {std}")
    rules: dict[RuleKey, Initializer] = {}
    if depth_scaled_output is not None:
        n_layers = check_int("depth_scaled_output", depth_scaled_output, low=1)
        for pattern in _check_patterns("output_proj_patterns", output_proj_patterns):
            rules[pattern] = init.normal(0.0, std / math.sqrt(2 * n_layers))
    for pattern in _check_patterns("norm_patterns", norm_patterns):
        rules[pattern] = init.zeros() if pattern.endswith("bias") else init.ones()
    for norm_type in NORM_LAYERS:
        rules[(norm_type, "weight")] = init.ones()
    rules[(nn.Module, "bias")] = init.zeros()
    rules[(nn.Linear, "weight")] = init.normal(0.0, std)
    rules[(nn.Embedding, "weight")] = init.normal(0.0, std)
    return rules


def _check_patterns(arg: str, patterns: Sequence[str]) -> tuple[str, ...]:
    if (
        isinstance(patterns, str)
        or not isinstance(patterns, Iterable)
        or not all(isinstance(p, str) for p in patterns)
    ):
        raise TypeError(f"{arg} must be a sequence of name globs (str), got {patterns!r}")
    return tuple(patterns)
