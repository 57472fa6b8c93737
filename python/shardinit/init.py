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

import dataclasses
import math
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from . import _core
from ._validate import U64_MAX, check_int, check_real
from .errors import ShardInitError

__all__ = [
    "ORTHOGONAL_MAX_NUMEL",
    "ORTHOGONAL_MAX_NUMEL_ENV",
    "BaseInit",
    "Constant",
    "Initializer",
    "KaimingNormal",
    "KaimingUniform",
    "Normal",
    "Orthogonal",
    "TruncNormal",
    "Uniform",
    "XavierNormal",
    "XavierUniform",
    "constant",
    "kaiming_normal",
    "kaiming_uniform",
    "normal",
    "ones",
    "orthogonal",
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
    """One of the initializers of stream format v1 (stream-format.md §4)."""

    kind: str
    #: Whether an element's value depends only on its own stream position (then any
    #: region, or any part of one, is computed on its own). Orthogonal's is not.
    elementwise: ClassVar[bool] = True

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        return self

    def check_shape(self, name: str, shape: Sequence[int]) -> None:
        """Refuses a global ``shape`` the initializer cannot fill, naming the parameter
        ``name`` (every shape, but for :class:`Orthogonal`)."""
        del name, shape  # an elementwise initializer fills every shape

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
        if not math.isfinite(b - a):
            # a + (b - a) * U would be +-inf or NaN for every element.
            raise ShardInitError(f"uniform needs b - a to be finite, got a={a}, b={b}")
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
        if not math.isfinite(abs(mean) + _MAX_ABS_Z * std):
            # |PhiInv(U)| <= 8.3 for every U of stream-format.md §3: larger values would overflow.
            raise ShardInitError(
                f"std={std} with mean={mean} overflows binary64 (|mean| + 9 * std must be finite)"
            )
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
        _check_tail(mean, std, a, b)
        _check_resolution(mean, std, a, b)
        for field, value in (("mean", mean), ("std", std), ("a", a), ("b", b)):
            object.__setattr__(self, field, value)

    def params(self) -> tuple[float, float, float, float]:
        return (self.mean, self.std, self.a, self.b)


def core_init(base: BaseInit) -> _core.Init:
    """``base`` as the core's typed initializer (validated again by the core): the one
    place where the Python initializers meet the core's. Internal (not in ``__all__``):
    the fills pass the result to ``_core.fill``, the device kernel to
    ``_core.sampler_constants``."""
    if isinstance(base, Constant):
        return _core.Init.constant(base.value)
    if isinstance(base, Uniform):
        return _core.Init.uniform(base.a, base.b)
    if isinstance(base, Normal):
        return _core.Init.normal(base.mean, base.std)
    if isinstance(base, TruncNormal):
        return _core.Init.trunc_normal(base.mean, base.std, base.a, base.b)
    if isinstance(base, Orthogonal):
        return _core.Init.orthogonal(base.gain, base.cap())
    raise TypeError(f"not a base initializer of stream format v1: {base!r}")


#: The default cap on an orthogonal parameter's elements (2^26, an 8192 x 8192 matrix):
#: every rank that fills any part of it computes the whole matrix in binary64.
ORTHOGONAL_MAX_NUMEL = 2**26
#: The environment variable that overrides :data:`ORTHOGONAL_MAX_NUMEL` (an int >= 1)
#: for orthogonal initializers built without ``max_numel``.
ORTHOGONAL_MAX_NUMEL_ENV = "SHARDINIT_ORTHOGONAL_MAX_NUMEL"


@dataclass(frozen=True)
class Orthogonal(BaseInit):
    """torch's ``orthogonal_`` times ``gain`` (stream-format.md §4.5): the parameter,
    flattened to ``(rows, numel / rows)``, is the Q of a deterministic Householder QR of
    its float64 normal(0, 1) matrix from the stream (transposed when rows < cols), with
    torch's sign correction. Not elementwise: every fill computes the whole matrix, so
    parameters above :meth:`cap` elements are refused.

    ``max_numel`` (None: ``$SHARDINIT_ORTHOGONAL_MAX_NUMEL``, else
    :data:`ORTHOGONAL_MAX_NUMEL`) changes no value, so it takes no part in equality.
    """

    gain: float = 1.0
    max_numel: int | None = dataclasses.field(default=None, compare=False)
    kind = "orthogonal"
    elementwise: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", check_real("gain", self.gain))
        if self.max_numel is not None:
            cap = check_int("max_numel", self.max_numel, low=1, high=U64_MAX)
            object.__setattr__(self, "max_numel", cap)

    def params(self) -> tuple[float, float, float, float]:
        return (self.gain, 0.0, 0.0, 0.0)

    def cap(self) -> int:
        """The largest element count allowed: ``max_numel``, else the environment
        variable ``SHARDINIT_ORTHOGONAL_MAX_NUMEL``, else 2^26.

        Raises:
            ShardInitError: the environment variable is not an int in [1, 2^64 - 1].
        """
        if self.max_numel is not None:
            return self.max_numel
        text = os.environ.get(ORTHOGONAL_MAX_NUMEL_ENV)
        if text is None:
            return ORTHOGONAL_MAX_NUMEL
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= U64_MAX:
            raise ShardInitError(
                f"the environment variable {ORTHOGONAL_MAX_NUMEL_ENV} must be an int in "
                f"[1, {U64_MAX}], got {text!r}"
            )
        return value

    def check_shape(self, name: str, shape: Sequence[int]) -> None:
        """Refuses shapes torch's ``orthogonal_`` refuses (fewer than 2 dims) and shapes
        above :meth:`cap` elements, naming the parameter ``name``."""
        shape = tuple(shape)
        if len(shape) < 2:
            raise ShardInitError(
                f"parameter {name!r}: init orthogonal needs a shape with at least 2 dims "
                f"(torch: 'Only tensors with 2 or more dimensions are supported'), got "
                f"shape {shape}"
            )
        numel, cap = math.prod(shape), self.cap()
        if numel > cap:
            raise ShardInitError(
                f"parameter {name!r}: orthogonal init of shape {shape} has {numel} "
                f"elements, above the cap of {cap} (every rank computes the whole matrix "
                f"in binary64, {8 * numel} bytes); raise the cap with "
                f"shardinit.init.orthogonal(max_numel=...) or the environment variable "
                f"{ORTHOGONAL_MAX_NUMEL_ENV}"
            )


#: Bound on |PhiInv(U)| over every U of stream-format.md §3 (PhiInv(2^-53) is about -8.2).
_MAX_ABS_Z = 9.0


def _check_tail(mean: float, std: float, a: float, b: float) -> None:
    """Rejects a truncation interval so far in one tail that the probabilities of
    stream-format.md §4 leave binary64's normal range (about 37.5 std): there the core can no longer
    keep precision, and past about 38.5 std it would return ``b`` (or ``a``) for every
    element."""
    alpha = (a - mean) / std
    beta = (b - mean) / std
    distance = alpha if alpha > 0 else -beta if beta < 0 else 0.0
    if 0.5 * math.erfc(distance / math.sqrt(2.0)) < sys.float_info.min:
        raise ShardInitError(
            f"trunc_normal interval [a, b] = [{a}, {b}] lies {distance:.4g} std from the "
            f"mean {mean}; its probability underflows binary64 (at most about 37.5 std "
            f"is supported)"
        )


#: Fewest distinct values the inverse-CDF sampler must resolve in [a, b] (float32's).
_MIN_LEVELS = 2.0**24


def _check_resolution(mean: float, std: float, a: float, b: float) -> None:
    """Rejects a truncation interval so narrow against ``std`` that the sampler of
    stream-format.md §4 cannot resolve it: its probability is added to ``Phi(al)`` (or
    ``Phi(-be)``) in binary64, so an interval of mass below that value's ulp collapses
    to a few values (``std=1e30, a=-1, b=1`` gives all zeros where eager torch gives
    nearly uniform values in [a, b])."""
    alpha, beta = (a - mean) / std, (b - mean) / std
    lower = 0.5 * math.erfc(-alpha / math.sqrt(2.0))
    upper = 0.5 * math.erfc(beta / math.sqrt(2.0))
    if alpha >= 0:
        mass = 0.5 * math.erfc(alpha / math.sqrt(2.0)) - upper
    elif beta <= 0:
        mass = 0.5 * math.erfc(-beta / math.sqrt(2.0)) - lower
    else:
        mass = 0.5 * (math.erf(beta / math.sqrt(2.0)) + math.erf(-alpha / math.sqrt(2.0)))
    start = min(min(lower, upper) + mass, 0.5)
    levels = mass / (start * sys.float_info.epsilon) if mass > 0 else 0.0
    if levels < _MIN_LEVELS:
        raise ShardInitError(
            f"trunc_normal interval [a, b] = [{a}, {b}] is too narrow for std={std} "
            f"(mean {mean}): its probability {mass:.3g} leaves the sampler about "
            f"{levels:.3g} distinct values in it (at least 2**24 are needed); eager torch "
            "gives nearly uniform values there: use uniform(a, b) (nn.init.uniform_)"
        )


def fan_in_and_fan_out(global_shape: Sequence[int], initializer: str) -> tuple[int, int]:
    """(fan_in, fan_out) of ``global_shape`` exactly as
    ``torch.nn.init._calculate_fan_in_and_fan_out`` computes them (Python ints), without
    building a tensor: torch refuses meta tensors of more than 2^63 bytes, and virtual
    shapes of stream format v1 go up to 2^64 - 1 elements."""
    shape = tuple(global_shape)
    if len(shape) < 2:
        raise ShardInitError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 "
            f"dimensions (torch's own error): init {initializer} needs a shape with at "
            f"least 2 dims, got shape {shape}"
        )
    receptive_field_size = math.prod(shape[2:])
    return shape[1] * receptive_field_size, shape[0] * receptive_field_size


