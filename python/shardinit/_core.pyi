"""Type stub of the compiled extension ``shardinit._core`` (checked by stubtest)."""

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, final

__all__ = [
    "BINARY_OPS",
    "CHUNK_ELEMENTS",
    "LOG_CONSTANTS",
    "PHI_INV_CONSTANTS",
    "STREAM_FORMAT_VERSION",
    "UNARY_OPS",
    "Init",
    "InternalError",
    "Region",
    "RegisterProgram",
    "ShapeTooLargeError",
    "ShardInitError",
    "StartedFills",
    "__version__",
    "_panic_for_test",
    "backend",
    "chunk_range",
    "fill",
    "fill_program",
    "flat_range_term",
    "key64",
    "phi",
    "phi_inv",
    "sampler_constants",
    "start_fills",
    "stream_words",
]

__version__: Final[str]
#: The CPU kernels this machine runs (shardinit_core::Backend::name): "portable", "avx2"
#: or "avx2-philox-avx512-lanes" (AVX2 Philox, transforms compiled for AVX-512F).
backend: Final[str]
STREAM_FORMAT_VERSION: Final[int]
#: Output elements per unit of parallel work: a fill of at most this many elements runs
#: on the calling thread, whatever ``threads`` it is given.
CHUNK_ELEMENTS: Final[int]
#: The constants of the core's ``log`` (fdlibm 5.3 ``e_log.c``: ``LN2_HI``, ``LN2_LO``,
#: ``TWO54``, ``LG1``..``LG7``), read-only, by their fdlibm names, to the bit. Their one
#: home is rust/core/src/math.rs ``LOG_CONSTANTS``; the device kernel is built from here.
LOG_CONSTANTS: Final[Mapping[str, float]]
#: The constants of the core's ``phi_inv`` (AS 241 PPND16: ``A0``..``A7``, ``B1``..``B7``,
#: ``C0``..``C7``, ``D1``..``D7``, ``E0``..``E7``, ``F1``..``F7`` as published, and
#: ``PHI_INV_SPLIT1`` = 0.425), read-only, by name, to the bit. Their one home is
#: rust/core/src/math.rs ``PHI_INV_CONSTANTS``; the device kernel is built from here.
PHI_INV_CONSTANTS: Final[Mapping[str, float]]
#: The names :meth:`RegisterProgram.unary` takes, in the order of its error message. Their one
#: home is rust/core/src/program/ops.rs ``UnaryOp``.
UNARY_OPS: Final[tuple[str, ...]]
#: The names :meth:`RegisterProgram.binary` takes (comparisons give 1.0 or 0.0), in the order of
#: its error message. Their one home is rust/core/src/program/ops.rs ``BinaryOp``.
BINARY_OPS: Final[tuple[str, ...]]

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

