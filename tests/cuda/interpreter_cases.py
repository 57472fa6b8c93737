"""Bit-exactness of the device kernel in Triton's interpreter, run as a script in a
subprocess by ``test_kernel_interpreter.py``: ``TRITON_INTERPRET=1`` must be set before
triton is imported (``tl.randint4x`` is decorated at import).

The interpreter runs the kernel source on the CPU with numpy, one correctly rounded IEEE
operation per float64 ``+ - * /`` and ``sqrt``, so equal bits here mean the kernel's
operation sequence is the core's. Each case compares the kernel's output on CPU tensors
with the host path (``init_flat`` / ``init_box``) or a reference, and the script prints
one JSON object: case name -> "ok" or what differed.

Usage: ``TRITON_INTERPRET=1 python interpreter_cases.py [--slow]``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import traceback
from collections.abc import Callable

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before importing triton"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import shardinit  # noqa: E402
from shardinit import init  # noqa: E402
from shardinit._cuda import kernel, launch  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INT_VIEW = {
    torch.float32: torch.int32,
    torch.float64: torch.int64,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
}
#: Philox blocks per program for bulk cases: few programs, since the interpreter's cost
#: is mostly per program (the bits never depend on it; ``case_block_sizes`` checks).
BULK_BLOCKS = 4096

CASES: dict[str, Callable[[bool], None]] = {}


def case(fn: Callable[[bool], None]) -> Callable[[bool], None]:
    CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(INT_VIEW[tensor.dtype])


def describe_mismatch(got: torch.Tensor, want: torch.Tensor, what: str) -> str:
    differ = (bits(got) != bits(want)).reshape(-1).nonzero().reshape(-1)
    first = int(differ[0])
    return (
        f"{what}: {differ.numel()} of {want.numel()} differ; first at flat {first}: "
        f"kernel {got.reshape(-1)[first].item()!r} host {want.reshape(-1)[first].item()!r}"
    )


def check_flat(spec: shardinit.ParamSpec, start: int, count: int, blocks: int) -> None:
    out = torch.full((count,), float("nan"), dtype=spec.dtype)
    launch.fill_flat(spec, start, out, blocks=blocks)
    want = shardinit.init_flat(spec, start, start + count)
    if not torch.equal(bits(out), bits(want)):
        raise AssertionError(describe_mismatch(out, want, f"{spec} flat [{start}, +{count})"))


def check_box(spec: shardinit.ParamSpec, box: list[tuple[int, int]], blocks: int) -> None:
    out = torch.full([stop - start for start, stop in box], float("nan"), dtype=spec.dtype)
    launch.fill_box(spec, box, out, blocks=blocks)
    want = shardinit.init_box(spec, box)
    if not torch.equal(bits(out), bits(want)):
        raise AssertionError(describe_mismatch(out, want, f"{spec} box {box}"))


def initializers() -> list[tuple[str, init.Initializer]]:
    """Every base kind, trunc_normal in each region of its sampler, and resolved fan-based
    initializers."""
    return [
        ("uniform", init.uniform(-3.0, 5.0)),
        ("normal", init.normal(0.25, 2.0)),
        ("trunc_normal_straddling", init.trunc_normal(0.1, 1.5, -2.1, 3.3)),
        ("trunc_normal_default", init.trunc_normal(std=0.02)),
        ("trunc_normal_near_tail", init.trunc_normal(0.0, 1.0, 2.0, 3.0)),
        ("trunc_normal_r_above_5", init.trunc_normal(0.0, 1.0, 7.0, 9.0)),
        ("trunc_normal_far_upper", init.trunc_normal(0.0, 1.0, 30.0, 31.0)),
        ("trunc_normal_far_lower", init.trunc_normal(1.0, 0.5, -14.5, -14.0)),
        ("trunc_normal_one_sided", init.trunc_normal(0.0, 1.0, -1e300, 0.5)),
        ("kaiming_uniform", init.kaiming_uniform(a=5**0.5)),
        ("kaiming_normal", init.kaiming_normal()),
        ("xavier_uniform", init.xavier_uniform()),
        ("xavier_normal", init.xavier_normal(gain=2.0)),
        ("constant", init.constant(0.1)),
        ("constant_negative_zero", init.constant(-0.0)),
    ]


@case
def case_dtypes_and_initializers(slow: bool) -> None:
    count = 65536 if slow else 3000
    for dtype in DTYPES:
        for label, initializer in initializers():
            spec = shardinit.ParamSpec(f"w.{label}", (97, 1031), dtype, initializer, seed=11)
            check_flat(spec, 4093, count, BULK_BLOCKS)


@case
def case_golden_values(slow: bool) -> None:
    """docs/stream-format.md §6 through the kernel."""
    out = torch.empty(4, dtype=torch.float32)
    launch.fill_flat(
        shardinit.ParamSpec("w", (4,), torch.float32, init.uniform(0, 1), seed=0), 0, out
    )
    want = torch.tensor([0.17105073, 0.97966427, 0.2126956, 0.7087004], dtype=torch.float32)
    assert torch.equal(out, want), f"uniform golden {out.tolist()}"
    launch.fill_flat(shardinit.ParamSpec("w", (4,), seed=0), 0, out)
    golden_bits = [0xBF733495, 0x4002FFD6, 0xBF4C0EF0, 0x3F0CB212]
    got_bits = [b & 0xFFFFFFFF for b in out.view(torch.int32).tolist()]
    assert got_bits == golden_bits, f"normal f32 golden {[hex(b) for b in got_bits]}"
    out64 = torch.empty(4, dtype=torch.float64)
    launch.fill_flat(shardinit.ParamSpec("w", (4,), torch.float64, seed=0), 0, out64)
    want64 = [-0.9500210761793052, -0.7971028902393957, -1.4398764779387005, 0.4788597673989011]
    for got, correct in zip(out64.tolist(), want64, strict=True):
        ulps = abs(np.float64(got).view(np.int64) - np.float64(correct).view(np.int64))
        assert ulps <= 2, f"normal f64 golden {got} vs {correct}: {ulps} ulp"
    # The words across the 2^32-block carry: uniform(0, 1) float32 is exactly the top 24
    # bits of each word times 2^-24.
    name = "layers.0.attention.wq.weight"
    spec = shardinit.ParamSpec(
        name, (2**20, 2**20), torch.float32, init.uniform(0, 1), seed=2**64 - 1
    )
    carry = torch.empty(4, dtype=torch.float32)
    launch.fill_flat(spec, 2**34 - 2, carry)
    words = [0x30594D3F, 0xCDCB0EAB, 0x508C2186, 0x1973BE7F]
    assert carry.tolist() == [(w >> 8) * 2.0**-24 for w in words], f"carry words {carry.tolist()}"


@case
def case_block_carry_and_huge_shapes(slow: bool) -> None:
    """Flat ranges across the 2^32-block carry (words 2^34 - 2 ... 2^34 + 1) in 2^40-element
    shapes, for every dtype and a normal and a trunc_normal."""
    for dtype in DTYPES:
        words_per_element = 2 if dtype == torch.float64 else 1
        carry_element = 2**34 // words_per_element
        for initializer in (init.normal(0.0, 1.0), init.trunc_normal(0.0, 1.0, -0.5, 3.0)):
            spec = shardinit.ParamSpec("big", (2**20, 2**20), dtype, initializer, seed=7)
            check_flat(spec, carry_element - 37, 75, BULK_BLOCKS)
            check_flat(spec, 2**40 - 29, 29, BULK_BLOCKS)  # the last elements


@case
def case_keys_at_or_above_2_63(slow: bool) -> None:
    names = [f"layer.{i}.weight" for i in range(64)]
    specs = [shardinit.ParamSpec(n, (4099,), torch.float32, seed=2**64 - 3) for n in names]
    high = [s for s in specs if s.key64 >= 2**63][: 6 if slow else 2]
    low = [s for s in specs if s.key64 < 2**63][:1]
    assert high, "no key >= 2^63 among the names"
    for spec in high + low:
        for dtype in (torch.float32, torch.float64):
            typed = shardinit.ParamSpec(spec.name, spec.shape, dtype, spec.init, seed=spec.seed)
            check_flat(typed, 5, 4090, BULK_BLOCKS)


def random_box(rng: random.Random, max_rows: int) -> tuple[list[int], list[tuple[int, int]]]:
    """A 1-4 dim shape and a box of it with runs of 1-9 elements and at most ``max_rows``
    rows, whose starts are not aligned to blocks."""
    while True:
        ndim = rng.randint(1, 4)
        shape = [rng.randint(1, 12) for _ in range(ndim)]
        box = []
        for size in shape:
            start = rng.randint(0, size - 1)
            box.append((start, rng.randint(start + 1, min(size, start + 9))))
        rows = 1
        for start, stop in box[:-1]:
            rows *= stop - start
        if rows <= max_rows:
            return shape, box


@case
def case_random_boxes(slow: bool) -> None:
    rng = random.Random(1234)
    for index in range(40 if slow else 8):
        shape, box = random_box(rng, max_rows=40 if slow else 6)
        dtype = DTYPES[index % 4]
        _, initializer = initializers()[index % 9]
        spec = shardinit.ParamSpec("box.w", shape, dtype, initializer, seed=index)
        check_box(spec, box, launch.ROW_BLOCKS)


@case
def case_special_boxes(slow: bool) -> None:
    """Boxes whose trailing dims merge into one run (whole trailing dims), a 0-d
    parameter, size-1 dims and an empty box."""
    cases = [
        ((5, 7, 9), [(1, 4), (0, 7), (0, 9)]),  # one run
        ((5, 7, 9), [(1, 4), (2, 5), (0, 9)]),  # rows of 3 x 9
        ((5, 7, 9), [(0, 5), (3, 4), (0, 9)]),  # rows of one dim-1 index each
        ((3, 1, 4, 1), [(1, 3), (0, 1), (1, 3), (0, 1)]),
        ((), []),
        ((4, 6), [(2, 2), (0, 6)]),
    ]
    for dtype in (torch.float32, torch.float64):
        for shape, box in cases:
            spec = shardinit.ParamSpec("special.w", shape, dtype, init.normal(), seed=8)
            check_box(spec, box, launch.ROW_BLOCKS)


@case
def case_box_far_out_in_a_huge_shape(slow: bool) -> None:
    """Rows whose global starts lie beyond 2^32 and 2^34 words, in a 2^40-element shape."""
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        spec = shardinit.ParamSpec("huge", (2**10, 2**15, 2**15), dtype, seed=3)
        check_box(spec, [(15, 17), (2**15 - 2, 2**15), (2**15 - 6, 2**15)], launch.ROW_BLOCKS)


@case
def case_block_sizes(slow: bool) -> None:
    """Blocks per program 1, 4 and 256 give the same bits (flat and box)."""
    for dtype in (torch.float32, torch.float64):
        spec = shardinit.ParamSpec("bs", (9, 13), dtype, init.trunc_normal(std=0.5), seed=5)
        for blocks in (1, 4, 256):
            check_flat(spec, 3, 29, blocks)
            check_box(spec, [(2, 4), (1, 12)], blocks)


@case
def case_self_check(slow: bool) -> None:
    """The check ``"auto"`` runs on a device before trusting the kernel passes here."""
    assert launch.self_check(torch.device("cpu")) is True


@triton.jit
def _phi_inv_kernel(p_ptr, q_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    p = tl.load(p_ptr + offsets, mask=mask, other=0.5)
    q = tl.load(q_ptr + offsets, mask=mask, other=0.5)
    tl.store(out_ptr + offsets, kernel.phi_inv(p, q), mask=mask)


def phi_inv_inputs() -> np.ndarray:
    """About 80k p in (0, 1): U32 and U52 values (strided, both ends), subnormal p,
    p = 2^-33, the 0.075 / 0.925 split and r = 5 (p near 1.39e-11)."""
    w = np.concatenate(
        [np.arange(0, 2**32, 2**32 // 30000, dtype=np.uint64), np.arange(3000, dtype=np.uint64)]
    )
    w = np.concatenate([w, np.uint64(2**32 - 1) - w])
    u32 = (w.astype(np.float64) + 0.5) * 2.0**-32
    m = np.random.default_rng(0).integers(0, 2**52, 20000, dtype=np.uint64)
    u52 = (2 * m + 1).astype(np.float64) * 2.0**-53
    tiny = np.array([5e-324, 1e-320, 2.2e-308, 1e-300, 1e-100, 2.0**-33, 1e-20], dtype=np.float64)
    steps = np.arange(-2000, 2000, dtype=np.float64)
    around = np.concatenate(
        [0.075 + steps * 2.0**-40, 0.925 + steps * 2.0**-40, 1.3887e-11 * (1.0 + steps * 1e-6)]
    )
    around = around[(around > 0) & (around < 1)]
    return np.concatenate([u32, u52, tiny, 1.0 - tiny[tiny > 1e-17], around])


@case
def case_phi_inv_against_core(slow: bool) -> None:
    p = phi_inv_inputs()
    q = 1.0 - p
    out = torch.empty(p.size, dtype=torch.float64)
    block = triton.next_power_of_2(p.size)
    _phi_inv_kernel[(1,)](torch.from_numpy(p), torch.from_numpy(q), out, p.size, BLOCK=block)
    want = np.array(
        [shardinit._core.phi_inv(float(a), float(b)) for a, b in zip(p, q, strict=True)]
    )
    got = out.numpy()
    differ = np.nonzero(got.view(np.int64) != want.view(np.int64))[0]
    assert p.size >= 80000, p.size
    assert differ.size == 0, (
        f"{differ.size} of {p.size} differ; first p={p[differ[0]]!r}: "
        f"{got[differ[0]]!r} vs {want[differ[0]]!r}"
    )


@triton.jit
def _round_kernel(x_ptr, bf16_ptr, f16_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    bf16 = kernel.bf16_bits_from_f32(x).to(tl.uint16).to(tl.int16, bitcast=True)
    f16 = kernel.f16_bits_from_f32(x).to(tl.uint16).to(tl.int16, bitcast=True)
    tl.store(bf16_ptr + offsets, bf16, mask=mask)
    tl.store(f16_ptr + offsets, f16, mask=mask)


def rounding_inputs() -> torch.Tensor:
    """At least 100k finite float32 values: random bit patterns, every pattern around the
    places where rounding changes (bf16 and f16 ties, carries into the exponent, f32 and
    f16 subnormals, f16's largest finite and overflow), both signs."""
    rng = np.random.default_rng(1)
    random_bits = rng.integers(0, 0x7F800000, 60000, dtype=np.int64)
    centres = [
        0x00000000,  # zero and f32 subnormals
        0x00800000,  # smallest normal f32
        0x33000000,  # 2^-25: below half of f16's smallest subnormal
        0x33800000,  # f16's smallest subnormal
        0x387FE000,  # f16 subnormal -> normal carry
        0x38800000,  # f16's smallest normal
        0x3F808000,  # bf16 tie above 1.0
        0x3F801000,  # f16 tie above 1.0
        0x3FFFFFFF,  # carry into the exponent
        0x477FE000,  # f16's largest finite
        0x477FF000,  # f16's overflow tie
        0x7F7FFFFF,  # largest finite f32 (bf16 rounds it to infinity)
    ]
    near = np.concatenate([np.arange(c - 2048, c + 2048, dtype=np.int64) for c in centres])
    ties = (rng.integers(0, 0x7F80, 4000, dtype=np.int64) << 16) | 0x8000
    f16_ties = (rng.integers(0x33800, 0x47800, 4000, dtype=np.int64) << 12) | 0x1000
    patterns = np.concatenate([random_bits, near, ties, f16_ties])
    patterns = patterns[(patterns >= 0) & (patterns < 0x7F800000)]
    patterns = np.concatenate([patterns, patterns | 0x80000000])
    return torch.from_numpy(patterns.astype(np.uint32).view(np.int32)).view(torch.float32)


@case
def case_bf16_f16_rounding_against_torch(slow: bool) -> None:
    x = rounding_inputs()
    assert x.numel() >= 100000 and bool(torch.isfinite(x).all()), x.numel()
    bf16 = torch.empty(x.numel(), dtype=torch.int16)
    f16 = torch.empty(x.numel(), dtype=torch.int16)
    _round_kernel[(1,)](x, bf16, f16, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    for name, got, want in (
        ("bfloat16", bf16, x.to(torch.bfloat16).view(torch.int16)),
        ("float16", f16, x.to(torch.float16).view(torch.int16)),
    ):
        differ = (got != want).nonzero().reshape(-1)
        if differ.numel():
            i = int(differ[0])
            pattern = int(x.view(torch.int32)[i]) & 0xFFFFFFFF
            raise AssertionError(
                f"{name}: {differ.numel()} of {x.numel()} differ; first f32 {pattern:#010x}: "
                f"{int(got[i]) & 0xFFFF:#06x} vs torch {int(want[i]) & 0xFFFF:#06x}"
            )


def main() -> None:
    slow = "--slow" in sys.argv[1:]
    results = {}
    for name, fn in CASES.items():
        try:
            fn(slow)
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=3)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
