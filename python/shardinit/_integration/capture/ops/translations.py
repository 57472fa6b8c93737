"""How torch calls translate into records: one table entry per way of filling values.

A fill reaches torch either as a ``torch.nn.init`` function (recognised by the code it
runs, however it was called: through the module attribute, an alias bound at import time,
or a wrapper such as transformers' guarded ``normal_``) or as a tensor method
(``w.normal_()``, ``w.data.uniform_()``). Both name their arguments differently and land
on the same :class:`Translation` kind, so each kind is translated once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import CodeType
from typing import Any

import numpy as np
import torch

from ...._caches import BoundedMap
from ...._program.actions import Fill, Scale, TrackAction, constant_fill
from ....errors import ShardInitError
from ....init import BaseInit, Constant, Normal, Orthogonal, TruncNormal, uniform_or_constant

__all__ = [
    "INIT_CODES",
    "INIT_FUNCTIONS",
    "INIT_TRANSLATIONS",
    "METHOD_TRANSLATIONS",
    "Translation",
    "bind",
    "build",
    "scalar",
    "shown",
    "shown_call",
]


@dataclass(frozen=True)
class Translation:
    """One way of filling values.

    Attributes:
        kind: what it does (a key of the builders: ``"normal"``, ``"uniform"``, ...).
        names: its arguments after the tensor, in positional order, as the call names them.
        defaults: their defaults.
    """

    kind: str
    names: tuple[str, ...] = ()
    defaults: tuple[Any, ...] = ()


_NORMAL = ("mean", "std"), (0.0, 1.0)
_FAN = ("probe", ("a", "mode", "nonlinearity"), (0, "fan_in", "leaky_relu"))

#: Tensor methods that write values, by method name.
METHOD_TRANSLATIONS: Mapping[str, Translation] = {
    "normal_": Translation("normal", *_NORMAL),
    "uniform_": Translation("uniform", ("from", "to"), (0.0, 1.0)),
    "fill_": Translation("constant", ("value",), (None,)),
    "zero_": Translation("zeros"),
    "mul_": Translation("scale", ("other",), (None,)),
    "__imul__": Translation("scale", ("other",), (None,)),
    "div_": Translation("divide", ("other",), (None,)),
    "__itruediv__": Translation("divide", ("other",), (None,)),
}

#: ``torch.nn.init`` functions, by name.
INIT_TRANSLATIONS: Mapping[str, Translation] = {
    "normal_": Translation("normal", *_NORMAL),
    "uniform_": Translation("uniform", ("a", "b"), (0.0, 1.0)),
    "trunc_normal_": Translation("trunc_normal", ("mean", "std", "a", "b"), (0.0, 1.0, -2.0, 2.0)),
    "constant_": Translation("constant", ("val",), (None,)),
    "zeros_": Translation("zeros"),
    "ones_": Translation("ones"),
    "eye_": Translation("eye"),
    "dirac_": Translation("dirac", ("groups",), (1,)),
    "xavier_uniform_": Translation("probe", ("gain",), (1.0,)),
    "xavier_normal_": Translation("probe", ("gain",), (1.0,)),
    "kaiming_uniform_": Translation(*_FAN),
    "kaiming_normal_": Translation(*_FAN),
    "orthogonal_": Translation("orthogonal", ("gain",), (1,)),
    "sparse_": Translation("refuse", ("sparsity", "std"), (None, 0.01)),
    # torch's private helpers behind the public functions, which init code calls too
    # (older timm, DeiT): the same fills.
    "_no_grad_uniform_": Translation("uniform", ("a", "b"), (0.0, 1.0)),
    "_no_grad_normal_": Translation("normal", *_NORMAL),
    "_no_grad_trunc_normal_": Translation(
        "trunc_normal", ("mean", "std", "a", "b"), (0.0, 1.0, -2.0, 2.0)
    ),
    "_no_grad_fill_": Translation("constant", ("val",), (None,)),
    "_no_grad_zero_": Translation("zeros"),
}

#: The original ``torch.nn.init`` functions (taken at import, before anyone patches them).
INIT_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    name: getattr(torch.nn.init, name)
    for name in INIT_TRANSLATIONS
    if hasattr(torch.nn.init, name)  # a private helper a torch release may drop
}
#: Their code objects: a frame running one of these is inside that init function.
INIT_CODES: Mapping[CodeType, str] = {func.__code__: name for name, func in INIT_FUNCTIONS.items()}


def bind(args: Sequence[Any], kwargs: Mapping[str, Any], entry: Translation) -> list[Any]:
    """Positional + keyword arguments (after the tensor) to values in ``entry.names``
    order; torch's ``generator`` is ignored (shardinit's stream replaces it)."""
    values = list(entry.defaults)
    for index, value in enumerate(args[: len(values)]):
        values[index] = value
    for key, value in kwargs.items():
        if key in ("generator", "tensor"):
            continue
        if key not in entry.names:
            raise TypeError(f"unexpected keyword argument {key!r}")
        values[entry.names.index(key)] = value
    return values


def scalar(value: Any) -> float:
    """A Python real number (or a numpy scalar, which torch takes as one, or a 0-d CPU
    tensor) as a float.

    Raises:
        ShardInitError: anything else (arithmetic with or copying from tensors).
    """
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return float(value)
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 0
        and value.device.type == "cpu"
        and not value.is_complex()
    ):
        return float(value.item())
    raise ShardInitError(
        "the operand is not a Python scalar (arithmetic with tensors is not replayable)"
    )


def shown(value: Any) -> str:
    """An argument as an operation's name shows it: ``repr``, but a tensor by its dtype
    and shape (torch's ``repr`` formats its values, about a millisecond even for one
    element on a CPU tensor: it was most of a row loop's ``w[i] = t``)."""
    if type(value) in _PLAIN:  # (most arguments: asked at every recorded call)
        return repr(value)
    if isinstance(value, torch.Tensor):
        return f"<{str(value.dtype).removeprefix('torch.')} tensor {tuple(value.shape)}>"
    if isinstance(value, _SEQUENCES) and any(isinstance(v, torch.Tensor) for v in value):
        inner = ", ".join(shown(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def shown_call(function: str, names: tuple[str, ...], values: Sequence[Any]) -> str:
    """``function(name=value, ...)``, a translated call as an operation's name shows it
    (:func:`shown` per value). Kept for calls of plain values (numbers, strings, None):
    formatting them was a tenth of recording a ``torch.nn.init`` call, and init code
    repeats a few calls per model."""
    key = _shown_key(function, names, values)
    made = _SHOWN_CALLS.get(key) if key is not None else None
    if made is None:
        listed = ", ".join(f"{n}={shown(v)}" for n, v in zip(names, values, strict=True))
        made = f"{function}({listed})"
        if key is not None:
            _SHOWN_CALLS.put(key, made)
    return made


#: :func:`shown_call`'s texts by :func:`_shown_key`.
_SHOWN_CALLS: BoundedMap[tuple[object, ...], str] = BoundedMap()


def _shown_key(
    function: str, names: tuple[str, ...], values: Sequence[Any]
) -> tuple[object, ...] | None:
    """What :func:`shown_call`'s text depends on: the function, the names, and each
    value by its type and, for a float, its bits (-0.0 is not 0.0); None where a
    value is not plain."""
    key: list[object] = [function, names]
    for value in values:
        kind = type(value)
        if kind not in _PLAIN:
            return None
        key += (kind, value.hex() if kind is float else value)
    return tuple(key)


#: Arguments :func:`shown` gives as ``repr`` at once (no tensor in them).
_PLAIN = frozenset({float, int, bool, str, type(None)})
_SEQUENCES = (tuple, list)


def build(kind: str, values: Sequence[Any], op: str, tensor: torch.Tensor) -> TrackAction:
    """The action of a translation of ``kind`` with argument ``values`` (not ``eye`` /
    ``dirac``, which need the region: the recorder builds those); ``op`` is the call as
    shown (``torch.nn.init.kaiming_uniform_(a=...)``), whose function a probe runs.
    Actions are immutable: one of plain arguments (numbers, strings, None) is built once
    per process for its kind and arguments, a probe's also for the tensor's shape and
    dtype (init code repeats a few per model; a probe runs torch's function).

    Raises:
        ShardInitError: the arguments make no valid initializer, or the kind is refused.
    """
    key = _action_key(kind, values, op, tensor)
    made = _BUILT.get(key) if key is not None else None
    if made is None:
        made = _build(kind, values, op, tensor)
        if key is not None:
            _BUILT.put(key, made)
    return made


#: ``build``'s actions of plain arguments (:func:`_action_key`).
_BUILT: BoundedMap[tuple[object, ...], TrackAction] = BoundedMap()
_NUMBER_KINDS = frozenset(
    {"normal", "uniform", "trunc_normal", "constant", "zeros", "ones", "scale", "divide"}
)


def _action_key(
    kind: str, values: Sequence[Any], op: str, tensor: torch.Tensor
) -> tuple[object, ...] | None:
    """What an action of ``kind`` depends on, or None where it is not only that: an
    argument that is not a plain value (a tensor, whose value may change), or a kind
    that reads more of the tensor than its shape and dtype (orthogonal)."""
    key: list[object] = [kind]
    if kind == "probe":
        key += [_init_name(op), tuple(tensor.shape), tensor.dtype]
    elif kind not in _NUMBER_KINDS:
        return None
    for value in values:
        if type(value) is float:
            key.append(value.hex())  # by its bits: -0.0 is not 0.0
        elif value is None or type(value) in (int, str):
            key.append((type(value), value))
        else:
            return None
    return tuple(key)


def _init_name(op: str) -> str:
    """The ``torch.nn.init`` function of a call as shown (``torch.nn.init.normal_(...)``)."""
    return op.split("(")[0].split(".")[-1]


def _build(kind: str, values: Sequence[Any], op: str, tensor: torch.Tensor) -> TrackAction:
    if kind == "normal":
        return Fill(Normal(float(values[0]), float(values[1])))
    if kind == "uniform":
        return Fill(uniform_or_constant(float(values[0]), float(values[1])))
    if kind == "trunc_normal":
        mean, std, a, b = (float(v) for v in values)
        if a == -math.inf and b == math.inf:
            # Truncated nowhere: torch's sampler draws the normal (its clamp keeps all).
            return Fill(Normal(mean, std))
        return Fill(TruncNormal(mean, std, a, b))
    if kind in ("constant", "zeros", "ones"):
        value = scalar(values[0]) if kind == "constant" else float(kind == "ones")
        return constant_fill(value)
    if kind in ("scale", "divide"):
        return Scale(scalar(values[0]), divide=kind == "divide")
    if kind == "probe":
        return Fill(_probe(_init_name(op), tensor, values))
    if kind == "orthogonal":
        # The recorder checks that the view is the whole parameter in its own order.
        return Fill(Orthogonal(scalar(values[0])))
    raise ShardInitError(
        "its values depend on random positions of the whole tensor and cannot be "
        "generated shard-locally"
    )


def _probe(name: str, tensor: torch.Tensor, values: Sequence[Any]) -> BaseInit:
    """Runs torch's own ``torch.nn.init.<name>`` on a meta tensor of ``tensor``'s shape
    and catches the ``uniform_`` / ``normal_`` call it ends with: the bound / std is
    exactly torch's, computed from that shape."""
    probe = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device="meta")
    seen: list[BaseInit] = []

    def uniform_(a: float = 0.0, b: float = 1.0, **_: Any) -> torch.Tensor:
        seen.append(uniform_or_constant(float(a), float(b)))
        return probe

    def normal_(mean: float = 0.0, std: float = 1.0, **_: Any) -> torch.Tensor:
        seen.append(Normal(float(mean), float(std)))
        return probe

    # Instance attributes shadow the Tensor methods for torch's Python code.
    probe.uniform_ = uniform_  # type: ignore[method-assign,assignment]
    probe.normal_ = normal_  # type: ignore[method-assign]
    names = INIT_TRANSLATIONS[name].names
    INIT_FUNCTIONS[name](probe, **dict(zip(names, values, strict=True)))
    if seen:
        return seen[-1]
    if tensor.numel() == 0:
        return Constant(0.0)
    raise ShardInitError(f"torch.nn.init.{name} sampled nothing on a meta tensor")