def _check_mode(mode: str) -> str:
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, got {type(mode).__name__} {mode!r}")
    if mode not in ("fan_in", "fan_out"):
        raise ShardInitError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return mode


def _check_nonlinearity(nonlinearity: str, a: float) -> str:
    if not isinstance(nonlinearity, str):
        raise TypeError(
            f"nonlinearity must be a str, got {type(nonlinearity).__name__} {nonlinearity!r}"
        )
    try:
        # torch.nn.init.calculate_gain raises ValueError for unknown names.
        torch.nn.init.calculate_gain(nonlinearity, a)  # type: ignore[arg-type]
    except ValueError as error:
        raise ShardInitError(
            f"nonlinearity must be one torch.nn.init.calculate_gain accepts, got "
            f"{nonlinearity!r} ({error})"
        ) from None
    return nonlinearity


def _check_gain(gain: float) -> float:
    gain = check_real("gain", gain)
    if gain < 0:
        raise ShardInitError(f"gain must be >= 0, got {gain}")
    return gain


def uniform_or_constant(a: float, b: float) -> BaseInit:
    """What torch's ``uniform_(a, b)`` fills: ``U(a, b)``, or the constant ``a`` when
    ``a == b`` (torch computes ``a + (b - a) * u``; shardinit's Uniform needs a < b).
    ``a + 0.0`` is that sum for ``u``'s zero weight: it turns -0.0 into 0.0, as torch does.

    Internal (not in ``__all__``): the one home of this rule for torch.nn's defaults and
    for captured ``uniform_`` calls.

    Example:
        >>> uniform_or_constant(-0.0, 0.0), uniform_or_constant(-1.0, 1.0)
        (Constant(value=0.0), Uniform(a=-1.0, b=1.0))
    """
    return Constant(a + 0.0) if a == b else Uniform(a, b)


