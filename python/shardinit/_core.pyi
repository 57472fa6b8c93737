"""Type stub of the compiled extension ``shardinit._core`` (checked by stubtest)."""

from typing import Any, ClassVar, Final, final

__all__ = [
    "STREAM_FORMAT_VERSION",
    "Init",
    "InternalError",
    "Region",
    "ShapeTooLargeError",
    "ShardInitError",
    "__version__",
    "_panic_for_test",
    "backend",
    "chunk_range",
    "fill",
    "key64",
    "phi",
    "phi_inv",
    "sampler_constants",
    "stream_words",
]

__version__: Final[str]
#: The CPU kernels this machine runs (shardinit_core::Backend::name): "portable", "avx2"
#: or "avx2-philox-avx512-lanes" (AVX2 Philox, transforms compiled for AVX-512F).
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
    @staticmethod
    def orthogonal(gain: float, max_numel: int) -> Init:
        """torch's ``orthogonal_`` times ``gain`` (stream-format.md §4.5): not elementwise,
        every fill computes the whole matrix (refused, ``ShardInitError``, above
        ``max_numel`` elements or below 2 dims)."""
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

@final
class Region:
    """A region of a parameter's global tensor: what a :func:`fill`'s ``out`` holds."""

    @staticmethod
    def box(ranges: list[tuple[int, int]], offset: int | None = None) -> Region:
        """The box ``ranges`` (one ``(start, stop)`` per dim) in C order: all of it when
        ``offset`` is None, else its elements ``[offset, offset + len(out))``."""

    @staticmethod
    def flat(start: int) -> Region:
        """Flat elements ``[start, start + len(out))`` of the row-major flattened tensor."""

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
        ShardInitError: ``init`` has no per-element sampler (``orthogonal``).
    """

def key64(seed: int, name: str) -> int: ...
def stream_words(key: int, start: int, out: Any) -> None: ...
def fill(
    key: int,
    global_shape: list[int],
    init: Init,
    dtype: str,
    region: Region,
    out: Any,
    threads: int = 0,
) -> None:
    """Writes ``region`` of the parameter ``(key, global_shape, init)`` into ``out``.

    Args:
        key: the parameter's key64 (stream-format.md §1).
        global_shape: the global (unsharded) shape.
        init: the base initializer.
        dtype: ``"float32"``, ``"float64"``, ``"bfloat16"`` or ``"float16"``.
        region: what ``out`` holds (a box, a part of one, or a flat range).
        out: a writable C-contiguous buffer with ``dtype``'s item size (numpy
            ``float32``/``float64``, ``int16`` for the 16-bit dtypes). Concurrent writes to
            the same memory are not allowed: the GIL is released while the core writes
            ``out``, so nothing else may read or write it until the call returns.
        threads: worker threads; 0 for every CPU.

    Raises:
        ShardInitError: ``dtype`` unknown; a region that does not fit the shape or
            ``out``; ``out`` overlaps the memory of another fill still running.
        ShapeTooLargeError: the shape has more elements than v1 can address.
        ValueError: ``out`` read-only or not C-contiguous.
        BufferError: ``out``'s item format does not match ``dtype``.
        RuntimeError: the worker threads could not be started.
    """

def chunk_range(size: int, rank: int, world: int) -> tuple[int, int]: ...
def phi(x: float) -> float: ...
def phi_inv(p: float, q: float) -> float: ...
def _panic_for_test(message: str) -> None: ...
