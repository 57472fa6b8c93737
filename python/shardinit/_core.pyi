"""Type stub of the compiled extension ``shardinit._core`` (checked by stubtest)."""

from typing import Any, ClassVar, Final, final

__all__ = [
    "STREAM_FORMAT_VERSION",
    "Init",
    "InternalError",
    "ShapeTooLargeError",
    "ShardInitError",
    "__version__",
    "_panic_for_test",
    "backend",
    "chunk_range",
    "fill_box",
    "fill_flat",
    "key64",
    "phi",
    "phi_inv",
    "sampler_constants",
    "stream_words",
]

__version__: Final[str]
backend: Final[str]
STREAM_FORMAT_VERSION: Final[int]

class ShardInitError(ValueError): ...
class ShapeTooLargeError(ShardInitError): ...
class InternalError(RuntimeError): ...

@final
class Init:
    """A validated base initializer of stream-format.md §4, as the core holds it.

    Built by one of the static constructors; each raises ``ShardInitError`` naming the
    argument for non-finite values, ``std < 0`` (``std <= 0`` for ``trunc_normal``) or
    ``a >= b``. Equal when the parameters are equal.
    """

    @staticmethod
    def constant(value: float) -> Init: ...
    @staticmethod
    def uniform(a: float, b: float) -> Init: ...
    @staticmethod
    def normal(mean: float, std: float) -> Init: ...
    @staticmethod
    def trunc_normal(mean: float, std: float, a: float, b: float) -> Init: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

def sampler_constants(init: Init) -> dict[str, float]:
    """The constants the core's sampler for ``init`` precomputes, by name, to the bit.

    The same for every dtype (the dtype only picks the uniform map of stream-format.md
    §3). Keys, in this order:

    * constant: ``value``
    * uniform: ``a``, ``width`` (``b - a``)
    * normal: ``mean``, ``std``
    * trunc_normal: ``mean``, ``std``, ``a``, ``b``, ``lower_cdf`` (``Phi(al)``),
      ``upper_tail`` (``Phi(-be)``), ``mass`` (``Phi(be) - Phi(al)``, computed without
      cancellation), with ``al = (a - mean) / std`` and ``be = (b - mean) / std``.

    A sample of trunc_normal for a uniform ``u`` (U32 or U52) is then
    ``t = lower_cdf + u * mass``; ``x = PhiInv(t)`` if ``t <= 0.5`` else
    ``-PhiInv(upper_tail + (1 - u) * mass)``; ``min(max(mean + std * x, a), b)``.

    Raises:
        ShardInitError: ``init`` is invalid (cannot happen for a built ``Init``).
    """

def key64(seed: int, name: str) -> int: ...
def stream_words(key: int, start: int, out: Any) -> None: ...
def fill_box(
    key: int,
    global_shape: list[int],
    init_kind: str,
    init_params: tuple[float, float, float, float],
    dtype: str,
    region: list[tuple[int, int]],
    out_offset: int | None,
    out: Any,
    threads: int = 0,
) -> None: ...
def fill_flat(
    key: int,
    global_shape: list[int],
    init_kind: str,
    init_params: tuple[float, float, float, float],
    dtype: str,
    start: int,
    out: Any,
    threads: int = 0,
) -> None: ...
def chunk_range(size: int, rank: int, world: int) -> tuple[int, int]: ...
def phi(x: float) -> float: ...
def phi_inv(p: float, q: float) -> float: ...
def _panic_for_test(message: str) -> None: ...
