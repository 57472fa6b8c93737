# Triton DSL: parameters are typed by Triton annotations (tl.uint64, tl.constexpr), and
# triton ships no type information.
# mypy: disable-error-code="no-untyped-def, untyped-decorator, import-untyped"
"""The stream-v1 fill kernel in Triton: Philox words, the initializer's transform and the
rounding to the dtype, fused, on the CUDA device (docs/gpu.md).

Every value is to be bit for bit the value of the Rust core (docs/stream-format.md
§2-§4; proven in Triton's interpreter and by the PTX checks, a GPU run pending:
docs/gpu.md): each lane performs exactly the operations of ``rust/core/src/init.rs``
(``Sampler``, ``TruncNormal::sample``, the U24/U32/U52 maps, ``bf16_bits_from_f32``,
``f16_bits_from_f32``) and ``math.rs`` (``phi_inv``: AS 241 with fdlibm's ``log``) in the
same order, as correctly rounded binary64 ``+ - * /`` and ``sqrt``. Where the core
branches, the kernel computes every branch and selects per lane with ``tl.where``; a lane
still takes exactly the operations of its own branch.

This module imports triton; import it only when a CUDA fill needs it.

Rules that keep GPU bits equal to CPU bits (each was hit by a prototype):

1. Module-level constants are ``NAME = tl.constexpr(value)``. The interpreter accepts
   ``NAME: tl.constexpr = value``; the compiler rejects it.
2. A Python float literal is exact only where it meets a float64 tensor (it is then
   converted to float64). A literal with no tensor type to follow becomes float32:
   ``tl.where(far, 5.0, 1.6)`` or ``tl.full(shape, c)`` without a dtype. Write
   ``tl.full((), c, tl.float64)`` (see ``_f64``). In comparisons Triton 3.6 rounds even
   a literal that meets a float64 tensor to float32 (``x <= 0.425`` tested against
   0.42500001...; 3.9 does not), so a literal compared with must be exact in float32
   (0.5, 5.0) or written ``_f64(c)``. The same holds for scalar kernel arguments: the
   float ones are annotated ``tl.float64`` (a plain float argument is float32) and only
   ever meet float64 tensors.
3. float64 ``/`` lowers to ``div.rn.f64`` and ``tl.sqrt`` to ``sqrt.rn.f64``, both correctly
   rounded. ``tl.div_rn`` / ``tl.sqrt_rn`` accept float32 only. No libdevice
   (``extern_elementwise``) and no inline PTX: the interpreter refuses both, so CI could
   not check them.
4. No NaN tests in the kernel: Triton compiles with ``NoNaNsFPMath``, so NaN compares may
   be folded away. Valid parameters never produce NaN; the host validates them.
5. Keep the Rust parenthesization of every Horner step and product (Python evaluates
   ``a * b * c`` left to right, as Rust does).
6. Negate with ``x * -1.0``, never ``-x``: Triton lowers ``-x`` to ``0 - x``, which turns
   ``-0.0`` into ``+0.0`` where Rust's negation flips the sign bit.
7. Every launch passes ``enable_fp_fusion=False``: with fusion on, LLVM contracts
   ``a * b + c`` into ``fma`` and ptxas does the same (``--fmad=true``), which changes
   bits. ``tests/cuda`` compiles every variant and checks the PTX for it.
8. Block counters are 64-bit: ``tl.randint4x`` sets the high counter word from a 64-bit
   offset only (a 32-bit offset silently loses the 2^32-block carry).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .. import _core

# Initializer kinds and dtypes, as constexpr selectors of one kernel body.
UNIFORM = tl.constexpr(0)
NORMAL = tl.constexpr(1)
TRUNC_NORMAL = tl.constexpr(2)
FLOAT32 = tl.constexpr(0)
FLOAT64 = tl.constexpr(1)
BFLOAT16 = tl.constexpr(2)
FLOAT16 = tl.constexpr(3)

# The uniform maps' scales (docs/stream-format.md §3).
TWO_POW_M24 = tl.constexpr(1.0 / 16777216.0)
TWO_POW_M32 = tl.constexpr(1.0 / 4294967296.0)
TWO_POW_M53 = tl.constexpr(1.0 / 9007199254740992.0)

# The constants of fdlibm's e_log.c and of AS 241 PPND16 have one home, the Rust core
# (rust/core/src/math.rs `LOG_CONSTANTS`, `PHI_INV_CONSTANTS`), read through `_core`.
_LOG = _core.LOG_CONSTANTS
_PHI_INV = _core.PHI_INV_CONSTANTS
LN2_HI = tl.constexpr(_LOG["LN2_HI"])
LN2_LO = tl.constexpr(_LOG["LN2_LO"])
TWO54 = tl.constexpr(_LOG["TWO54"])
LG1 = tl.constexpr(_LOG["LG1"])
LG2 = tl.constexpr(_LOG["LG2"])
LG3 = tl.constexpr(_LOG["LG3"])
LG4 = tl.constexpr(_LOG["LG4"])
LG5 = tl.constexpr(_LOG["LG5"])
LG6 = tl.constexpr(_LOG["LG6"])
LG7 = tl.constexpr(_LOG["LG7"])
A0 = tl.constexpr(_PHI_INV["A0"])
A1 = tl.constexpr(_PHI_INV["A1"])
A2 = tl.constexpr(_PHI_INV["A2"])
A3 = tl.constexpr(_PHI_INV["A3"])
A4 = tl.constexpr(_PHI_INV["A4"])
A5 = tl.constexpr(_PHI_INV["A5"])
A6 = tl.constexpr(_PHI_INV["A6"])
A7 = tl.constexpr(_PHI_INV["A7"])
B1 = tl.constexpr(_PHI_INV["B1"])
B2 = tl.constexpr(_PHI_INV["B2"])
B3 = tl.constexpr(_PHI_INV["B3"])
B4 = tl.constexpr(_PHI_INV["B4"])
B5 = tl.constexpr(_PHI_INV["B5"])
B6 = tl.constexpr(_PHI_INV["B6"])
B7 = tl.constexpr(_PHI_INV["B7"])
C0 = tl.constexpr(_PHI_INV["C0"])
C1 = tl.constexpr(_PHI_INV["C1"])
C2 = tl.constexpr(_PHI_INV["C2"])
C3 = tl.constexpr(_PHI_INV["C3"])
C4 = tl.constexpr(_PHI_INV["C4"])
C5 = tl.constexpr(_PHI_INV["C5"])
C6 = tl.constexpr(_PHI_INV["C6"])
C7 = tl.constexpr(_PHI_INV["C7"])
D1 = tl.constexpr(_PHI_INV["D1"])
D2 = tl.constexpr(_PHI_INV["D2"])
D3 = tl.constexpr(_PHI_INV["D3"])
D4 = tl.constexpr(_PHI_INV["D4"])
D5 = tl.constexpr(_PHI_INV["D5"])
D6 = tl.constexpr(_PHI_INV["D6"])
D7 = tl.constexpr(_PHI_INV["D7"])
E0 = tl.constexpr(_PHI_INV["E0"])
E1 = tl.constexpr(_PHI_INV["E1"])
E2 = tl.constexpr(_PHI_INV["E2"])
E3 = tl.constexpr(_PHI_INV["E3"])
E4 = tl.constexpr(_PHI_INV["E4"])
E5 = tl.constexpr(_PHI_INV["E5"])
E6 = tl.constexpr(_PHI_INV["E6"])
E7 = tl.constexpr(_PHI_INV["E7"])
F1 = tl.constexpr(_PHI_INV["F1"])
F2 = tl.constexpr(_PHI_INV["F2"])
F3 = tl.constexpr(_PHI_INV["F3"])
F4 = tl.constexpr(_PHI_INV["F4"])
F5 = tl.constexpr(_PHI_INV["F5"])
F6 = tl.constexpr(_PHI_INV["F6"])
F7 = tl.constexpr(_PHI_INV["F7"])
PHI_INV_SPLIT1 = tl.constexpr(_PHI_INV["PHI_INV_SPLIT1"])


@triton.jit
def _f64(value: tl.constexpr):
    """``value`` as a float64 scalar tensor (rule 2)."""
    return tl.full((), value, tl.float64)


@triton.jit
def _pick(take_first, first: tl.constexpr, second: tl.constexpr):
    """Per lane, the float64 constant ``first`` where ``take_first``, else ``second``."""
    return tl.where(take_first, _f64(first), _f64(second))


@triton.jit
def _hi_word(bits):
    """fdlibm ``__HI`` of a non-negative binary64 bit pattern (int64), as int64."""
    return bits >> 32


@triton.jit
def _log(x):
    """fdlibm 5.3 ``__ieee754_log`` of a positive finite binary64 ``x`` (``math.rs``
    ``log``), every branch computed and selected per lane."""
    bits = x.to(tl.int64, bitcast=True)
    subnormal = _hi_word(bits) < 0x00100000
    x = tl.where(subnormal, x * TWO54, x)  # exact: scale subnormals up by 2^54
    k = tl.where(subnormal, -54, 0).to(tl.int64)
    bits = x.to(tl.int64, bitcast=True)
    hx = _hi_word(bits)
    k += (hx >> 20) - 1023
    hx &= 0x000FFFFF
    i = (hx + 0x95F64) & 0x00100000
    x = ((hx | (i ^ 0x3FF00000)) << 32 | (bits & 0xFFFFFFFF)).to(tl.float64, bitcast=True)
    k += i >> 20
    f = x - 1.0
    dk = k.to(tl.float64)
    # |f| < 2^-20.
    tiny_f = (0x000FFFFF & (2 + hx)) < 3
    tiny_r = f * f * (0.5 - 0.33333333333333333 * f)
    tiny_zero_k = f - tiny_r
    tiny_k = dk * LN2_HI - ((tiny_r - dk * LN2_LO) - f)
    zero_f = dk * LN2_HI + dk * LN2_LO
    tiny = tl.where(
        f == 0.0, tl.where(k == 0, _f64(0.0), zero_f), tl.where(k == 0, tiny_zero_k, tiny_k)
    )
    # The general case.
    s = f / (2.0 + f)
    z = s * s
    ii = hx - 0x6147A
    w = z * z
    j = 0x6B851 - hx
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    ii |= j
    r = t2 + t1
    hfsq = 0.5 * f * f
    big_zero_k = f - (hfsq - s * (hfsq + r))
    big_k = dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f)
    small_zero_k = f - s * (f - r)
    small_k = dk * LN2_HI - ((s * (f - r) - dk * LN2_LO) - f)
    general = tl.where(
        ii > 0, tl.where(k == 0, big_zero_k, big_k), tl.where(k == 0, small_zero_k, small_k)
    )
    return tl.where(tiny_f, tiny, general)


@triton.jit
def _phi_inv_central(p):
    """AS 241's central approximation (``math.rs`` ``phi_inv_central``)."""
    d = p - 0.5
    r = 0.180625 - d * d
    num = ((((((A7 * r + A6) * r + A5) * r + A4) * r + A3) * r + A2) * r + A1) * r + A0
    den = ((((((B7 * r + B6) * r + B5) * r + B4) * r + B3) * r + B2) * r + B1) * r + 1.0
    return d * num / den


