"""Initializers with ``torch.nn.init``'s names, parameters and defaults.

Each function returns a frozen, validated initializer. The four *base* initializers
(constant, uniform, normal, trunc_normal) are what stream format v1 defines; the
fan-based ones (kaiming_*, xavier_*) resolve to a base initializer from the parameter's
GLOBAL shape with exactly torch.nn.init's Python-float arithmetic, so their bounds equal
torch's for the same full tensor.

Example:
    >>> from shardinit import init
    >>> init.kaiming_uniform(a=5**0.5).resolve((256, 128))
    Uniform(a=-0.08838834764831845, b=0.08838834764831845)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from ._validate import check_real
from .errors import ShardInitError

__all__ = [
    "BaseInit",
    "Constant",
    "Initializer",
    "KaimingNormal",
    "KaimingUniform",
    "Normal",
    "TruncNormal",
    "Uniform",
    "XavierNormal",
    "XavierUniform",
    "constant",
    "kaiming_normal",
    "kaiming_uniform",
    "normal",
    "ones",
    "trunc_normal",
    "uniform",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
]

FanMode = Literal["fan_in", "fan_out"]


class Initializer(ABC):
    """An initializer: resolves to a :class:`BaseInit` for a given global shape."""

    @abstractmethod
    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        """The base initializer for a parameter of ``global_shape``.

        Raises:
            ValueError: fan-based initializers on shapes with fewer than 2 dims (as torch).
        """


class BaseInit(Initializer):
    """One of the initializers of stream format v1 (SPEC §4)."""

    kind: str

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        return self

    @abstractmethod
    def params(self) -> tuple[float, float, float, float]:
        """The four parameters passed to the core, in its order."""


@dataclass(frozen=True)
class Constant(BaseInit):
    """Every element equal to ``value``; consumes no stream words."""

    value: float
    kind = "constant"

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", check_real("value", self.value))

    def params(self) -> tuple[float, float, float, float]:
        return (self.value, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Uniform(BaseInit):
    """``a + (b - a) * U``: U24 for one-word dtypes, U52 for float64."""

    a: float = 0.0
    b: float = 1.0
    kind = "uniform"

    def __post_init__(self) -> None:
        a = check_real("a", self.a)
        b = check_real("b", self.b)
        if not a < b:
            raise ShardInitError(f"uniform needs a < b, got a={a}, b={b}")
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)

    def params(self) -> tuple[float, float, float, float]:
        return (self.a, self.b, 0.0, 0.0)


@dataclass(frozen=True)
class Normal(BaseInit):
    """``mean + std * PhiInv(U)``: U32 for one-word dtypes, U52 for float64."""

    mean: float = 0.0
    std: float = 1.0
    kind = "normal"

    def __post_init__(self) -> None:
        mean = check_real("mean", self.mean)
        std = check_real("std", self.std)
        if std < 0:
            raise ShardInitError(f"std must be >= 0, got {std}")
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    def params(self) -> tuple[float, float, float, float]:
        return (self.mean, self.std, 0.0, 0.0)


@dataclass(frozen=True)
class TruncNormal(BaseInit):
    """Normal(mean, std) truncated to [a, b] by inverse-CDF sampling (no rejection)."""

    mean: float = 0.0
    std: float = 1.0
    a: float = -2.0
    b: float = 2.0
    kind = "trunc_normal"

    def __post_init__(self) -> None:
        mean = check_real("mean", self.mean)
        std = check_real("std", self.std)
        a = check_real("a", self.a)
        b = check_real("b", self.b)
        if not std > 0:
            raise ShardInitError(f"trunc_normal needs std > 0, got {std}")
        if not a < b:
            raise ShardInitError(f"trunc_normal needs a < b, got a={a}, b={b}")
        for field, value in (("mean", mean), ("std", std), ("a", a), ("b", b)):
            object.__setattr__(self, field, value)

    def params(self) -> tuple[float, float, float, float]:
        return (self.mean, self.std, self.a, self.b)


def _meta(global_shape: Sequence[int]) -> torch.Tensor:
    # A meta tensor costs nothing and lets torch compute fans with its own code.
    return torch.empty(tuple(global_shape), device="meta")


def _check_mode(mode: str) -> str:
    if mode not in ("fan_in", "fan_out"):
        raise ShardInitError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return mode


def _check_nonlinearity(nonlinearity: str, a: float) -> str:
    # torch.nn.init.calculate_gain raises ValueError for unknown names: surface it now.
    torch.nn.init.calculate_gain(nonlinearity, a)  # type: ignore[arg-type]
    return nonlinearity


@dataclass(frozen=True)
class KaimingUniform(Initializer):
    """He et al. uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(3 / fan)``."""

    a: float = 0.0
    mode: FanMode = "fan_in"
    nonlinearity: str = "leaky_relu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", check_real("a", self.a))
        _check_mode(self.mode)
        _check_nonlinearity(self.nonlinearity, self.a)

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        tensor = _meta(global_shape)
        if 0 in tensor.shape:
            return Constant(0.0)  # nothing to fill, as torch (which warns and returns)
        fan = torch.nn.init._calculate_correct_fan(tensor, self.mode)
        gain = torch.nn.init.calculate_gain(self.nonlinearity, self.a)  # type: ignore[arg-type]
        std = gain / math.sqrt(fan)
        bound = math.sqrt(3.0) * std
        return Uniform(-bound, bound)


@dataclass(frozen=True)
class KaimingNormal(Initializer):
    """He et al. normal: ``N(0, std)``, ``std = gain / sqrt(fan)``."""

    a: float = 0.0
    mode: FanMode = "fan_in"
    nonlinearity: str = "leaky_relu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", check_real("a", self.a))
        _check_mode(self.mode)
        _check_nonlinearity(self.nonlinearity, self.a)

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        tensor = _meta(global_shape)
        if 0 in tensor.shape:
            return Constant(0.0)
        fan = torch.nn.init._calculate_correct_fan(tensor, self.mode)
        gain = torch.nn.init.calculate_gain(self.nonlinearity, self.a)  # type: ignore[arg-type]
        std = gain / math.sqrt(fan)
        return Normal(0.0, std)


@dataclass(frozen=True)
class XavierUniform(Initializer):
    """Glorot uniform: ``U(-a, a)``, ``a = gain * sqrt(6 / (fan_in + fan_out))``."""

    gain: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", check_real("gain", self.gain))

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(_meta(global_shape))
        if fan_in + fan_out == 0:
            return Constant(0.0)
        std = self.gain * math.sqrt(2.0 / float(fan_in + fan_out))
        bound = math.sqrt(3.0) * std
        return Uniform(-bound, bound)


@dataclass(frozen=True)
class XavierNormal(Initializer):
    """Glorot normal: ``N(0, std)``, ``std = gain * sqrt(2 / (fan_in + fan_out))``."""

    gain: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", check_real("gain", self.gain))

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(_meta(global_shape))
        if fan_in + fan_out == 0:
            return Constant(0.0)
        std = self.gain * math.sqrt(2.0 / float(fan_in + fan_out))
        return Normal(0.0, std)


def zeros() -> Constant:
    """All zeros (``torch.nn.init.zeros_``)."""
    return Constant(0.0)


def ones() -> Constant:
    """All ones (``torch.nn.init.ones_``)."""
    return Constant(1.0)


def constant(value: float) -> Constant:
    """Every element ``value`` (``torch.nn.init.constant_``)."""
    return Constant(value)


def uniform(a: float = 0.0, b: float = 1.0) -> Uniform:
    """Uniform on [a, b) (``torch.nn.init.uniform_``); needs a < b."""
    return Uniform(a, b)


def normal(mean: float = 0.0, std: float = 1.0) -> Normal:
    """Normal(mean, std) (``torch.nn.init.normal_``); needs std >= 0."""
    return Normal(mean, std)


def trunc_normal(
    mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0
) -> TruncNormal:
    """Normal(mean, std) truncated to [a, b] (``torch.nn.init.trunc_normal_``; a and b
    are absolute bounds, as in torch)."""
    return TruncNormal(mean, std, a, b)


def kaiming_uniform(
    a: float = 0.0, mode: FanMode = "fan_in", nonlinearity: str = "leaky_relu"
) -> KaimingUniform:
    """``torch.nn.init.kaiming_uniform_`` with fans from the global shape."""
    return KaimingUniform(a, mode, nonlinearity)


def kaiming_normal(
    a: float = 0.0, mode: FanMode = "fan_in", nonlinearity: str = "leaky_relu"
) -> KaimingNormal:
    """``torch.nn.init.kaiming_normal_`` with fans from the global shape."""
    return KaimingNormal(a, mode, nonlinearity)


def xavier_uniform(gain: float = 1.0) -> XavierUniform:
    """``torch.nn.init.xavier_uniform_`` with fans from the global shape."""
    return XavierUniform(gain)


def xavier_normal(gain: float = 1.0) -> XavierNormal:
    """``torch.nn.init.xavier_normal_`` with fans from the global shape."""
    return XavierNormal(gain)
