"""The one writer below every parameter's program (``_program.Writer`` through the
one fill dispatch ``_fill.fill``): an orthogonal matrix is computed once per region of a
rank, however many boxes the region has (flat ranges of FSDP1 / ZeRO-3, uneven
``_StridedShard`` shards), and a CUDA destination of a program is staged through the
bounded pinned buffers, ``CUDA_CHUNK_BYTES`` at a time (CUDA runtime mocked: no GPU)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from cuda_standin import OnCuda, stand_in

import shardinit
from shardinit import _fill, init, shard
from shardinit._integration.placements import full_runs
from shardinit._integration.targets import Values
from shardinit._program import CapturedOp, ParamRecord, Scale, base_ops

SEED = 11


def orthogonal_record(shape: tuple[int, ...], zero_rows: tuple[int, ...] = ()) -> ParamRecord:
    ops = base_ops(init.orthogonal(0.5), shape, zero_rows)
    return ParamRecord("q", shape, torch.float32, ops)


def orthogonal_full(shape: tuple[int, ...], zero_rows: tuple[int, ...] = ()) -> torch.Tensor:
    full = shardinit.full(
        shardinit.ParamSpec("q", shape, torch.float32, init.orthogonal(0.5), seed=SEED)
    )
    for row in zero_rows:
        full[row] = 0.0
    return full


@pytest.fixture
def q_count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times values that are not elementwise were computed (each computes the
    whole orthogonal matrix, one QR, in the core)."""
    calls = [0]
    inner = _fill.fill_not_elementwise

    def counted(out: torch.Tensor, write: Callable[[torch.Tensor, int | None], None]) -> None:
        calls[0] += 1
        inner(out, write)

    monkeypatch.setattr(_fill, "fill_not_elementwise", counted)
    return calls


@pytest.mark.parametrize("zero_rows", [(), (4,)], ids=["orthogonal", "then_a_zero_row"])
def test_a_flat_range_of_three_boxes_computes_q_once(
    q_count: list[int], zero_rows: tuple[int, ...]
) -> None:
    # [17, 305) of (30, 20): rows 0 (part), 1-14 (whole), 15 (part): three boxes.
    shape = (30, 20)
    out = torch.full((288,), float("nan"))
    Values(orthogonal_record(shape, zero_rows), SEED).write_flat(shard.writer(), 17, 305, out)
    assert q_count[0] == 1
    assert torch.equal(out, orthogonal_full(shape, zero_rows).reshape(-1)[17:305])


def test_an_uneven_strided_shard_computes_q_once(q_count: list[int]) -> None:
    # Rank 0 of _StridedShard(0, split_factor=2) on 2 ranks over 10 rows: rows 0:3 and
    # 5:8, two boxes, placed one after the other in the local tensor.
    shape = (10, 6)
    runs = [[(0, 3), (5, 8)], [(0, 6)]]
    local = torch.full((6, 6), float("nan"))
    Values(orthogonal_record(shape), SEED).write_runs(shard.writer(), runs, local)
    assert q_count[0] == 1
    full = orthogonal_full(shape)
    assert torch.equal(local, torch.cat([full[0:3], full[5:8]]))


def test_elementwise_values_never_take_the_whole_matrix_path(q_count: list[int]) -> None:
    shape = (30, 20)
    record = ParamRecord("w", shape, torch.float32, base_ops(init.normal(0.0, 0.02), shape))
    out = torch.empty(288)
    Values(record, SEED).write_flat(shard.writer(), 17, 305, out)
    assert q_count[0] == 0
    spec = shardinit.ParamSpec("w", shape, torch.float32, init.normal(0.0, 0.02), seed=SEED)
    assert torch.equal(out, shardinit.init_flat(spec, 17, 305))


