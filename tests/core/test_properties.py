"""Property tests: any region of any parameter equals the same region of the whole,
bit for bit, for every shape, dtype, initializer, world size and dim; half dtypes are the
float32 values rounded; fan-based initializers resolve to the arguments torch's own init
passes; thread counts and ``out`` buffers change nothing; and on virtual shapes far too
large to materialize, the values agree with stream-format.md §3-4 recomputed from
``stream_words`` (exactly for uniform, through the element's flat index otherwise).

Random examples per property come from the hypothesis profile (tests/conftest.py); each
property also runs fixed examples (``@example``): every initializer of ``INITS`` in every
dtype. The box and thread properties also draw the paths every real parameter takes:
specs of one to eight chunks of the core (``CHUNK``, an uneven last one), thread counts
1, 2, 3 and 8, and ``out`` views at an offset into a larger tensor.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import example, given, note
from stream_reference import (
    assert_close_to_f64,
    bits_equal,
    normal_reference,
    round_to,
    runs_of_box,
    uniform_reference,
    uniforms,
)

import shardinit
from shardinit import init

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
ONE_WORD = [torch.float32, torch.bfloat16, torch.float16]
NONLINEARITIES = ["linear", "relu", "leaky_relu", "tanh", "sigmoid", "selu", "conv2d"]

#: One of each initializer with non-default arguments: the fixed examples of the properties.
INITS = {
    "zeros": init.zeros(),
    "ones": init.ones(),
    "constant": init.constant(-0.375),
    "uniform": init.uniform(-0.5, 2.0),
    "normal": init.normal(0.1, 0.02),
    "trunc_normal": init.trunc_normal(0.0, 0.02, -0.04, 0.04),
    "kaiming_uniform": init.kaiming_uniform(a=math.sqrt(5)),
    "kaiming_normal": init.kaiming_normal(mode="fan_out", nonlinearity="relu"),
    "xavier_uniform": init.xavier_uniform(gain=2.0),
    "xavier_normal": init.xavier_normal(),
}


def with_examples(
    make: Callable[[init.Initializer, torch.dtype], dict[str, Any]],
    dtypes: list[torch.dtype] = DTYPES,
) -> Callable[[Any], Any]:
    """Adds ``@example(**make(initializer, dtype))`` for every initializer of ``INITS``
    and every dtype of ``dtypes``."""

    def decorate(test: Any) -> Any:
        for initializer in INITS.values():
            for dtype in dtypes:
                test = example(**make(initializer, dtype))(test)
        return test

    return decorate


names = st.one_of(
    st.sampled_from(["w", "layers.0.attention.wq.weight", "emb.weight", "é.ü.weight"]),
    # Hypothesis' default text has no lone surrogates (they have no UTF-8 form).
    st.text(min_size=1, max_size=12),
)
seeds = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))
moderate = st.floats(-4.0, 4.0, allow_nan=False, allow_infinity=False)
positive = st.floats(0.01, 4.0, allow_nan=False, allow_infinity=False)


@st.composite
def base_inits(draw: st.DrawFn) -> init.Initializer:
    which = draw(st.sampled_from(["zeros", "ones", "constant", "uniform", "normal", "trunc"]))
    if which == "zeros":
        return init.zeros()
    if which == "ones":
        return init.ones()
    if which == "constant":
        return init.constant(draw(moderate))
    if which == "uniform":
        a = draw(moderate)
        return init.uniform(a, a + draw(positive))
    if which == "normal":
        return init.normal(draw(moderate), draw(st.floats(0.0, 4.0)))
    mean, std = draw(moderate), draw(positive)
    # Bounds within a few std of the mean (far tails have their own tests).
    low = mean + std * draw(st.floats(-4.0, 3.0))
    return init.trunc_normal(mean, std, low, low + std * draw(st.floats(0.05, 6.0)))


@st.composite
def fan_inits(draw: st.DrawFn) -> init.Initializer:
    which = draw(st.sampled_from(["ku", "kn", "xu", "xn"]))
    if which in ("ku", "kn"):
        make = init.kaiming_uniform if which == "ku" else init.kaiming_normal
        return make(
            a=draw(st.floats(0.0, 5.0)),
            mode=draw(st.sampled_from(["fan_in", "fan_out"])),
            nonlinearity=draw(st.sampled_from(NONLINEARITIES)),
        )
    make_x = init.xavier_uniform if which == "xu" else init.xavier_normal
    return make_x(gain=draw(st.floats(0.1, 3.0)))


def inits_for(ndim: int) -> st.SearchStrategy[init.Initializer]:
    return st.one_of(base_inits(), fan_inits()) if ndim >= 2 else base_inits()


# Sizes: 0, 1, primes, powers of two and neighbours (chunk and block edges).
small_sizes = st.one_of(
    st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 13, 16, 17, 31, 64, 65]),
    st.integers(0, 40),
)
small_shapes = st.lists(small_sizes, min_size=0, max_size=5).filter(
    lambda shape: math.prod(shape) <= 3000
)


@st.composite
def small_specs(draw: st.DrawFn) -> shardinit.ParamSpec:
    shape = tuple(draw(small_shapes))
    return shardinit.ParamSpec(
        draw(names),
        shape,
        draw(st.sampled_from(DTYPES)),
        draw(inits_for(len(shape))),
        seed=draw(seeds),
    )


#: The core's unit of parallel work: a fill of more elements runs on the thread count asked
#: for, a smaller one on the calling thread only.
CHUNK = shardinit._core.CHUNK_ELEMENTS
#: The serial loop, the pool at this machine's size and above it (3, 8: more threads than
#: chunks for some fills, more than cores on 2-core machines).
THREAD_COUNTS = [1, 2, 3, 8]


@st.composite
def multi_chunk_specs(draw: st.DrawFn) -> shardinit.ParamSpec:
    """Specs of one to eight chunks and a bit: an uneven last chunk, the last dim drawn
    so that rows straddle the chunk edges (shards of a few ranks stay above one chunk)."""
    outer = draw(st.lists(st.integers(1, 9), min_size=0, max_size=2))
    inner = math.prod(outer)
    numel = draw(st.one_of(st.integers(CHUNK + 1, 8 * CHUNK + 5), st.just(2 * CHUNK + 1)))
    shape = (*outer, -(-numel // inner))
    if draw(st.booleans()):
        shape = shape[::-1]
    return shardinit.ParamSpec(
        draw(names),
        shape,
        draw(st.sampled_from(DTYPES)),
        draw(inits_for(len(shape))),
        seed=draw(seeds),
    )


@st.composite
def boxes(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    box = []
    for size in shape:
        start = draw(st.integers(0, size))
        box.append((start, draw(st.integers(start, size))))
    return tuple(box)


@with_examples(
    lambda initializer, dtype: {
        "spec": shardinit.ParamSpec("layers.0.w", (11, 6, 3), dtype, initializer, seed=5),
        "threads": 1,
    }
)
@example(  # shards of one to three chunks with uneven last chunks, on more threads than cores
    spec=shardinit.ParamSpec(
        "layers.1.w", (5, 3 * CHUNK // 5 + 11), torch.float32, init.normal(0.0, 0.02), seed=9
    ),
    threads=3,
)
@given(spec=st.one_of(small_specs(), multi_chunk_specs()), threads=st.sampled_from(THREAD_COUNTS))
def test_shards_of_every_world_and_dim_equal_chunks_of_full(
    spec: shardinit.ParamSpec, threads: int
) -> None:
    """For worlds 1..17 and every dim (and a negative one), shard r (filled on
    ``threads`` threads) equals piece r of ``torch.chunk`` of the whole (one thread), and
    the shards concatenate to the whole. (A 0-d parameter cannot be sharded: the
    bad-input battery checks that error.)"""
    whole = shardinit.full(spec)
    assert whole.shape == spec.shape and whole.dtype == spec.dtype
    ndim = len(spec.shape)
    # Every dim, and one negative spelling (the others map to the same code path).
    # Every world to 17 for small specs; for those above one chunk, a few (each world
    # fills the whole parameter again).
    worlds = range(1, 18) if spec.numel <= CHUNK else (1, 2, 3, 7, 17)
    for dim in [*range(ndim), -ndim] if ndim else []:
        for world in worlds:
            shards = _on_threads(
                threads,
                lambda d=dim, w=world: [
                    shardinit.init_shard(spec, rank, w, dim=d) for rank in range(w)
                ],
            )
            expected = torch.chunk(whole, world, dim=dim) if spec.shape[dim] else ()
            for rank, shard in enumerate(shards):
                # torch.chunk may return fewer than `world` pieces: the rest are empty.
                if rank < len(expected):
                    assert bits_equal(shard, expected[rank]), (dim, world, rank)
                else:
                    assert shard.shape[dim] == 0, (dim, world, rank)
            assert bits_equal(torch.cat(shards, dim=dim), whole), (dim, world)


@given(spec=st.one_of(small_specs(), multi_chunk_specs()), data=st.data())
def test_random_box_and_flat_range_equal_slices_of_full(
    spec: shardinit.ParamSpec, data: st.DataObject
) -> None:
    """A random box (into a fresh tensor, and into an ``out`` view at an offset of a
    larger one, on a drawn thread count) and random flat ranges equal slices of full."""
    whole = shardinit.full(spec)
    box = data.draw(boxes(spec.shape), label="box")
    expected = whole[tuple(slice(start, stop) for start, stop in box)]
    assert bits_equal(shardinit.init_box(spec, box), expected)
    offset = data.draw(st.integers(0, 9), label="offset")
    storage = torch.full((offset + expected.numel() + 3,), 7.0, dtype=spec.dtype)
    out = storage[offset : offset + expected.numel()].view(expected.shape)
    try:
        shardinit.set_num_threads(data.draw(st.sampled_from(THREAD_COUNTS), label="threads"))
        assert shardinit.init_box(spec, box, out=out) is out
    finally:
        shardinit.set_num_threads(None)
    assert bits_equal(out, expected)
    assert bool((storage[:offset] == 7).all() and (storage[offset + out.numel() :] == 7).all())

    start = data.draw(st.integers(0, spec.numel), label="start")
    stop = data.draw(st.integers(start, spec.numel), label="stop")
    flat = whole.reshape(-1)
    # The drawn range, and the edges: everything, empty at both ends, the last element.
    n = spec.numel
    for first, last in [(start, stop), (0, n), (0, 0), (n, n), (max(n - 1, 0), n)]:
        assert bits_equal(shardinit.init_flat(spec, first, last), flat[first:last])


@with_examples(
    lambda initializer, _: {
        "spec": shardinit.ParamSpec("mlp.w2.weight", (64, 33), torch.float32, initializer, seed=3),
        "threads": 1,
    },
    dtypes=[torch.float32],
)
@example(  # two chunks and one element, on more threads than chunks
    spec=shardinit.ParamSpec(
        "mlp.w3.weight", (2 * CHUNK + 1,), torch.float32, init.trunc_normal(0.0, 0.02), seed=4
    ),
    threads=8,
)
@given(spec=st.one_of(small_specs(), multi_chunk_specs()), threads=st.sampled_from(THREAD_COUNTS))
def test_half_dtypes_are_the_float32_values_rounded(
    spec: shardinit.ParamSpec, threads: int
) -> None:
    """stream-format.md §4: a bfloat16/float16 parameter (filled on ``threads`` threads)
    is exactly the rounding of the float32 one (one thread)."""
    as_f32 = shardinit.ParamSpec(spec.name, spec.shape, torch.float32, spec.init, seed=spec.seed)
    f32 = shardinit.full(as_f32)
    for dtype in (torch.bfloat16, torch.float16):
        half = shardinit.ParamSpec(spec.name, spec.shape, dtype, spec.init, seed=spec.seed)
        assert bits_equal(_on_threads(threads, lambda h=half: shardinit.full(h)), f32.to(dtype))


def _on_threads(threads: int, fill: Callable[[], Any]) -> Any:
    """``fill()`` with the core's thread count set to ``threads``, restored after."""
    shardinit.set_num_threads(threads)
    try:
        return fill()
    finally:
        shardinit.set_num_threads(None)