@final
class RegisterProgram:
    """An init program (docs/stream-format.md §7): registers computed elementwise, in
    binary64, at each element of a fill's region; the LAST register is the result.

    Each method appends one register and returns its index. Operands are earlier
    registers (SSA). Unknown op or dtype names and operands that are not earlier
    registers raise ``ShardInitError`` naming the argument; what depends on the global
    shape (``coord``'s dim, a table's bounds), an empty program, and ``sin``/``cos`` of an
    argument beyond 2^20·π/2 are refused by :func:`fill_program`.
    """

    def __init__(self) -> None: ...
    def source(self, init: Init, dtype: str) -> int:
        """The value ``init`` gives this element in stream v1 (§3-§4), drawn at the
        element's own global flat index of the destination tensor with the word layout
        of the destination dtype passed to :func:`fill_program` (2 words for float64,
        else 1), rounded to ``dtype``, then read back as binary64."""

    def constant(self, value: float) -> int:
        """The constant ``value`` (NaN and infinities allowed)."""

    def coord(self, dim: int) -> int:
        """The element's global coordinate along ``dim`` (``0 <= dim < ndim``)."""

    def flat(self) -> int:
        """The element's global flat (C-order) index."""

    def table(self, values: Any, strides: list[int], offset: int) -> int:
        """``values[offset + sum_d coord[d] * strides[d]]``: ``values`` is a 1-D
        C-contiguous float64 buffer (copied in); strides may be 0 (broadcast) or
        negative; bounds are checked over the whole global shape at fill time."""

    def unary(self, op: str, x: int) -> int:
        """``op(x)``, op one of ``"neg"``, ``"abs"``, ``"reciprocal"``, ``"sqrt"``,
        ``"rsqrt"``, ``"exp"``, ``"expm1"``, ``"log"``, ``"log1p"``, ``"sin"``, ``"cos"``,
        ``"tanh"``, ``"sigmoid"``, ``"softplus"``, ``"floor"``, ``"erf"``, ``"erfinv"``,
        ``"round_half_even"`` (:data:`UNARY_OPS`)."""

    def binary(self, op: str, a: int, b: int) -> int:
        """``op(a, b)``, op one of ``"add"``, ``"sub"``, ``"mul"``, ``"div"``,
        ``"pow"``, ``"min"``, ``"max"``, ``"floordiv"``, ``"mod"``, ``"lt"``, ``"le"``,
        ``"gt"``, ``"ge"``, ``"eq"``, ``"ne"`` (comparisons give 1.0 or 0.0;
        :data:`BINARY_OPS`)."""

    def where(self, cond: int, a: int, b: int) -> int:
        """``a`` where ``cond != 0`` (NaN counts as non-zero), else ``b``."""

    def round(self, x: int, dtype: str) -> int:
        """``x`` rounded to ``dtype`` by §4's rule, read back as binary64."""

    def __len__(self) -> int: ...

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

@final
class StartedFills:
    """Fills under way on a thread of their own (:func:`start_fills`)."""

    def wait(self) -> None:
        """Waits for the fills to end (GIL released) and raises the first error among
        them in order; then the buffers are free again. A second call returns at once.

        Raises:
            As :func:`fill`, for the first fill refused.
        """

def start_fills(
    fills: Sequence[
        tuple[int, list[int], Init, str, Region, Any]
        | tuple[int, list[int], RegisterProgram, str, Region, Any]
    ],
    threads: int = 1,
) -> StartedFills:
    """Starts :func:`fill` (an ``Init``) or :func:`fill_program` (a ``RegisterProgram``)
    for each of ``fills`` (its arguments but ``threads``) on a new thread and returns at
    once, so the caller goes on while they run, side by side on ``threads``. Every
    buffer is claimed before this returns (as :func:`fill` claims ``out``); until
    ``wait()`` returns, nothing may read or write them.

    Raises:
        ShardInitError: two buffers overlap, or one overlaps a fill still running.
        ValueError: a buffer read-only or not C-contiguous.
        BufferError: a buffer's item format does not match its dtype.
        RuntimeError: the thread could not be started.
    """

def fill_program(
    key: int,
    global_shape: list[int],
    program: RegisterProgram,
    dtype: str,
    region: Region,
    out: Any,
    threads: int = 0,
) -> None:
    """Writes ``region`` of ``program``'s values over the parameter ``(key,
    global_shape)`` into ``out``: the last register, rounded to ``dtype`` by
    stream-format.md §4's rule (NaNs written as the one quiet NaN).

    The arguments, the GIL release and the errors are :func:`fill`'s, plus
    ``ShardInitError`` for an empty program, a ``coord`` dim or a table that does not
    fit ``global_shape``, and ``sin``/``cos`` of an argument beyond 2^20·π/2 (then
    ``out`` is partly written).
    """

def chunk_range(size: int, rank: int, world: int) -> tuple[int, int]: ...
def phi(x: float) -> float: ...
def phi_inv(p: float, q: float) -> float: ...
def flat_range_term(bits: Any, start: int) -> int: ...
def _panic_for_test(message: str) -> None: ...
