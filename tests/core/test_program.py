"""Init programs through ``_core.fill_program`` (stream-format.md §7): every operation's
values at any region equal the full evaluation's slice, do not depend on the thread
count, and round to the destination dtype by §4's rule; ``source`` is ``fill``; bad
programs are refused with messages naming the argument.

The evaluator is scalar (no SIMD path of its own); the backends (scalar, AVX2, AVX-512
lanes) only differ inside a ``source``, whose equality with the fused kernels is checked
here for the detected backend and for every backend in the core's unit tests.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
import torch

from shardinit import _core

SHAPE = [5, 7, 13]
NUMEL = 5 * 7 * 13
KEY = 0x1234_5678_9ABC_DEF0
NUMPY_DTYPE = {
    "float32": np.float32,
    "float64": np.float64,
    "bfloat16": np.int16,
    "float16": np.int16,
}
TORCH_DTYPE = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

#: A domain per unary operation where its values are finite and vary.
UNARY_DOMAIN = {
    "neg": (-3.0, 3.0),
    "abs": (-3.0, 3.0),
    "reciprocal": (0.5, 4.0),
    "sqrt": (0.0, 9.0),
    "rsqrt": (0.1, 9.0),
    "exp": (-5.0, 5.0),
    "expm1": (-5.0, 5.0),
    "log": (0.01, 16.0),
    "log1p": (-0.9, 10.0),
    "sin": (-20.0, 20.0),
    "cos": (-20.0, 20.0),
    "tanh": (-4.0, 4.0),
    "sigmoid": (-30.0, 30.0),
    "softplus": (-30.0, 30.0),
    "floor": (-5.0, 5.0),
    "erf": (-3.0, 3.0),
    "erfinv": (-0.999, 0.999),
    "round_half_even": (-5.0, 5.0),
}
BINARY_OPS = ["add", "sub", "mul", "div", "pow", "min", "max", "floordiv", "mod"]
BINARY_OPS += ["lt", "le", "gt", "ge", "eq", "ne"]


def test_every_operation_of_the_core_is_tested_here() -> None:
    # The core exports its op names (their one home): a new one needs a domain above.
    assert list(UNARY_DOMAIN) == list(_core.UNARY_OPS)
    assert list(_core.BINARY_OPS) == BINARY_OPS


def unary_program(op: str) -> _core.RegisterProgram:
    """``op(u + coord2 / 64)`` with ``u`` a stream-v1 uniform: varies with every index."""
    low, high = UNARY_DOMAIN[op]
    program = _core.RegisterProgram()
    u = program.source(_core.Init.uniform(low, high - 0.25), "float64")
    c = program.coord(2)
    scale = program.constant(1 / 64)
    x = program.binary("add", u, program.binary("mul", c, scale))
    program.unary(op, x)
    return program


def binary_program(op: str) -> _core.RegisterProgram:
    """``op(a, b)``: ``a`` a normal rounded to bfloat16 and then down to a multiple of 1/4,
    ``b`` a table broadcast along dims 0 and 2 (so ties, for the comparisons, happen)."""
    program = _core.RegisterProgram()
    four = program.constant(4.0)
    normal = program.source(_core.Init.normal(1.5, 1.0), "bfloat16")
    quarters = program.unary("floor", program.binary("mul", normal, four))
    a = program.binary("div", quarters, four)
    values = np.array([0.5, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0])
    b = program.table(values, [0, 1, 0], 0)
    if op == "pow":
        a = program.unary("abs", a)
    program.binary(op, a, b)
    return program


def run(program: _core.RegisterProgram, region: _core.Region, length: int, dtype: str = "float64",
        threads: int = 1, shape: list[int] | None = None) -> np.ndarray:  # fmt: skip
    out = np.zeros(length, NUMPY_DTYPE[dtype])
    _core.fill_program(KEY, shape or SHAPE, program, dtype, region, out, threads)
    return out


def box_elements(ranges: list[tuple[int, int]]) -> np.ndarray:
    """Global flat indices of the box ``ranges`` over SHAPE, in C order."""
    grid = np.arange(NUMEL).reshape(SHAPE)
    return grid[tuple(slice(a, b) for a, b in ranges)].reshape(-1)


PROGRAMS = {f"unary-{op}": (lambda op=op: unary_program(op)) for op in UNARY_DOMAIN}
PROGRAMS |= {f"binary-{op}": (lambda op=op: binary_program(op)) for op in BINARY_OPS}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_any_region_equals_the_full_evaluation(name: str) -> None:
    program = PROGRAMS[name]()
    full = run(program, _core.Region.flat(0), NUMEL)
    assert np.isfinite(full).all() and len(np.unique(full)) > 1
    for start, length in [(0, 1), (3, 40), (200, 255), (NUMEL - 1, 1)]:
        part = run(program, _core.Region.flat(start), length)
        np.testing.assert_array_equal(part, full[start : start + length])
    ranges = [(1, 4), (2, 7), (3, 11)]  # 3 x 5 x 8: runs of 8 inside rows of 13
    want = full[box_elements(ranges)]
    np.testing.assert_array_equal(run(program, _core.Region.box(ranges), len(want)), want)
    for offset, length in [(0, 5), (5, 64), (69, 50), (119, 1)]:  # body and tail
        part = run(program, _core.Region.box(ranges, offset), length)
        np.testing.assert_array_equal(part, want[offset : offset + length])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_one_thread_equals_two(name: str) -> None:
    program = PROGRAMS[name]()
    shape = [3, 7, 7000]  # 147000 elements: three chunks of the pool
    one = run(program, _core.Region.flat(0), 147_000, "float32", threads=1, shape=shape)
    two = run(program, _core.Region.flat(0), 147_000, "float32", threads=2, shape=shape)
    np.testing.assert_array_equal(one.view(np.uint32), two.view(np.uint32))


INITS = {
    "constant": _core.Init.constant(-0.37),
    "uniform": _core.Init.uniform(-2.0, 3.0),
    "normal": _core.Init.normal(0.25, 2.0),
    "trunc_normal": _core.Init.trunc_normal(0.0, 1.0, -0.5, 2.0),
}


@pytest.mark.parametrize("dtype", sorted(NUMPY_DTYPE))
@pytest.mark.parametrize("kind", sorted(INITS))
def test_source_equals_fill(kind: str, dtype: str) -> None:
    init = INITS[kind]
    region = _core.Region.box([(1, 5), (0, 7), (4, 13)])
    want = np.zeros(4 * 7 * 9, NUMPY_DTYPE[dtype])
    _core.fill(KEY, SHAPE, init, dtype, region, want)
    single = _core.RegisterProgram()
    single.source(init, dtype)  # dispatched to the fused fill
    rounded = _core.RegisterProgram()
    rounded.round(rounded.source(init, dtype), dtype)  # through the evaluator
    for program in (single, rounded):
        got = run(program, region, len(want), dtype)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    if kind != "constant":
        assert len(np.unique(want)) > 1


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_narrow_destination_rounds_the_binary64_result_by_section_4(dtype: str) -> None:
    # No source here: a source's words depend on the destination dtype (§3).
    program = _core.RegisterProgram()
    values = np.random.default_rng(3).normal(0.0, 2.0, NUMEL)
    program.unary("exp", program.table(values, [91, 13, 1], 0))
    wide = torch.from_numpy(run(program, _core.Region.flat(0), NUMEL))
    # §4: float32 once; bfloat16 and float16 through float32.
    want = wide.to(torch.float32).to(TORCH_DTYPE[dtype])
    got = torch.from_numpy(run(program, _core.Region.flat(0), NUMEL, dtype))
    assert torch.equal(got.view(TORCH_DTYPE[dtype]), want)


def test_a_source_is_rounded_to_its_own_dtype_before_the_operations() -> None:
    bf16 = np.zeros(NUMEL, np.int16)
    _core.fill(KEY, SHAPE, _core.Init.normal(0.0, 1.0), "bfloat16", _core.Region.flat(0), bf16)
    third = torch.from_numpy(bf16).view(torch.bfloat16).double() * (1 / 3)
    program = _core.RegisterProgram()
    x = program.source(_core.Init.normal(0.0, 1.0), "bfloat16")
    program.binary("mul", x, program.constant(1 / 3))
    # A float32 destination draws the same words as a bfloat16 one (one per element).
    got = run(program, _core.Region.flat(0), NUMEL, "float32")
    assert torch.equal(torch.from_numpy(got), third.to(torch.float32))


def test_binary_operations_are_torchs_float64_kernels() -> None:
    rng = np.random.default_rng(7)
    a = np.concatenate([rng.normal(0, 10, 500), [math.inf, -math.inf, math.nan, 0.0, -0.0, 7.0]])
    b = np.concatenate([rng.normal(0, 3, 500), [2.0, -2.0, 1.0, -3.0, 3.0, 0.0]])
    torch_ops = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                 "floordiv": torch.floor_divide, "mod": torch.remainder, "lt": torch.lt,
                 "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
                 "min": torch.minimum, "max": torch.maximum}  # fmt: skip
    for op, function in torch_ops.items():
        program = _core.RegisterProgram()
        program.binary(op, program.table(a, [1], 0), program.table(b, [1], 0))
        out = np.zeros(len(a))
        _core.fill_program(KEY, [len(a)], program, "float64", _core.Region.flat(0), out)
        want = function(torch.from_numpy(a), torch.from_numpy(b)).double().numpy()
        np.testing.assert_array_equal(out, want, err_msg=op)  # NaN == NaN here
        equal_bits = out.view(np.int64) == want.view(np.int64)
        assert (equal_bits | np.isnan(want)).all(), op  # signed zeros too


def test_where_selects_on_nonzero_and_nan_and_min_max_propagate_nan() -> None:
    cond = np.array([0.0, -0.0, 1.0, math.nan, -2.0])
    program = _core.RegisterProgram()
    c = program.table(cond, [1], 0)
    program.where(c, program.constant(10.0), program.constant(20.0))
    np.testing.assert_array_equal(
        run(program, _core.Region.flat(0), 5, shape=[5]), [20, 20, 10, 10, 10]
    )
    for op in ("min", "max"):
        p = _core.RegisterProgram()
        p.binary(op, p.constant(math.nan), p.constant(1.0))
        assert np.isnan(run(p, _core.Region.flat(0), 1, shape=[1])).all()
    p = _core.RegisterProgram()
    p.binary("min", p.constant(0.0), p.constant(-0.0))  # IEEE minimum: -0 < +0
    assert math.copysign(1, run(p, _core.Region.flat(0), 1, shape=[1])[0]) == -1


def test_coord_flat_and_table_index_the_global_tensor() -> None:
    program = _core.RegisterProgram()
    flat = program.flat()
    row = program.coord(0)
    values = np.arange(100.0)
    reversed_rows = program.table(values, [-10, 1], 90)  # values[90 - 10 r + c]
    program.binary("add", program.binary("mul", flat, program.constant(1000.0)), reversed_rows)
    out = run(program, _core.Region.box([(2, 4), (1, 3)]), 4, shape=[10, 10])
    assert out.tolist() == [21071.0, 22072.0, 31061.0, 32062.0]
    assert len(program) == 6 and row == 1


def expect_error(
    call: object, match: str, error: type[BaseException] = _core.ShardInitError
) -> None:
    with pytest.raises(error, match=match):
        call()  # type: ignore[operator]


def test_bad_programs_are_refused_naming_the_argument() -> None:
    p = _core.RegisterProgram()
    x = p.constant(1.0)
    expect_error(
        lambda: p.unary("atan", x),
        r"^op must be one of 'neg', 'abs', .*'round_half_even', got 'atan'$",
    )
    expect_error(lambda: p.binary("atan2", x, x), r"^op must be one of 'add', .*'ne', got 'atan2'$")
    expect_error(
        lambda: p.unary("exp", 1),
        r"^x must be an earlier register of the program \(0 <= x < 1\), got 1$",
    )
    expect_error(lambda: p.binary("add", x, -1), r"^b must be an earlier register .*got -1$")
    expect_error(lambda: p.where(5, x, x), r"^cond must be an earlier register .*got 5$")
    expect_error(
        lambda: p.round(x, "half"),
        r"^dtype must be one of 'float32', 'float64', 'bfloat16', 'float16', got 'half'",
    )
    expect_error(
        lambda: p.source(_core.Init.normal(0, 1), "int8"), r"^dtype must be one of .*got 'int8'"
    )
    expect_error(lambda: p.coord(-1), r"^dim must be >= 0, got -1$")
    expect_error(
        lambda: p.table(np.zeros((2, 2)), [1], 0),
        r"^values must be a 1-D C-contiguous float64 buffer",
    )
    expect_error(
        lambda: p.table(np.zeros(4, np.float32), [1], 0),
        r"^values must be a 1-D C-contiguous float64 buffer, got ndarray",
        TypeError,
    )
    expect_error(lambda: p.table([1.0, 2.0], [1], 0), r"^values must be .* got list", TypeError)
    assert len(p) == 1  # nothing refused was appended


def fill_error(
    program: _core.RegisterProgram, shape: list[int], match: str, length: int = 4
) -> None:
    out = np.zeros(length)
    expect_error(
        lambda: _core.fill_program(KEY, shape, program, "float64", _core.Region.flat(0), out), match
    )


def test_what_depends_on_the_shape_is_refused_at_fill_time() -> None:
    fill_error(_core.RegisterProgram(), [4], r"^program has no registers")
    p = _core.RegisterProgram()
    p.coord(1)
    fill_error(p, [4], r"^coord dim must be < 1, the dims of the global shape, got 1$")
    t = _core.RegisterProgram()
    t.table(np.arange(6.0), [3, 1], 0)
    fill_error(
        t, [4], r"^table strides must have one entry per dim of the global shape \(1\), got 2$"
    )
    fill_error(
        t,
        [2, 4],
        r"^table indices over the global shape range over \[0, 6\] but values has 6 elements$",
    )
    n = _core.RegisterProgram()
    n.table(np.arange(6.0), [-1], 2)
    fill_error(n, [4], r"range over \[-1, 2\]", length=1)  # the whole shape, not the region
    s = _core.RegisterProgram()
    s.unary("sin", s.binary("mul", s.flat(), s.constant(1e6)))
    fill_error(s, [4], r"^sin argument must satisfy \|x\| <= 1647099.3291652855 .*got 2000000$")
    c = _core.RegisterProgram()
    c.unary("cos", c.constant(-1.7e6))
    fill_error(c, [4], r"^cos argument must satisfy .*got -1700000$")
    fill_error(p, [4, 2], r"^out has 4 elements|range", length=9)
    out = np.zeros(8)
    out.flags.writeable = False
    expect_error(
        lambda: _core.fill_program(KEY, [8], t, "float64", _core.Region.flat(0), out),
        "writable",
        ValueError,
    )


def test_the_gil_is_released_while_a_program_fills() -> None:
    """As ``fill`` (tests/core/test_concurrency.py): another Python thread keeps running
    during a single-threaded ``fill_program`` of ~0.2-1 s; with the GIL held it could
    record no tick in the middle 80 % of the call. Up to 3 attempts on a loaded machine."""
    numel = 1 << 22
    program = unary_program("log1p")
    out = np.zeros(numel, np.float32)
    middle: list[float] = []
    for _attempt in range(3):
        ticks: list[float] = []
        stop = threading.Event()

        def ticker(ticks: list[float] = ticks, stop: threading.Event = stop) -> None:
            while not stop.is_set():
                ticks.append(time.perf_counter())
                sum(range(200))

        thread = threading.Thread(target=ticker, daemon=True)
        thread.start()
        try:
            time.sleep(0.02)
            start = time.perf_counter()
            shape = [4, 8, 1 << 17]
            _core.fill_program(KEY, shape, program, "float32", _core.Region.flat(0), out, 1)
            end = time.perf_counter()
        finally:
            stop.set()
            thread.join()
        margin = 0.1 * (end - start)
        middle = [t for t in ticks if start + margin < t < end - margin]
        if len(middle) >= 5:
            break
    assert len(middle) >= 5, (len(middle), end - start)


def test_the_op_lists_are_the_evaluators() -> None:
    """``_core.UNARY_OPS`` / ``BINARY_OPS`` (the core's operation lists, exported for
    Python) are exactly the names the evaluator takes, in its error message's order, and
    every one of them is covered by the programs above."""
    p = _core.RegisterProgram()
    x = p.constant(2.0)
    for op in _core.UNARY_OPS:
        p.unary(op, x)
    for op in _core.BINARY_OPS:
        p.binary(op, x, x)
    for ops, add in [(_core.UNARY_OPS, lambda: p.unary("no_such_op", x)),
                     (_core.BINARY_OPS, lambda: p.binary("no_such_op", x, x))]:  # fmt: skip
        listed = ", ".join(f"'{op}'" for op in ops)
        with pytest.raises(_core.ShardInitError) as refused:
            add()
        assert str(refused.value) == f"op must be one of {listed}, got 'no_such_op'"
    assert set(_core.UNARY_OPS) == set(UNARY_DOMAIN)
    assert set(_core.BINARY_OPS) == set(BINARY_OPS)