def _uniform_bound(bound: float, arg: str) -> BaseInit:
    """``U(-bound, bound)``; a zero bound (torch fills zeros) is the constant 0."""
    if not math.isfinite(2.0 * bound):
        # The width b - a = 2 * bound must be finite too (see Uniform).
        raise ShardInitError(f"{arg} gives a bound {bound} too large for U(-bound, bound)")
    return uniform_or_constant(-bound, bound)


def _normal_std(std: float, arg: str) -> BaseInit:
    if not math.isfinite(std):
        raise ShardInitError(f"{arg} gives an infinite std for N(0, std)")
    return Normal(0.0, std)


def _kaiming_std(init: _Kaiming, global_shape: Sequence[int], name: str) -> float | None:
    """torch's Kaiming ``std = gain / sqrt(fan)`` for ``global_shape``; None for a shape
    with a zero size (nothing to fill: torch warns and returns before computing fans)."""
    if 0 in tuple(global_shape):
        return None
    fan_in, fan_out = fan_in_and_fan_out(global_shape, name)
    fan = fan_in if init.mode == "fan_in" else fan_out
    gain = torch.nn.init.calculate_gain(init.nonlinearity, init.a)  # type: ignore[arg-type]
    return gain / math.sqrt(fan)


def _xavier_std(gain: float, global_shape: Sequence[int], name: str) -> float | None:
    """torch's Glorot ``std = gain * sqrt(2 / (fan_in + fan_out))``; None when both fans
    are 0 (nothing to fill)."""
    fan_in, fan_out = fan_in_and_fan_out(global_shape, name)
    if fan_in + fan_out == 0:
        return None
    return gain * math.sqrt(2.0 / float(fan_in + fan_out))