@pytest.fixture
def staged(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The CUDA runtime stood in for the host path (tests/helpers/cuda_standin.py), with
    staging chunks of 4096 bytes; the byte size of every host buffer the fills stage
    through."""
    sizes = stand_in(monkeypatch)
    monkeypatch.setattr(shard, "CUDA_CHUNK_BYTES", 4096)
    return sizes


def scaled_record(shape: tuple[int, ...]) -> ParamRecord:
    """normal_(std=0.02) then mul_(3.0): a program that is not a bare source."""
    whole = tuple((0, size) for size in shape)
    ops = (
        *base_ops(init.normal(0.0, 0.02), shape),
        CapturedOp(whole, Scale(3.0), "mul_(3.0)", "<test>"),
    )
    return ParamRecord("w", shape, torch.float32, ops)


def test_a_program_to_cuda_is_staged_in_bounded_buffers(staged: list[int]) -> None:
    shape = (300, 64)  # 76800 bytes: 19 staging chunks of 4096
    record = scaled_record(shape)
    local = torch.full(shape, float("nan")).as_subclass(OnCuda)
    Values(record, SEED).write_runs(shard.writer(), full_runs(shape), local)
    assert staged == [4096, 4096]
    expected = torch.empty(shape)
    Values(record, SEED).write_runs(shard.writer(), full_runs(shape), expected)
    assert torch.equal(local.as_subclass(torch.Tensor), expected)
    spec = shardinit.ParamSpec("w", shape, torch.float32, init.normal(0.0, 0.02), seed=SEED)
    assert torch.equal(expected, shardinit.full(spec) * 3.0)


def test_a_flat_program_to_cuda_is_staged_in_bounded_buffers(staged: list[int]) -> None:
    shape = (300, 64)
    record = scaled_record(shape)
    out = torch.full((9000,), float("nan")).as_subclass(OnCuda)
    Values(record, SEED).write_flat(shard.writer(), 17, 9017, out)
    # Three boxes (row 0's tail, rows 1-139, row 140's head), two buffers each at most.
    assert staged and max(staged) <= 4096
    assert len(staged) <= 2 * 3
    expected = torch.empty(9000)
    Values(record, SEED).write_flat(shard.writer(), 17, 9017, expected)
    assert torch.equal(out.as_subclass(torch.Tensor), expected)


@pytest.mark.parametrize("start", [0, 17, 300 * 64 - 1])
def test_a_region_of_one_element_of_a_program_is_written(start: int) -> None:
    """A region of one element is written like any other (only an empty one is
    skipped): its value is the program's."""
    shape = (300, 64)
    out = torch.full((1,), float("nan"))
    Values(scaled_record(shape), SEED).write_flat(shard.writer(), start, start + 1, out)
    spec = shardinit.ParamSpec("w", shape, torch.float32, init.normal(0.0, 0.02), seed=SEED)
    assert torch.equal(out, (shardinit.full(spec) * 3.0).reshape(-1)[start : start + 1])


def test_a_box_is_written_into_out_or_a_new_tensor_and_a_wrong_out_is_refused() -> None:
    shape = (30, 20)
    record = scaled_record(shape)
    box = [(3, 8), (0, 20)]
    spec = shardinit.ParamSpec("w", shape, torch.float32, init.normal(0.0, 0.02), seed=SEED)
    expected = (shardinit.full(spec) * 3.0)[3:8]
    out = torch.full((5, 20), float("nan"))
    assert shard.writer().box(record, SEED, box, out) is out
    assert torch.equal(out, expected)
    assert torch.equal(shard.writer().box(record, SEED, box), expected)
    for wrong in (torch.empty(5, 19), torch.empty(5, 20, dtype=torch.float64)):
        with pytest.raises(shardinit.ShardInitError, match="out has shape"):
            shard.writer().box(record, SEED, box, wrong)


def test_orthogonal_to_cuda_stages_its_region_once(staged: list[int], q_count: list[int]) -> None:
    shape = (30, 20)
    out = torch.full((288,), float("nan")).as_subclass(OnCuda)
    Values(orthogonal_record(shape), SEED).write_flat(shard.writer(), 17, 305, out)
    assert q_count[0] == 1
    # The hull of the three boxes (rows 0-15, 16 x 20 float32) is staged once, whole.
    assert staged == [16 * 20 * 4]
    assert torch.equal(out.as_subclass(torch.Tensor), orthogonal_full(shape).reshape(-1)[17:305])


def test_a_default_is_one_program_with_its_zero_row() -> None:
    """An Embedding's torch default (normal, then its padding_idx row zeroed) is the
    parameter's one program, written like any other: the same values as the stream
    with that row set to zero."""
    from torch import nn

    from shardinit._integration.plan import RulesAndDefaults, local_targets, make_plan

    with torch.device("meta"):
        module = nn.Embedding(10, 4, padding_idx=3)
    targets = local_targets(module, set())
    chooser = RulesAndDefaults([], module, targets)
    plan = make_plan(
        module, targets, seed=SEED, chooser=chooser, captured=None, write_computed=False
    )
    [param] = plan.params
    assert param.values.record.ops == base_ops(init.normal(0.0, 1.0), (10, 4), (3,))
    shardinit.materialize(module, seed=SEED)
    spec = shardinit.ParamSpec("weight", (10, 4), torch.float32, init.normal(0.0, 1.0), seed=SEED)
    expected = shardinit.full(spec)
    expected[3] = 0.0
    assert torch.equal(module.weight.detach(), expected)


def _many_small_model() -> torch.nn.Module:
    """More small parameters than two batches of deferred fills, a larger one (of several
    chunks, deferred too), a default of two operations (its zero row: never deferred)
    and one of each 16-bit dtype."""
    from torch import nn

    with torch.device("meta"):
        layers: list[nn.Module] = [nn.Linear(8, 4) for _ in range(_fill.DeferredFills.BATCH)]
        layers += [nn.Linear(300, 300), nn.Embedding(10, 4, padding_idx=3)]
        layers += [nn.Linear(8, 4, dtype=torch.bfloat16), nn.Linear(8, 4, dtype=torch.float16)]
        return nn.Sequential(*layers)


def test_the_fills_of_a_whole_model_are_each_parameters_stream_and_bump_versions() -> None:
    """materialize leaves small fills to the core on a thread of its own, written by the
    end of the call: every parameter is its own stream (plan by plan, not deferred),
    and each one's version is bumped as torch's in-place init bumps it."""
    from shardinit._integration.plan import RulesAndDefaults, local_targets, make_plan

    model = _many_small_model()
    shardinit.materialize(model, seed=SEED)
    reference = _many_small_model()
    targets = local_targets(reference, set())
    plan = make_plan(
        reference, targets, seed=SEED, chooser=RulesAndDefaults([], reference, targets),
        captured=None, write_computed=False,
    )  # fmt: skip
    deferred = 0
    at_once = shard.writer()
    for param_plan in plan.params:
        expected = torch.empty(param_plan.target.global_shape, dtype=param_plan.target.dtype)
        param_plan.values.write_runs(at_once, full_runs(tuple(expected.shape)), expected)
        got = model.get_parameter(param_plan.target.name)
        assert torch.equal(got.detach(), expected), param_plan.target.name
        assert got._version > 0, param_plan.target.name
        deferred += got.numel() <= shardinit._core.CHUNK_ELEMENTS
    assert deferred > 2 * _fill.DeferredFills.BATCH


def test_deferred_fills_raise_a_batchs_error_when_the_block_ends() -> None:
    """Two fills of one batch into overlapping memory (never made by the writer, whose
    pieces are disjoint): the core refuses them, raised where the block ends."""
    spec = shardinit.ParamSpec("w", (64,), torch.float32, init.normal(), seed=SEED)
    out = torch.zeros(64)
    with (
        pytest.raises(shardinit.ShardInitError, match="out overlaps"),
        _fill.DeferredFills() as deferred,
    ):
        deferred.add(spec, ((0, 40),), out[:40])
        deferred.add(spec, ((30, 64),), out[30:])
    assert not out.any()


def test_deferred_fills_leaving_on_an_error_start_nothing_more() -> None:
    spec = shardinit.ParamSpec("w", (64,), torch.float32, init.normal(), seed=SEED)
    out = torch.zeros(64)
    with pytest.raises(RuntimeError, match="init code failed"), _fill.DeferredFills() as deferred:
        deferred.add(spec, ((0, 64),), out)
        raise RuntimeError("init code failed")
    assert not out.any(), "the batch taken was not started"


def test_the_cores_view_of_a_tensor_aliases_its_memory_or_raises() -> None:
    """The numpy view the core writes through is the tensor's own memory (a parameter
    that requires grad, a bfloat16 one as raw bits); where it could only be a copy (a
    lazy negated view, a tensor off the CPU) it raises, never hands over a copy whose
    writes the tensor would not see."""
    from shardinit._host import writable_view

    param = torch.nn.Parameter(torch.zeros(4))
    writable_view(param)[1] = 2.5
    assert param[1].item() == 2.5
    half = torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))
    writable_view(half)[0] = 0x3F80  # 1.0 in bfloat16
    assert half[0].item() == 1.0
    with pytest.raises(RuntimeError, match="negative bit"):
        writable_view(torch.zeros(3)._neg_view())
    with pytest.raises((RuntimeError, TypeError), match="meta"):
        writable_view(torch.zeros(3, device="meta"))


