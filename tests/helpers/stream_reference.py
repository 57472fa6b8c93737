"""An independent reading of stream-format.md §3-4 in numpy, for the core tests
(test_properties.py, test_far.py, test_concurrency.py).

Words come from ``shardinit.stream_words`` (whose Philox and keys are checked against
the stream format's known answers elsewhere); everything after the words, which words an element
uses, the uniform maps and the rounding to the target dtype, is recomputed here from the
stream-format.md text, not from the package.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.special
import torch

import shardinit

TWO_M24 = 2.0**-24
TWO_M32 = 2.0**-32
TWO_M53 = 2.0**-53

#: Integer dtypes of the same width, for bitwise comparisons.
BITS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.bfloat16: torch.int16,
    torch.float16: torch.int16,
}


def bits_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Same shape, dtype and bit patterns (so -0.0 != 0.0 and NaN == NaN)."""
    return (
        x.shape == y.shape
        and x.dtype == y.dtype
        and torch.equal(x.contiguous().view(BITS[x.dtype]), y.contiguous().view(BITS[y.dtype]))
    )


def u24(words: np.ndarray) -> np.ndarray:
    return (words >> np.uint32(8)).astype(np.float64) * TWO_M24


def u32(words: np.ndarray) -> np.ndarray:
    return (words.astype(np.float64) + 0.5) * TWO_M32


def u52(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    m = ((w0.astype(np.uint64) >> np.uint64(6)) << np.uint64(26)) | (
        w1.astype(np.uint64) >> np.uint64(6)
    )
    # 2m + 1 < 2^53: exact in binary64.
    return (np.uint64(2) * m + np.uint64(1)).astype(np.float64) * TWO_M53


def runs_of_box(shape: Sequence[int], box: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The box as (first flat index, length) runs along the last dim, in C order (Python
    ints: flat indices go up to 2^64 - 2)."""
    if any(stop <= start for start, stop in box):
        return []
    if not shape:
        return [(0, 1)]
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    runs = []
    last_start, last_stop = box[-1]
    outer = [range(start, stop) for start, stop in box[:-1]]

    def walk(dim: int, base: int) -> None:
        if dim == len(outer):
            runs.append((base + last_start, last_stop - last_start))
            return
        for index in outer[dim]:
            walk(dim + 1, base + index * strides[dim])

    walk(0, 0)
    return runs


def uniforms(spec: shardinit.ParamSpec, runs: list[tuple[int, int]], kind: str) -> np.ndarray:
    """The stream-format.md §3 uniform of each element of ``runs``: U24 (``kind="u24"``) or U32
    (``"u32"``) of word i for one-word dtypes, U52 of words 2i, 2i+1 for float64."""
    parts = []
    for first, length in runs:
        if spec.dtype == torch.float64:
            words = shardinit.stream_words(spec.seed, spec.name, 2 * first, 2 * length)
            parts.append(u52(words[0::2], words[1::2]))
        else:
            words = shardinit.stream_words(spec.seed, spec.name, first, length)
            parts.append(u24(words) if kind == "u24" else u32(words))
    return np.concatenate(parts) if parts else np.zeros(0)


def round_to(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """stream-format.md §4 rounding of binary64 values: float64 kept; float32 once; bfloat16 and
    float16 via float32."""
    tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    if dtype == torch.float64:
        return tensor
    return tensor.to(torch.float32).to(dtype)


def uniform_reference(
    spec: shardinit.ParamSpec, runs: list[tuple[int, int]], shape: Sequence[int]
) -> torch.Tensor:
    """Exact values of a uniform(a, b) parameter at ``runs``: a + (b - a) * U."""
    base = spec.base_init
    assert base.kind == "uniform"
    a, b = base.params()[:2]
    u = uniforms(spec, runs, "u24")
    return round_to(a + (b - a) * u, spec.dtype).reshape(tuple(shape))


def normal_reference(spec: shardinit.ParamSpec, runs: list[tuple[int, int]]) -> np.ndarray:
    """mean + std * PhiInv(U) in binary64 with scipy's ndtri for PhiInv: close to, not
    bit-equal with, the library's own PhiInv (stream-format.md §4 allows a few ulps)."""
    base = spec.base_init
    assert base.kind == "normal"
    mean, std = base.params()[:2]
    return mean + std * scipy.special.ndtri(uniforms(spec, runs, "u32"))


def assert_close_to_f64(values: torch.Tensor, reference: np.ndarray, scale: float) -> None:
    """``values`` (any dtype) equal ``reference`` (binary64) up to the library's PhiInv
    error (1e-12 * scale, far above a few ulps of binary64, far below any wrong word)
    plus one rounding to the target dtype (one ulp of it)."""
    got = values.to(torch.float64).numpy().ravel()
    ref = np.asarray(reference, dtype=np.float64).ravel()
    if values.dtype == torch.float64:
        tolerance = 1e-12 * np.maximum(scale, np.abs(ref))
    else:
        eps = torch.finfo(values.dtype).eps
        tiny = torch.finfo(values.dtype).tiny
        tolerance = eps * np.abs(ref) + tiny + 1e-12 * scale
    np.testing.assert_array_less(np.abs(got - ref), tolerance + 1e-300)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)