def torch_fill_args(
    initializer: init.Initializer, shape: tuple[int, ...]
) -> tuple[str, tuple[float, ...]] | None:
    """The (method, arguments) that torch.nn.init's own function for ``initializer``
    passes to ``uniform_`` / ``normal_`` on a tensor of ``shape``; None where torch has
    no bound to pass: kaiming skips zero-element tensors (with a warning), xavier divides
    by a zero fan sum."""
    if isinstance(initializer, (init.KaimingUniform, init.KaimingNormal)):
        fn: Any = (
            torch.nn.init.kaiming_uniform_
            if isinstance(initializer, init.KaimingUniform)
            else torch.nn.init.kaiming_normal_
        )
        kwargs: dict[str, Any] = {
            "a": initializer.a,
            "mode": initializer.mode,
            "nonlinearity": initializer.nonlinearity,
        }
    else:
        assert isinstance(initializer, (init.XavierUniform, init.XavierNormal))
        fn = (
            torch.nn.init.xavier_uniform_
            if isinstance(initializer, init.XavierUniform)
            else torch.nn.init.xavier_normal_
        )
        kwargs = {"gain": initializer.gain}
    calls: list[tuple[str, tuple[float, ...]]] = []
    originals = {name: getattr(torch.Tensor, name) for name in ("uniform_", "normal_")}

    def recorder(name: str) -> Any:
        def record(self: torch.Tensor, *args: Any, **kw: Any) -> torch.Tensor:
            calls.append((name, tuple(float(arg) for arg in args)))
            return originals[name](self, *args, **kw)

        return record

    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
        for name in originals:
            patch.setattr(torch.Tensor, name, recorder(name))
        try:
            fn(torch.empty(shape), **kwargs)
        except ZeroDivisionError:
            return None
    assert len(calls) <= 1, calls
    return calls[0] if calls else None


