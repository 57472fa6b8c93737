"""torch.nn's default initializers, as shardinit initializers.

Each supported module type's ``reset_parameters`` is mirrored: the same distribution and
exactly the same bounds / std (computed in Python floats from the GLOBAL shapes, as
torch computes them from the full tensor), and the same post-fixes (an Embedding's
``padding_idx`` row is zero). Buffers of normalization layers are set as
``reset_running_stats`` sets them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from torch.nn.utils import parametrize

from .. import init
from .._torch_compat import CONV_MODULES, NORM_MODULES, ORIGINAL_KEEPING, WEIGHT_NORM
from ..init import Initializer, fan_in_and_fan_out, uniform_or_constant

Shapes = Mapping[str, tuple[int, ...]]
#: Normalization layers: affine weight 1 and bias 0 by default (``reset_parameters``).
NORM_LAYERS: tuple[type[nn.Module], ...] = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm, *NORM_MODULES)


@dataclass(frozen=True)
class DefaultInit:
    """A module's default for one parameter.

    Attributes:
        init: the initializer of the whole parameter.
        zero_rows: indices along dim 0 set to zero afterwards (an Embedding's
            ``padding_idx``), as torch's ``_fill_padding_idx_with_zero``.
    """

    init: Initializer
    zero_rows: tuple[int, ...] = ()


def _linear_like(attr: str, shapes: Shapes) -> DefaultInit | None:
    # Linear and _ConvNd: kaiming_uniform_(a=sqrt(5)) and a bias bound of 1/sqrt(fan_in).
    if attr == "weight":
        return DefaultInit(init.kaiming_uniform(a=math.sqrt(5)))
    if attr == "bias" and "weight" in shapes:
        fan_in, _ = fan_in_and_fan_out(shapes["weight"], "the bias bound")
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        return DefaultInit(uniform_or_constant(-bound, bound))
    return None


def _affine_norm(attr: str) -> DefaultInit | None:
    if attr == "weight":
        return DefaultInit(init.ones())
    if attr == "bias":
        return DefaultInit(init.zeros())
    return None


def _embedding(module: nn.Embedding | nn.EmbeddingBag, attr: str) -> DefaultInit | None:
    if attr != "weight":
        return None
    padding_idx = module.padding_idx
    rows = () if padding_idx is None else (int(padding_idx),)
    return DefaultInit(init.normal(0.0, 1.0), zero_rows=rows)


def _multihead_attention(attr: str) -> DefaultInit | None:
    if attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
        return DefaultInit(init.xavier_uniform())
    if attr == "in_proj_bias":
        return DefaultInit(init.zeros())
    if attr in ("bias_k", "bias_v"):
        return DefaultInit(init.xavier_normal())
    return None


def default_init(module: nn.Module, attr: str, shapes: Shapes) -> DefaultInit | None:
    """torch.nn's default for parameter ``attr`` of ``module``, or None if unknown.

        Args:
            module: the module that owns the parameter.
            attr: the parameter's attribute name on ``module`` (e.g. ``"weight"``).
            shapes: the GLOBAL shapes of ``module``'s parameters, by attribute name (a bias
                bound depends on the weight's fan-in).

        Returns:
            The default, or None for module types or attributes without a known default.

        Example:
            >>> from torch import nn
    from torch.nn.utils import parametrize
            >>> default_init(nn.Linear(4, 3), "bias", {"weight": (3, 4)}).init
            Uniform(a=-0.5, b=0.5)
    """
    if isinstance(module, (nn.Linear, *CONV_MODULES)):
        # Includes ConvTranspose: torch takes the fan-in of the weight tensor as stored.
        return _linear_like(attr, shapes)
    if isinstance(module, nn.Bilinear):
        if attr in ("weight", "bias") and "weight" in shapes:
            bound = 1 / math.sqrt(shapes["weight"][1])
            return DefaultInit(uniform_or_constant(-bound, bound))
        return None
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return _embedding(module, attr)
    if isinstance(module, NORM_LAYERS):
        return _affine_norm(attr)
    if isinstance(module, nn.MultiheadAttention):
        return _multihead_attention(attr)
    if isinstance(module, (nn.RNNBase, nn.RNNCellBase)):
        hidden_size = int(module.hidden_size)
        bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
        return DefaultInit(uniform_or_constant(-bound, bound))
    if isinstance(module, nn.PReLU) and attr == "weight":
        return DefaultInit(init.constant(float(module.init)))
    return None


def parent_overrides(
    root: nn.Module, modules: Iterable[nn.Module] | None = None
) -> dict[tuple[int, str], DefaultInit]:
    """Defaults that a parent module imposes on a child's parameters, keyed by
    ``(id(child), attr)``: ``MultiheadAttention._reset_parameters`` zeroes
    ``out_proj.bias`` after the ``out_proj`` Linear set its own default. ``modules``:
    ``root.modules()``, where the caller has them.
    """
    overrides: dict[tuple[int, str], DefaultInit] = {}
    for module in root.modules() if modules is None else modules:
        if isinstance(module, nn.MultiheadAttention) and module.in_proj_bias is not None:
            overrides[(id(module.out_proj), "bias")] = DefaultInit(init.zeros())
        if parametrize.is_parametrized(module):
            overrides.update(_parametrized_defaults(module))
    return overrides


def _parametrized_defaults(module: nn.Module) -> dict[tuple[int, str], DefaultInit]:
    """The defaults of a module with ``torch.nn.utils.parametrize`` parametrizations
    (``ParametrizedLinear``: its class is a subclass of the original's): eager torch
    built the module first, then moved each parametrized tensor into
    ``parametrizations.<name>.original`` through the parametrization's
    ``right_inverse``. So its own parameters (a Linear's bias) take the module's default
    with the parametrized tensor's shape (the bias bound is the weight's fan-in); an
    ``original`` takes the tensor's default where ``right_inverse`` keeps the values
    (none, or spectral_norm's), and weight_norm's ``original1`` (v, the weight itself)
    does too. weight_norm's ``original0`` (g, the norm of each slice of the weight) is
    a reduction of its values that no initializer gives: left without a default."""
    holder = module.parametrizations
    assert isinstance(holder, nn.ModuleDict)  # register_parametrization's
    lists = {name: cast(parametrize.ParametrizationList, p) for name, p in holder.items()}
    shapes = {name: tuple(p.shape) for name, p in module.named_parameters(recurse=False)}
    kept: dict[str, str] = {}  # tensor name -> the original that holds its values
    for name, plist in lists.items():
        steps = list(plist)
        if hasattr(plist, "original"):
            if all(
                isinstance(m, ORIGINAL_KEEPING) or not hasattr(m, "right_inverse") for m in steps
            ):
                kept[name] = "original"
            shapes[name] = tuple(plist.original.shape)
        elif len(steps) == 1 and isinstance(steps[0], WEIGHT_NORM) and hasattr(plist, "original1"):
            kept[name] = "original1"
            shapes[name] = tuple(cast(torch.Tensor, plist.original1).shape)
    found: dict[tuple[int, str], DefaultInit] = {}
    for attr in [n for n, _ in module.named_parameters(recurse=False)]:
        default = default_init(module, attr, shapes)
        if default is not None:
            found[(id(module), attr)] = default
    for name, original in kept.items():
        default = default_init(module, name, shapes)
        if default is not None:
            found[(id(lists[name]), original)] = default
    return found


def default_buffer_value(module: nn.Module, name: str) -> float | None:
    """The value torch gives buffer ``name`` of ``module`` (a constant fill), or None.

    Normalization layers: ``running_mean`` 0, ``running_var`` 1, ``num_batches_tracked``
    0, as ``reset_running_stats``.
    """
    if isinstance(module, NORM_MODULES):
        values = {"running_mean": 0.0, "running_var": 1.0, "num_batches_tracked": 0.0}
        return values.get(name)
    return None