def test_deferred_batches_of_many_small_fills_leave_the_caller_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch closed by its count of fills (small ones: the caller's Python is the
    slower side) runs on one thread fewer than its fills ask for; one closed by its
    elements, and the last one (the caller waits for it), on all of them. The values do
    not show the threads, so the threads each batch was started on are read here, and
    the values against the stream's."""
    started: list[int] = []
    real_start = _fill.start_fills_cpu

    def start(fills: Any, threads: int) -> Any:
        started.append(threads)
        return real_start(fills, threads)

    monkeypatch.setattr(_fill, "start_fills_cpu", start)
    small = shardinit.ParamSpec("w", (8,), torch.float32, init.normal(), seed=SEED)
    large = shardinit.ParamSpec(
        "big", (_fill.DeferredFills.ELEMENTS,), torch.float32, init.uniform(), seed=SEED
    )
    outs = [torch.zeros(8) for _ in range(_fill.DeferredFills.BATCH + 1)]
    big = torch.zeros(_fill.DeferredFills.ELEMENTS)
    with _fill.DeferredFills() as deferred:
        for out in outs[:-1]:
            deferred.add(small, ((0, 8),), out, threads=3)
        deferred.add(large, ((0, large.shape[0]),), big, threads=3)
        deferred.add(small, ((0, 8),), outs[-1], threads=3)
    assert started == [2, 3, 3]
    expected = shard.full(small)
    assert all(torch.equal(out, expected) for out in outs)
    assert torch.equal(big, shard.full(large))