FAN_SHAPES = [(256, 128), (64, 32, 3, 3), (10, 7, 5), (3, 1000)]
FAN_INITS = [
    init.kaiming_uniform(a=math.sqrt(5)),
    init.kaiming_uniform(mode="fan_out", nonlinearity="relu"),
    init.kaiming_normal(),
    init.kaiming_normal(a=0.1, mode="fan_out"),
    init.xavier_uniform(gain=2.0),
    init.xavier_normal(),
]


def _fan_examples(test: Any) -> Any:
    for shape in FAN_SHAPES:
        for initializer in FAN_INITS:
            test = example(shape=list(shape), gain_init=initializer)(test)
    return test


@_fan_examples
@given(shape=small_shapes.filter(lambda s: len(s) >= 2), gain_init=fan_inits())
def test_fans_resolve_to_the_arguments_torch_passes(
    shape: list[int], gain_init: init.Initializer
) -> None:
    """A fan-based initializer resolves, for a shape, to exactly the uniform bounds or
    normal std that torch.nn.init's own function passes to ``uniform_`` / ``normal_`` for
    that shape (recorded from torch, not recomputed). Where torch has no bound (a zero
    fan) the initializer is the constant 0."""
    resolved = gain_init.resolve(shape)
    recorded = torch_fill_args(gain_init, tuple(shape))
    if recorded is None:
        assert 0 in shape
        assert resolved == init.Constant(0.0)
        return
    method, args = recorded
    if method == "uniform_":
        low, high = args[:2]
        assert resolved == (init.Constant(0.0) if high == 0 else init.Uniform(low, high))
    else:
        assert method == "normal_"
        assert resolved == init.Normal(args[0], args[1])