def _of_std(std: float | None, uniform: bool, arg: str) -> BaseInit:
    """``U(-sqrt(3) std, sqrt(3) std)`` (``uniform``) or ``N(0, std)``, as torch's
    fan-based initializers draw; zeros when there is nothing to fill (``std`` None)."""
    if std is None:
        return Constant(0.0)
    return _uniform_bound(math.sqrt(3.0) * std, arg) if uniform else _normal_std(std, arg)


@dataclass(frozen=True)
class _FanBased(Initializer):
    """What the Kaiming and Xavier initializers share: a std from the fans of the global
    shape (``std``), drawn as ``U(-sqrt(3) std, sqrt(3) std)`` (``UNIFORM``) or
    ``N(0, std)`` (:func:`_of_std`), named ``<FAMILY>_uniform`` / ``<FAMILY>_normal``."""

    FAMILY: ClassVar[str]
    UNIFORM: ClassVar[bool]

    def std(self, global_shape: Sequence[int], name: str) -> float | None:
        raise NotImplementedError

    def shown(self, name: str) -> str:
        """The argument a refusal of a non-finite std names."""
        raise NotImplementedError

    def resolve(self, global_shape: Sequence[int]) -> BaseInit:
        name = f"{self.FAMILY}_{'uniform' if self.UNIFORM else 'normal'}"
        return _of_std(self.std(global_shape, name), self.UNIFORM, self.shown(name))


@dataclass(frozen=True)
class _Kaiming(_FanBased):
    """The arguments and checks of both Kaiming initializers (``UNIFORM``: which one)."""

    a: float = 0.0
    mode: FanMode = "fan_in"
    nonlinearity: str = "leaky_relu"
    FAMILY: ClassVar[str] = "kaiming"

    def __post_init__(self) -> None:
        object.__setattr__(self, "a", check_real("a", self.a))
        _check_mode(self.mode)
        _check_nonlinearity(self.nonlinearity, self.a)

    def std(self, global_shape: Sequence[int], name: str) -> float | None:
        return _kaiming_std(self, global_shape, name)

    def shown(self, name: str) -> str:
        return f"{name}(a={self.a})"


@dataclass(frozen=True)
class KaimingUniform(_Kaiming):
    """He et al. uniform: ``U(-bound, bound)``, ``bound = gain * sqrt(3 / fan)``."""

    UNIFORM: ClassVar[bool] = True


@dataclass(frozen=True)
class KaimingNormal(_Kaiming):
    """He et al. normal: ``N(0, std)``, ``std = gain / sqrt(fan)``."""

    UNIFORM: ClassVar[bool] = False


@dataclass(frozen=True)
class _Xavier(_FanBased):
    """The argument and check of both Xavier initializers (``UNIFORM``: which one)."""

    gain: float = 1.0
    FAMILY: ClassVar[str] = "xavier"

    def __post_init__(self) -> None:
        object.__setattr__(self, "gain", _check_gain(self.gain))

    def std(self, global_shape: Sequence[int], name: str) -> float | None:
        return _xavier_std(self.gain, global_shape, name)

    def shown(self, name: str) -> str:
        return f"gain={self.gain}"


@dataclass(frozen=True)
class XavierUniform(_Xavier):
    """Glorot uniform: ``U(-a, a)``, ``a = gain * sqrt(6 / (fan_in + fan_out))``."""

    UNIFORM: ClassVar[bool] = True


@dataclass(frozen=True)
class XavierNormal(_Xavier):
    """Glorot normal: ``N(0, std)``, ``std = gain * sqrt(2 / (fan_in + fan_out))``."""

    UNIFORM: ClassVar[bool] = False


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


def orthogonal(gain: float = 1.0, max_numel: int | None = None) -> Orthogonal:
    """``torch.nn.init.orthogonal_`` (same flattening, transposition, sign correction
    and gain) from a deterministic QR: the same matrix on every rank, layout, thread
    count and CPU. ``gain`` is any finite number. Parameters of more than ``max_numel``
    elements (default ``$SHARDINIT_ORTHOGONAL_MAX_NUMEL`` or 2^26) are refused: every
    rank computes the whole matrix (8 bytes per element) and keeps its region."""
    return Orthogonal(gain, max_numel)


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