@triton.jit
def _phi_inv_tail(p, q):
    """AS 241's tails (``math.rs`` ``phi_inv_tail``) for ``0 < min(p, q)``: the C/D set
    where ``r <= 5``, the E/F set where ``r > 5``, chosen per lane and evaluated once."""
    lower = p < 0.5
    s = tl.where(lower, p, q)
    r = tl.sqrt(_log(s) * -1.0)
    far = r > 5.0
    r = tl.where(far, r - 5.0, r - 1.6)
    num = _pick(far, E7, C7) * r + _pick(far, E6, C6)
    num = num * r + _pick(far, E5, C5)
    num = num * r + _pick(far, E4, C4)
    num = num * r + _pick(far, E3, C3)
    num = num * r + _pick(far, E2, C2)
    num = num * r + _pick(far, E1, C1)
    num = num * r + _pick(far, E0, C0)
    den = _pick(far, F7, D7) * r + _pick(far, F6, D6)
    den = den * r + _pick(far, F5, D5)
    den = den * r + _pick(far, F4, D4)
    den = den * r + _pick(far, F3, D3)
    den = den * r + _pick(far, F2, D2)
    den = den * r + _pick(far, F1, D1)
    den = den * r + 1.0
    v = num / den
    return tl.where(lower, v * -1.0, v)