@given(spec=small_specs().filter(lambda s: s.base_init.kind == "uniform"))
def test_uniform_equals_spec_formula_on_small_shapes(spec: shardinit.ParamSpec) -> None:
    runs = [(0, spec.numel)] if spec.numel else []
    assert bits_equal(shardinit.full(spec), uniform_reference(spec, runs, spec.shape))


# ---- virtual shapes: more than 2^32 elements, only small boxes are generated ----------


@st.composite
def huge_shapes(draw: st.DrawFn, dtype: torch.dtype) -> tuple[int, ...]:
    limit = 2**63 if dtype == torch.float64 else 2**64 - 1
    ndim = draw(st.integers(1, 5))
    if ndim == 1:
        return (draw(st.integers(2**32 + 1, limit)),)
    shape = []
    remaining = limit
    for _ in range(ndim):
        # Keep the product <= limit while letting any dim be huge.
        size = draw(st.integers(1, max(1, min(remaining, 2**40))))
        shape.append(size)
        remaining //= size
    total = math.prod(shape)
    if total <= 2**32:
        # Stretch the last dim past 2^32 elements overall (within the limit).
        others = total // shape[-1]
        shape[-1] = draw(st.integers(2**32 // others + 1, limit // others))
    return tuple(shape)


@st.composite
def huge_specs(draw: st.DrawFn, kinds: tuple[str, ...]) -> shardinit.ParamSpec:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(huge_shapes(dtype))
    kind = draw(st.sampled_from(kinds))
    if kind == "uniform":
        a = draw(moderate)
        initializer: init.Initializer = init.uniform(a, a + draw(positive))
    elif kind == "normal":
        initializer = init.normal(draw(moderate), draw(positive))
    elif kind == "fan":
        initializer = draw(fan_inits()) if len(shape) >= 2 else draw(base_inits())
    else:
        initializer = draw(base_inits())
    return shardinit.ParamSpec(draw(names), shape, dtype, initializer, seed=draw(seeds))


@st.composite
def small_boxes_of(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """A box of at most 3 elements per dim, anywhere, often touching the far end."""
    box = []
    for size in shape:
        length = draw(st.integers(1, min(3, size)))
        start = draw(st.one_of(st.just(size - length), st.integers(0, size - length)))
        box.append((start, start + length))
    return tuple(box)


@given(spec=huge_specs(("uniform",)), data=st.data())
def test_huge_virtual_uniform_box_equals_spec_formula(
    spec: shardinit.ParamSpec, data: st.DataObject
) -> None:
    box = data.draw(small_boxes_of(spec.shape), label="box")
    note(f"numel = 2^{math.log2(spec.numel):.2f}")
    got = shardinit.init_box(spec, box)
    shape = tuple(stop - start for start, stop in box)
    assert bits_equal(got, uniform_reference(spec, runs_of_box(spec.shape, box), shape))


@given(spec=huge_specs(("uniform", "normal", "fan", "any")), data=st.data())
def test_huge_virtual_box_equals_each_element_by_flat_index(
    spec: shardinit.ParamSpec, data: st.DataObject
) -> None:
    box = data.draw(small_boxes_of(spec.shape), label="box")
    got = shardinit.init_box(spec, box).reshape(-1)
    flat = [first + k for first, length in runs_of_box(spec.shape, box) for k in range(length)]
    assert len(flat) == got.numel()
    for position, index in enumerate(flat):
        one = shardinit.init_flat(spec, index, index + 1)
        assert bits_equal(got[position : position + 1], one), index
    if spec.base_init.kind == "normal":
        # And close to mean + std * PhiInv(U32) with an independent PhiInv (scipy).
        assert_close_to_f64(
            got, normal_reference(spec, runs_of_box(spec.shape, box)), spec.base_init.params()[1]
        )


@given(spec=huge_specs(("uniform",)), data=st.data())
def test_huge_virtual_flat_range_equals_spec_formula(
    spec: shardinit.ParamSpec, data: st.DataObject
) -> None:
    length = data.draw(st.integers(0, 70), label="length")
    start = data.draw(
        st.one_of(st.just(spec.numel - length), st.integers(0, spec.numel - length)),
        label="start",
    )
    got = shardinit.init_flat(spec, start, start + length)
    runs = [(start, length)] if length else []
    assert bits_equal(got, uniform_reference(spec, runs, (length,)))


@given(dtype=st.sampled_from(DTYPES), cols=st.integers(1, 4), data=st.data())
def test_huge_virtual_shard_of_a_big_world(
    dtype: torch.dtype, cols: int, data: st.DataObject
) -> None:
    """init_shard along a dim of more than 2^32 rows, with a world big enough that each
    shard is a few rows: equals the torch.chunk box and the stream-format.md formula."""
    # Up to the largest shape stream v1 addresses: 2^64 - 1 elements (2^63 for float64,
    # two words each); bad_input tests the error beyond it.
    max_numel = 2**63 if dtype == torch.float64 else 2**64 - 1
    size = data.draw(st.integers(2**32 + 1, max_numel // cols), label="size")
    spec = shardinit.ParamSpec("far.weight", (size, cols), dtype, init.uniform(-1, 1), seed=7)
    world = data.draw(st.integers(-(-size // 8), size), label="world")
    rank = data.draw(st.one_of(st.just(world - 1), st.integers(0, world - 1)), label="rank")
    chunk = -(-size // world)
    start, stop = min(rank * chunk, size), min(rank * chunk + chunk, size)
    shard = shardinit.init_shard(spec, rank, world)
    assert shard.shape == (stop - start, cols)
    box = ((start, stop), (0, cols))
    assert bits_equal(shard, shardinit.init_box(spec, box))
    expected = uniform_reference(spec, runs_of_box(spec.shape, box), shard.shape)
    assert bits_equal(shard, expected)


@pytest.mark.parametrize("dtype", ONE_WORD)
def test_one_word_dtypes_share_words(dtype: torch.dtype) -> None:
    """Element i of every one-word dtype uses word i (stream-format.md §3), checked at i = 2^40."""
    spec = shardinit.ParamSpec("w", (2**41,), dtype, init.uniform(0, 1), seed=3)
    got = shardinit.init_flat(spec, 2**40, 2**40 + 9)
    u = uniforms(spec, [(2**40, 9)], "u24")
    assert bits_equal(got, round_to(u, dtype))


def _full_on_one_thread(spec: shardinit.ParamSpec) -> torch.Tensor:
    """``full`` written by the core's serial loop (the reference of the thread test)."""
    try:
        shardinit.set_num_threads(1)
        return shardinit.full(spec)
    finally:
        shardinit.set_num_threads(None)


BIG = shardinit.ParamSpec("big", (517, 1031), torch.float32, init.trunc_normal(std=0.5), seed=9)


def _thread_examples(test: Any) -> Any:
    """Every thread count on a fixed 8.1-chunk spec, and on a shard of 3 of it."""
    for threads in THREAD_COUNTS:
        for world, dim in ((1, 0), (3, 1)):
            test = example(spec=BIG, world=world, threads=threads, dim=dim, offset=3)(test)
    return test


@_thread_examples
@given(
    spec=st.one_of(multi_chunk_specs(), multi_chunk_specs(), small_specs()),
    world=st.one_of(st.integers(1, 3), st.integers(1, 17)),
    threads=st.sampled_from(THREAD_COUNTS),
    dim=st.integers(0, 4),
    offset=st.integers(0, 17),
)
def test_thread_counts_and_out_buffers_do_not_change_values(
    spec: shardinit.ParamSpec, world: int, threads: int, dim: int, offset: int
) -> None:
    """Shards filled into ``out`` buffers (shaped by ``box_of_shard``, each a view
    ``offset`` elements into a larger tensor) with 1, 2, 3 or 8 core threads concatenate
    to ``full`` written on one thread, and nothing around the views is written. Most
    specs are above one chunk (``CHUNK``), where the thread count is used.

    Shown to fail (2026-12-04) with the pool path of ``pool::for_each_chunk`` made to
    write chunk 1 with chunk 0's values on 3 or more threads (``let index = if threads
    >= 3 && index == 1 { 0 } else { index };`` before ``work``): the ``@example``s of 3
    and 8 threads fail; the old version of this test (specs under one chunk) passed."""
    whole = _full_on_one_thread(spec)
    if not spec.shape:
        return
    dim %= len(spec.shape)
    try:
        shardinit.set_num_threads(threads)
        assert shardinit.get_num_threads() == threads
        pieces = []
        for rank in range(world):
            box = shardinit.box_of_shard(spec, rank, world, dim)
            shape = tuple(b - a for a, b in box)
            numel = math.prod(shape)
            storage = torch.full((offset + numel + 5,), 7.0, dtype=spec.dtype)
            out = storage[offset : offset + numel].view(shape)
            assert shardinit.init_shard(spec, rank, world, dim=dim, out=out) is out
            assert bool((storage[:offset] == 7).all() and (storage[offset + numel :] == 7).all())
            pieces.append(out)
        assert bits_equal(torch.cat(pieces, dim=dim), whole)
        # And full itself on this thread count (one out of spec.numel elements).
        assert bits_equal(shardinit.full(spec), whole)
    finally:
        shardinit.set_num_threads(None)


def test_numpy_reference_gives_the_golden_uniforms() -> None:
    """The reference helper itself: stream-format.md §6 golden float32 uniforms (the
    golden words are test_stream.py's)."""
    spec = shardinit.ParamSpec("w", (4,), torch.float32, init.uniform(0, 1), seed=0)
    ref = uniform_reference(spec, [(0, 4)], (4,))
    np.testing.assert_array_equal(
        ref.numpy(), np.array([0.17105073, 0.97966427, 0.2126956, 0.7087004], np.float32)
    )