def test_deferred_fills_take_only_elementwise_fills_off_cuda() -> None:
    """Which fills the writer may leave for later: elementwise ones, of any size (a large
    one is written on every thread while the caller goes on), into a tensor off CUDA
    (which has its own paths). Orthogonal's matrix is computed whole, at once. The values
    do not show it, so this says it (``make mutants``: ``!=`` made ``==`` in ``takes``
    survived every test)."""
    deferred = _fill.DeferredFills()
    chunk = shardinit._core.CHUNK_ELEMENTS
    assert deferred.takes(True, torch.empty(chunk))
    assert deferred.takes(True, torch.empty(chunk + 1))
    assert not deferred.takes(False, torch.empty(4))  # orthogonal: the whole matrix
    assert deferred.takes(True, torch.empty(4, device="meta"))  # any device but CUDA


def _trunc_normal_layers(count: int) -> tuple[torch.nn.Module, Callable[[], None]]:
    """``count`` meta Linear layers of a few shapes and timm's init code for them
    (``trunc_normal_`` weights: a program of ``uniform_``, ``erfinv_``, ``mul_``,
    ``add_``, ``clamp_``; zero biases)."""
    with torch.device("meta"):
        model = torch.nn.Sequential(
            *[torch.nn.Linear(64 + 32 * (i % 3), 96 - 16 * (i % 2)) for i in range(count)]
        )

    def init_fn() -> None:
        for layer in model:
            assert isinstance(layer, torch.nn.Linear)
            weight = layer.weight  # timm.layers.trunc_normal_(std=0.02), its own steps
            weight.uniform_(-1.0, 1.0).erfinv_().mul_(0.02 * math.sqrt(2.0))
            weight.add_(0.0).clamp_(min=-2.0, max=2.0)
            torch.nn.init.zeros_(layer.bias)

    return model, init_fn


def test_programs_deferred_side_by_side_equal_programs_written_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """materialize leaves a model's elementwise programs to the core in batches, each
    batch's programs side by side on the writer's threads: every parameter gets the
    values it gets written alone, at once, and its version is bumped. Batches are made
    small here so that there are several, each of several programs."""
    batches: list[tuple[int, int]] = []  # per batch: its programs, its threads
    start = _fill.start_fills_cpu

    def spy(fills: list[Any], threads: int) -> shardinit._core.StartedFills:
        programs = sum(isinstance(f[2], shardinit._core.RegisterProgram) for f in fills)
        batches.append((programs, threads))
        return start(fills, threads)

    monkeypatch.setattr(_fill.DeferredFills, "ELEMENTS", 30_000 * _fill.DeferredFills.PROGRAM_COST)
    monkeypatch.setattr(_fill, "start_fills_cpu", spy)
    model, init_fn = _trunc_normal_layers(12)
    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert len(batches) >= 3 and all(programs >= 2 for programs, _ in batches[:-1]), batches
    # Every batch on the writer's threads (it asks for them for every fill).
    assert all(threads == shard.get_num_threads() for _, threads in batches)
    monkeypatch.setattr(_fill.DeferredFills, "takes", lambda *args: False)
    reference, reference_init = _trunc_normal_layers(12)
    shardinit.materialize(reference, seed=SEED, init_fn=reference_init)
    for (name, got), want in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert torch.equal(got.detach(), want.detach()), name
        assert got._version > 0, name
    weight = model[0].weight.detach()
    assert weight.abs().max() <= 2.0 and 0.015 < weight.std() < 0.025  # trunc_normal_(std=0.02)