@triton.jit
def phi_inv(p, q):
    """``math.rs`` ``phi_inv(p, q)`` for float64 ``p`` in (0, 1) with ``q = 1 - p``
    exact (no NaN, no 0 or 1: rule 4)."""
    central = tl.abs(p - 0.5) <= _f64(PHI_INV_SPLIT1)  # rule 2: 0.425 is not a float32
    return tl.where(central, _phi_inv_central(p), _phi_inv_tail(p, q))


@triton.jit
def bf16_bits_from_f32(x):
    """``init.rs`` ``bf16_bits_from_f32_not_nan``: round-to-nearest-even bfloat16 bits of
    a float32 that is not NaN, with integer operations, as uint32 (rule 4)."""
    bits = x.to(tl.uint32, bitcast=True)
    return (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16


@triton.jit
def f16_bits_from_f32(x):
    """``init.rs`` ``f16_bits_from_f32`` of a float32 that is not NaN (IEEE round to
    nearest even, subnormals, overflow to infinity), with integer operations, as uint32."""
    bits = x.to(tl.uint32, bitcast=True)
    sign = (bits >> 16) & 0x8000
    man = bits & 0x007FFFFF
    half_exp = ((bits >> 23) & 0xFF).to(tl.int32) - 112
    normal_round = ((man & 0x1000) != 0) & ((man & 0x2FFF) != 0)
    normal = ((tl.minimum(tl.maximum(half_exp, 0), 31).to(tl.uint32) << 10) | (man >> 13)) + (
        normal_round.to(tl.uint32)
    )
    shift = tl.minimum(tl.maximum(14 - half_exp, 14), 24).to(tl.uint32)
    significand = man | 0x00800000
    round_bit = tl.full((), 1, tl.uint32) << (shift - 1)
    sub_round = ((significand & round_bit) != 0) & ((significand & (3 * round_bit - 1)) != 0)
    subnormal = (significand >> shift) + sub_round.to(tl.uint32)
    magnitude = tl.where(
        half_exp >= 0x1F,
        0x7C00,
        tl.where(half_exp > 0, normal, tl.where(half_exp >= -10, subnormal, 0)),
    ).to(tl.uint32)
    return sign | magnitude


@triton.jit
def _sample(u, KIND: tl.constexpr, a, width, mean, std, b, lower_cdf, upper_tail, mass):
    """The binary64 value of ``Sampler::one_word`` / ``two_words`` from its uniform ``u``
    (U24 / U52 for uniform, U32 / U52 otherwise). The float arguments are the core's
    sampler constants (``_core.sampler_constants``), by their names there; a kind
    reads only its own."""
    if KIND == UNIFORM:
        value = a + width * u
    elif KIND == NORMAL:
        value = mean + std * phi_inv(u, 1.0 - u)
    else:
        # TruncNormal::sample
        t = lower_cdf + u * mass
        lower = t <= 0.5
        q = upper_tail + (1.0 - u) * mass
        p = tl.where(lower, t, q)
        x = phi_inv(p, 1.0 - p)
        x = tl.where(lower, x, x * -1.0)
        # The bounds as float64 tensors (``* 1.0`` is exact, -0.0 included) before they
        # meet min/max, which Triton 3.6's interpreter would take in float32 (rule 2).
        value = tl.minimum(tl.maximum(mean + std * x, a * _f64(1.0)), b * _f64(1.0))
    return value


@triton.jit
def _one_word_uniform(words, KIND: tl.constexpr):
    """U24 for uniform, U32 for the normal kinds (docs/stream-format.md §3)."""
    if KIND == UNIFORM:
        u = (words >> 8).to(tl.float64) * TWO_POW_M24
    else:
        u = (words.to(tl.float64) + 0.5) * TWO_POW_M32
    return u


@triton.jit
def _store(out_ptr, offsets, mask, value, DTYPE: tl.constexpr):
    """Rounds float64 ``value`` to the dtype (docs/stream-format.md §4) and stores it;
    16-bit dtypes are stored as bits through an int16 view."""
    if DTYPE == FLOAT64:
        tl.store(out_ptr + offsets, value, mask=mask)
    elif DTYPE == FLOAT32:
        tl.store(out_ptr + offsets, value.to(tl.float32), mask=mask)
    elif DTYPE == BFLOAT16:
        bits = bf16_bits_from_f32(value.to(tl.float32))
        tl.store(out_ptr + offsets, bits.to(tl.uint16).to(tl.int16, bitcast=True), mask=mask)
    else:
        bits = f16_bits_from_f32(value.to(tl.float32))
        tl.store(out_ptr + offsets, bits.to(tl.uint16).to(tl.int16, bitcast=True), mask=mask)


@triton.jit
def _fill_tile(
    out_ptr,
    out_base,
    key,
    start,
    count,
    tile,
    a,
    width,
    mean,
    std,
    b,
    lower_cdf,
    upper_tail,
    mass,
    KIND: tl.constexpr,
    DTYPE: tl.constexpr,
    BLOCKS: tl.constexpr,
):
    """Elements of the run ``[start, start + count)`` of global indices that fall in tile
    ``tile`` of ``BLOCKS`` whole, aligned Philox blocks, written to ``out_ptr[out_base +
    (index - start)]``. One Philox call per block; its four words are put in stream order
    with two interleaves."""
    key = key.to(tl.uint64)
    start = start.to(tl.uint64)
    count = count.to(tl.uint64)
    tile = tile.to(tl.uint64)
    lanes = tl.arange(0, BLOCKS).to(tl.uint64)
    if DTYPE == FLOAT64:
        # Element i uses words 2i and 2i + 1: lanes (0, 1) or (2, 3) of block i >> 1.
        first = (start & 0xFFFFFFFFFFFFFFFE) + tile * (2 * BLOCKS)
        r0, r1, r2, r3 = tl.randint4x(key, (first >> 1) + lanes)
        w0 = tl.interleave(r0, r2)
        w1 = tl.interleave(r1, r3)
        m = ((w0 >> 6).to(tl.uint64) << 26) | (w1 >> 6).to(tl.uint64)
        u = (2 * m + 1).to(tl.float64) * TWO_POW_M53
        index = first + tl.arange(0, 2 * BLOCKS).to(tl.uint64)
    else:
        first = (start & 0xFFFFFFFFFFFFFFFC) + tile * (4 * BLOCKS)
        r0, r1, r2, r3 = tl.randint4x(key, (first >> 2) + lanes)
        words = tl.interleave(tl.interleave(r0, r2), tl.interleave(r1, r3))
        u = _one_word_uniform(words, KIND)
        index = first + tl.arange(0, 4 * BLOCKS).to(tl.uint64)
    value = _sample(u, KIND, a, width, mean, std, b, lower_cdf, upper_tail, mass)
    mask = (index >= start) & (index < start + count)
    offsets = out_base + (index - start).to(tl.int64, bitcast=True)
    _store(out_ptr, offsets, mask, value, DTYPE)


@triton.jit(do_not_specialize=["key", "start", "count"])
def fill_flat_kernel(
    out_ptr,
    key: tl.uint64,
    start: tl.uint64,
    count: tl.uint64,
    a: tl.float64,
    width: tl.float64,
    mean: tl.float64,
    std: tl.float64,
    b: tl.float64,
    lower_cdf: tl.float64,
    upper_tail: tl.float64,
    mass: tl.float64,
    KIND: tl.constexpr,
    DTYPE: tl.constexpr,
    BLOCKS: tl.constexpr,
):
    """Global elements ``[start, start + count)`` into ``out_ptr[0 : count]``; program
    ``i`` fills tile ``i`` (grid: ``ceil((count + align - 1) / tile)`` programs)."""
    tile = tl.program_id(0)
    _fill_tile(
        out_ptr,
        0,
        key,
        start,
        count,
        tile,
        a,
        width,
        mean,
        std,
        b,
        lower_cdf,
        upper_tail,
        mass,
        KIND,
        DTYPE,
        BLOCKS,
    )


@triton.jit(do_not_specialize=["key", "columns", "row_stride", "tiles_per_row"])
def fill_rows_kernel(
    out_ptr,
    row_starts_ptr,
    key: tl.uint64,
    columns: tl.int64,
    row_stride: tl.int64,
    tiles_per_row: tl.int64,
    a: tl.float64,
    width: tl.float64,
    mean: tl.float64,
    std: tl.float64,
    b: tl.float64,
    lower_cdf: tl.float64,
    upper_tail: tl.float64,
    mass: tl.float64,
    KIND: tl.constexpr,
    DTYPE: tl.constexpr,
    BLOCKS: tl.constexpr,
):
    """An N-d box as rows x columns: row ``r`` is the run of global indices
    ``[row_starts[r], row_starts[r] + columns)`` (``row_starts`` holds the uint64 starts'
    bits as int64), written to ``out_ptr[r * row_stride : r * row_stride + columns]``.
    Program ``i`` fills tile ``i % tiles_per_row`` of row ``i // tiles_per_row``."""
    program = tl.program_id(0).to(tl.int64)
    row = program // tiles_per_row
    tile = program % tiles_per_row
    run_start = tl.load(row_starts_ptr + row).to(tl.uint64, bitcast=True)
    _fill_tile(
        out_ptr,
        row * row_stride,
        key,
        run_start,
        columns,
        tile,
        a,
        width,
        mean,
        std,
        b,
        lower_cdf,
        upper_tail,
        mass,
        KIND,
        DTYPE,
        BLOCKS,
    )
