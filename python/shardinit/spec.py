"""``ParamSpec``: everything that determines a parameter's values."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

import torch

from . import _core
from ._caches import cached
from ._dtypes import DTYPE_SIZES, max_numel
from ._layout import MAX_NDIM
from ._validate import U64_MAX, check_int, check_name, check_seed
from .errors import ShapeTooLargeError, ShardInitError
from .init import BaseInit, Constant, Initializer, Normal, Uniform

__all__ = ["SUPPORTED_DTYPES", "ParamSpec"]

#: torch dtypes of stream format v1, with their names in the core (``torch.float32``:
#: ``"float32"``, ...; the list's one home is :data:`shardinit._dtypes.DTYPE_SIZES`).
SUPPORTED_DTYPES: Mapping[torch.dtype, str] = MappingProxyType(
    {getattr(torch, name): name for name in DTYPE_SIZES}
)


def _check_shape(shape: Any) -> tuple[int, ...]:
    if (
        type(shape) is tuple
        and len(shape) <= MAX_NDIM
        and all(type(size) is int and 0 <= size <= U64_MAX for size in shape)
    ):
        return shape  # what the checks below return for it (the writer's specs: one a call)
    if isinstance(shape, (int, str, bytes)) or not isinstance(shape, (Sequence, torch.Size)):
        raise TypeError(f"shape must be a sequence of ints, got {type(shape).__name__} {shape!r}")
    if len(shape) > MAX_NDIM:
        raise ShardInitError(
            f"shape must have at most {MAX_NDIM} dims (numpy's and Python buffers' limit, "
            f"through which shards are filled), got {len(shape)} dims"
        )
    sizes = tuple(check_int(f"shape[{dim}]", size, low=0) for dim, size in enumerate(shape))
    for dim, size in enumerate(sizes):
        if size > U64_MAX:
            # Even with a zero elsewhere (0 elements), a size must fit the core's u64.
            raise ShapeTooLargeError(
                f"shape[{dim}] = {size} does not fit in 64 bits; stream format v1 sizes "
                f"are at most 2^64 - 1"
            )
    return sizes


def _check_init(init: object) -> Initializer:
    if not isinstance(init, Initializer):
        raise TypeError(
            f"init must be a shardinit.init initializer, got {type(init).__name__} {init!r}"
        )
    return init


def _set_fields(
    spec: ParamSpec,
    name: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    init: Initializer,
    seed: int,
) -> None:
    """Sets the fields of the frozen ``spec`` (into its dict, as object.__setattr__ would
    put them: one update for all, a spec is made per parameter written), then checks
    what depends on the initializer, so that errors surface at construction.

    Kept by hand: 100k specs took 0.50 s so against 0.59 s with one object.__setattr__
    per field (the frozen dataclass route, 18% slower, measured on the 2-core dev box);
    ``__slots__`` would leave no dict for the cached ``key64``."""
    # base_init at once (a cached_property: this fills its cache), as every fill reads it.
    base = init.resolve(shape)
    vars(spec).update(name=name, shape=shape, dtype=dtype, init=init, seed=seed, base_init=base)
    _check_fits_dtype(base, dtype)
    base.check_shape(name, shape)


def _check_fits_dtype(base: BaseInit, dtype: torch.dtype) -> None:
    """Rejects initializers whose values certainly overflow ``dtype`` to +-inf (a constant
    or a uniform bound out of range): stream-format.md §4 would round them to inf without a word."""
    if dtype == torch.float64:
        return
    if isinstance(base, Constant):
        bounds = {"value": base.value}
    elif isinstance(base, Uniform):
        bounds = {"a": base.a, "b": base.b}
    else:
        return  # normal: unbounded tails; trunc_normal: clamped to [a, b] in binary64
    for arg, value in bounds.items():
        if _overflows(value, dtype):
            raise ShardInitError(
                f"init {arg}={value} overflows {dtype} (largest finite value "
                f"{torch.finfo(dtype).max}); every element would be +-inf"
            )


#: float16's largest finite value, the smallest of the supported dtypes' largest.
_FLOAT16_MAX = 65504.0


@cached
def _overflows(value: float, dtype: torch.dtype) -> bool:
    # Round as stream-format.md §4 does: to float32 first, then to the target. (Cached:
    # capture checks every fill it records, mostly with the same few constants.) Up to
    # float16's largest value every dtype here holds it finite, rounded (a row loop
    # fills each row with its own constant: no torch call per row).
    if abs(value) <= _FLOAT16_MAX:
        return False
    rounded = torch.tensor(value, dtype=torch.float64, device="cpu").to(torch.float32).to(dtype)
    return not bool(torch.isfinite(rounded))


@dataclass(frozen=True, init=False)
class ParamSpec:
    """What determines every element of a parameter (stream format: seed, name, global shape,
    dtype, initializer). Immutable and validated on construction.

    Args:
        name: canonical parameter name (non-empty), e.g. ``"layers.0.attention.wq.weight"``.
        shape: the GLOBAL (unsharded) shape.
        dtype: torch.float32, torch.float64, torch.bfloat16 or torch.float16.
        init: an initializer from :mod:`shardinit.init` (default ``normal(0, 1)``).
        seed: the run's seed, an int in [0, 2^64). Required.

    Raises:
        TypeError: an argument of the wrong type, or a missing seed.
        ShardInitError: an empty name, negative sizes, a seed out of range, an
            unsupported dtype, or an initializer that does not apply to the shape.
        ShapeTooLargeError: more elements than stream format v1 can address.

    Example:
        >>> import torch, shardinit
        >>> spec = shardinit.ParamSpec("w", (4, 3), torch.float32,
        ...                            shardinit.init.uniform(-1, 1), seed=0)
        >>> shardinit.full(spec).shape
        torch.Size([4, 3])
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    init: Initializer
    seed: int

    def __init__(
        self,
        name: str,
        shape: Sequence[int],
        dtype: torch.dtype = torch.float32,
        init: Initializer | None = None,
        seed: int | None = None,
    ) -> None:
        if seed is None:
            raise TypeError("ParamSpec needs seed=<int in [0, 2^64)>; there is no default seed")
        name = check_name("name", name)
        shape_tuple = _check_shape(shape)
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__} {dtype!r}")
        if dtype not in SUPPORTED_DTYPES:
            allowed = ", ".join(str(d) for d in SUPPORTED_DTYPES)
            raise ShardInitError(f"dtype must be one of {allowed}, got {dtype}")
        init = _check_init(Normal(0.0, 1.0) if init is None else init)
        seed = check_seed(seed)
        numel = math.prod(shape_tuple)
        largest = max_numel(SUPPORTED_DTYPES[dtype])
        if numel > largest:
            raise ShapeTooLargeError(
                f"shape {shape_tuple} has {numel} elements; stream format v1 addresses at "
                f"most {largest} elements of {dtype}"
            )
        _set_fields(self, name, shape_tuple, dtype, init, seed)

    def with_init(self, init: Initializer) -> ParamSpec:
        """This spec with another initializer, checking only what depends on it (the
        name, shape, dtype and seed are this spec's, checked already): the writer makes
        one per operation it writes.

        Raises:
            TypeError: ``init`` is no initializer.
            ShardInitError: the initializer does not apply to the shape or dtype.
        """
        spec = object.__new__(ParamSpec)
        _set_fields(spec, self.name, self.shape, self.dtype, _check_init(init), self.seed)
        return spec

    def _renamed(self, name: str, init: Initializer) -> ParamSpec:
        """This spec for the parameter ``name`` (checked) with ``init``, an initializer
        equal to this spec's (``==``: so the same checks pass, checked already with this
        one; a name appears in errors only), kept as given: equal initializers may differ
        in a zero's sign (``constant(-0.0) == constant(0.0)``), which the values keep.
        The writer makes one per parameter from one of each shape and default."""
        spec = object.__new__(ParamSpec)
        name = check_name("name", name)
        vars(spec).update(
            name=name,
            shape=self.shape,
            dtype=self.dtype,
            init=init,
            seed=self.seed,
            base_init=init.resolve(self.shape),
            key64=int(_core.key64(self.seed, name)),  # filled here: no cache lock per spec
        )
        return spec

    @cached_property
    def base_init(self) -> BaseInit:
        """The stream-v1 initializer after resolving fans from the global shape."""
        return self.init.resolve(self.shape)

    @cached_property
    def key64(self) -> int:
        """The 64-bit Philox key of this parameter (stream-format.md §1)."""
        return int(_core.key64(self.seed, self.name))

    @property
    def numel(self) -> int:
        """Number of elements of the global shape."""
        return math.prod(self.shape)

    @property
    def dtype_name(self) -> str:
        """The dtype's name in the core (``"float32"``, ...)."""
        return SUPPORTED_DTYPES[self.dtype]