def test_a_model_of_small_programs_gets_the_programs_values() -> None:
    """materialize writes a whole model through the deferred fills, which take streams
    and programs: small parameters whose init code computes their values (programs) get
    those values, not their streams'."""
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))

    def init_fn() -> None:
        for layer in model:
            assert isinstance(layer, torch.nn.Linear)
            rows = torch.arange(layer.out_features, dtype=torch.float32).view(-1, 1)
            layer.weight.copy_(rows * 0.5 + torch.arange(layer.in_features) * 0.25)
            layer.bias.copy_(torch.arange(layer.out_features, dtype=torch.float32) - 1.0)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    for layer in model:
        assert isinstance(layer, torch.nn.Linear)
        rows = torch.arange(layer.out_features, dtype=torch.float32).view(-1, 1)
        expected = rows * 0.5 + torch.arange(layer.in_features) * 0.25
        assert torch.equal(layer.weight.detach(), expected)
        assert torch.equal(layer.bias.detach(), torch.arange(layer.out_features) - 1.0)


def test_a_program_to_cuda_never_takes_the_stream_kernel(
    staged: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device kernel writes a bare stream only: with it in use, a program to a CUDA
    tensor still goes through the core and the staging buffers (``make mutants``: ``or``
    for ``and`` in ``_fill.fill``'s kernel choice survived every test on a machine
    without a GPU, where the kernel is never in use)."""

    def no_kernel(*args: object) -> None:
        raise AssertionError("a program was written by the stream kernel")

    monkeypatch.setattr(_fill._cuda, "use_device_kernel", lambda device: True)
    monkeypatch.setattr(_fill._cuda, "fill_box", no_kernel)
    monkeypatch.setattr(_fill._cuda, "fill_flat", no_kernel)
    shape = (300, 64)
    record = scaled_record(shape)
    local = torch.full(shape, float("nan")).as_subclass(OnCuda)
    Values(record, SEED).write_runs(shard.writer(), full_runs(shape), local)
    expected = torch.empty(shape)
    Values(record, SEED).write_runs(shard.writer(), full_runs(shape), expected)
    assert torch.equal(local.as_subclass(torch.Tensor), expected)
    assert staged


def test_specs_renamed_from_one_checked_are_the_specs_made_for_each_name() -> None:
    from shardinit._program import writer as writer_module

    normal = init.normal(0.0, 0.02)
    for dtype in (torch.float32, torch.bfloat16):
        for name in ("blocks.0.weight", "blocks.1.weight", "blocks.0.weight"):
            record = ParamRecord(name, (8, 4), dtype, base_ops(normal, (8, 4)))
            made = writer_module._spec(record, 7, normal, None)
            fresh = shardinit.ParamSpec(name, (8, 4), dtype, normal, seed=7)
            assert made == fresh and made.base_init == fresh.base_init
            assert made.key64 == fresh.key64  # the name's own key, not the first one's
    record = ParamRecord("", (8, 4), torch.float32, base_ops(normal, (8, 4)))
    with pytest.raises(shardinit.ShardInitError, match="non-empty"):
        writer_module._spec(record, 7, normal, None)  # a name is checked each time


def test_a_spec_renamed_keeps_its_own_zeros_sign() -> None:
    from shardinit._program import writer as writer_module

    for value in (0.0, -0.0, 0.0):  # equal initializers, not the same bits
        constant = init.constant(value)
        record = ParamRecord("w", (3,), torch.float32, base_ops(constant, (3,)))
        spec = writer_module._spec(record, 0, constant, None)
        assert isinstance(spec.base_init, init.Constant)
        assert math.copysign(1.0, spec.base_init.value) == math.copysign(1.0, value)
        full = shard.writer().full(record, seed=0)
        assert [math.copysign(1.0, x) for x in full.tolist()] == [math.copysign(1.0, value)] * 3
