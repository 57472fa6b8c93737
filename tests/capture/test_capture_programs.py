"""Init programs (issue 19): init code that computes values, captured on meta and
replayed shard-locally by the core's deterministic binary64 evaluator.

* Per operation: the replay of any box (body and tail offsets) equals the full replay's
  slice, one thread equals many, and deterministic values equal torch's own float64
  computation rounded to float32 (within 1 ulp: shardinit rounds once per float32
  temporary with its own math, torch with its kernels).
* In place on parameters (``p.data.uniform_(a, b).log_()``, steps on a part of one).
* The refusal list: each case refused, naming the parameter, the operation and the call
  site.
* Constructor values and the precedence order init_fn, rules, constructor, defaults.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init
from shardinit._program import Computed, Fill
from shardinit.shard import writer

SEED = 77
SHAPE = (7, 5)
HERE = __file__

Build = Callable[[torch.device], torch.Tensor]


def _replay(build: Callable[[nn.Linear], None]) -> tuple[nn.Linear, torch.Tensor]:
    """Captures ``build(lin)`` on a meta Linear(5, 7); the whole weight replayed."""
    with torch.device("meta"):
        lin = nn.Linear(SHAPE[1], SHAPE[0])
    record = shardinit.capture_init(lin, lambda: build(lin))["weight"]
    return lin, writer().full(record, SEED)


def _record(build: Callable[[nn.Linear], None]) -> shardinit.CapturedInit:
    with torch.device("meta"):
        lin = nn.Linear(SHAPE[1], SHAPE[0])
    return shardinit.capture_init(lin, lambda: build(lin))


def _rows_cols(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    rows = torch.arange(SHAPE[0], device=device, dtype=torch.float32).view(-1, 1)
    cols = torch.linspace(-2.0, 3.0, SHAPE[1], device=device)
    return rows, cols


def _r(device: torch.device) -> torch.Tensor:
    return _rows_cols(device)[0]


def _c(device: torch.device) -> torch.Tensor:
    return _rows_cols(device)[1]


# Each: a computation of a (7, 5) float32 tensor from tables, on ``device``.
TABLES: dict[str, Build] = {
    "add_broadcast": lambda d: _r(d) + _c(d),
    "sub_scalar": lambda d: _r(d) - 2.5 + _c(d) * 0,
    "mul_div": lambda d: (_r(d) * 0.3) / (_c(d).abs() + 1),
    "neg_reciprocal": lambda d: -torch.reciprocal(_r(d) + 1 + _c(d) ** 2),
    "pow": lambda d: torch.pow(_r(d) + 1, 1.5) + _c(d) * 0,
    "sqrt_rsqrt": lambda d: (_r(d) + 1).sqrt() * (_c(d) ** 2 + 1).rsqrt(),
    "exp_expm1": lambda d: torch.exp(_c(d) * 0.5) + torch.expm1(_r(d) * 0.1),
    "log_log1p": lambda d: torch.log(_r(d) + 1) + torch.log1p(_c(d).abs()),
    "sin_cos": lambda d: torch.sin(_r(d) * _c(d)) - torch.cos(_r(d)),
    "tanh_sigmoid": lambda d: torch.tanh(_c(d)) + torch.sigmoid(_r(d) - 3),
    "softplus": lambda d: nn.functional.softplus(_c(d) + _r(d) * 0.5),
    "clamp_abs": lambda d: (_c(d) * _r(d)).clamp(min=-1.5, max=4.0).abs(),
    "where": lambda d: torch.where(_c(d) > 0, _r(d), -_c(d)).expand(7, 5),
    "cast": lambda d: (_r(d) / 3).to(torch.bfloat16).float() + _c(d) * 0,
    "cat_slices": lambda d: torch.cat([_c(d)[:2].expand(7, 2), _r(d).expand(7, 3)], 1),
    "eye_ones_full": lambda d: torch.eye(7, 5, device=d)
    + torch.ones(7, 5, device=d) * torch.full((1, 5), 0.25, device=d),
    "python_data": lambda d: torch.tensor([[0.5, -1.0, 2.0, 0.0, 3.25]], device=d).expand(7, 5)
    * _r(d),
}  # fmt: skip


def _boxes() -> list[tuple[tuple[int, int], tuple[int, int]]]:
    # Body and tail offsets, single elements, a column, the last row.
    return [((0, 7), (0, 5)), ((1, 4), (2, 5)), ((6, 7), (0, 5)), ((3, 4), (4, 5)),
            ((0, 7), (3, 4)), ((2, 6), (0, 1))]  # fmt: skip


@pytest.mark.parametrize("name", sorted(TABLES))
def test_table_programs_match_torch_and_any_box(name: str) -> None:
    build = TABLES[name]
    with torch.device("meta"):
        lin = nn.Linear(SHAPE[1], SHAPE[0])
    captured = shardinit.capture_init(lin, lambda: lin.weight.copy_(build(lin.weight.device)))
    record = captured["weight"]
    assert any(isinstance(op.action, Computed) for op in record.ops), record.ops
    full = writer().full(record, SEED)
    for box in _boxes():
        piece = writer().box(record, SEED, box)
        assert torch.equal(piece, full[box[0][0] : box[0][1], box[1][0] : box[1][1]]), box
    previous = shardinit.get_num_threads()
    try:
        shardinit.set_num_threads(1)
        assert torch.equal(writer().full(record, SEED), full)
    finally:
        shardinit.set_num_threads(previous)
    expected = build(torch.device("cpu"))
    torch.testing.assert_close(full, expected, rtol=2**-22, atol=2**-22)


#: More than one chunk of the core (``_core.CHUNK_ELEMENTS``: 4.04 of them, the last one
#: uneven), so that a replay uses the thread count it is given.
BIG_SHAPE = (257, 1031)

#: Programs of BIG_SHAPE from row and column tables, each of another evaluator path.
BIG_TABLES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "sin_cos": lambda r, c: torch.sin(r * c) - torch.cos(r),
    "where": lambda r, c: torch.where(c > 0, r, -c).expand(BIG_SHAPE),
    "cast": lambda r, c: (r / 3).to(torch.bfloat16).float() + c * 0,
}


@pytest.mark.parametrize("name", sorted(BIG_TABLES))
def test_table_programs_replay_the_same_on_1_2_3_and_8_threads(name: str) -> None:
    """A program of more than one chunk replayed on 1, 2, 3 and 8 threads: the same
    values, and a box across chunk edges is their slice (the 7 x 5 tables above fit one
    chunk, which the core writes on the calling thread whatever the setting)."""
    assert math.prod(BIG_SHAPE) > 4 * shardinit._core.CHUNK_ELEMENTS
    with torch.device("meta"):
        lin = nn.Linear(BIG_SHAPE[1], BIG_SHAPE[0])

    def build() -> None:
        rows = torch.arange(BIG_SHAPE[0], dtype=torch.float32).view(-1, 1)
        cols = torch.linspace(-2.0, 3.0, BIG_SHAPE[1])
        lin.weight.copy_(BIG_TABLES[name](rows, cols))

    record = shardinit.capture_init(lin, build)["weight"]
    assert any(isinstance(op.action, Computed) for op in record.ops), record.ops
    replays = {}
    try:
        for threads in (1, 2, 3, 8):
            shardinit.set_num_threads(threads)
            replays[threads] = writer().full(record, SEED)
            box = ((60, 200), (5, 1031))
            piece = writer().box(record, SEED, box)
            assert torch.equal(piece, replays[threads][60:200, 5:1031]), threads
    finally:
        shardinit.set_num_threads(None)
    for threads, values in replays.items():
        assert torch.equal(values, replays[1]), threads


def test_cpu_and_meta_temporaries_give_the_same_program_values() -> None:
    build = TABLES["sin_cos"]
    _, on_meta = _replay(lambda lin: lin.weight.copy_(build(lin.weight.device)))
    _, on_cpu = _replay(lambda lin: lin.weight.copy_(build(torch.device("cpu"))))
    assert torch.equal(on_meta, on_cpu)


def test_random_program_is_keyed_by_the_destination_and_layout_free() -> None:
    def build(lin: nn.Linear) -> None:
        u = torch.rand(7, 5, device=lin.weight.device)
        lin.weight.copy_(torch.exp(u * (math.log(16) - math.log(0.01)) + math.log(0.01)))

    record = _record(build)["weight"]
    full = writer().full(record, SEED)
    assert bool((full >= 0.01 * (1 - 1e-6)).all() and (full <= 16 * (1 + 1e-6)).all())
    assert full.unique().numel() == full.numel()
    for box in _boxes():
        piece = writer().box(record, SEED, box)
        assert torch.equal(piece, full[box[0][0] : box[0][1], box[1][0] : box[1][1]]), box
    # The random source is the stream's uniform at each element's own index.
    uniform = shardinit.full(
        shardinit.ParamSpec("weight", SHAPE, init=init.uniform(0, 1), seed=SEED)
    )
    logs = uniform.double() * (math.log(16) - math.log(0.01)) + math.log(0.01)
    torch.testing.assert_close(full, logs.exp().float(), rtol=2**-21, atol=0)


# --------------------------------------------------------------------------- in place


def test_in_place_log_on_the_parameter_itself() -> None:
    # torchtitan's Gated DeltaNet: param.data.uniform_(0.01, 16.0).log_()
    _, full = _replay(lambda lin: lin.weight.data.uniform_(0.01, 16.0).log_())
    uniform = shardinit.full(
        shardinit.ParamSpec("weight", SHAPE, init=init.uniform(0.01, 16.0), seed=SEED)
    )
    torch.testing.assert_close(full, uniform.double().log().float(), rtol=2**-23, atol=0)
    assert bool((full.exp() >= 0.01 * (1 - 1e-6)).all() and (full.exp() <= 16.0001).all())


def test_in_place_steps_on_part_of_a_parameter() -> None:
    def build(lin: nn.Linear) -> None:
        nn.init.normal_(lin.weight, std=0.5)
        lin.weight.data[2:5].add_(1.0).abs_()
        lin.weight[:, 4:].clamp_(min=0.0)

    _, full = _replay(build)
    normal = shardinit.full(
        shardinit.ParamSpec("weight", SHAPE, init=init.normal(0, 0.5), seed=SEED)
    )
    expected = normal.clone()
    expected[2:5] = (expected[2:5].double() + 1).abs().float()
    expected[:, 4:] = expected[:, 4:].clamp(min=0.0)
    assert torch.equal(full, expected)


def test_qwen3_next_pattern_copies_a_random_temporary_computed_in_place() -> None:
    def build(lin: nn.Linear) -> None:
        lin.bias.copy_(torch.empty(7, device=lin.bias.device).uniform_(0.01, 16).log_())

    captured = _record(build)
    bias = writer().full(captured["bias"], SEED)
    uniform = shardinit.full(
        shardinit.ParamSpec("bias", (7,), init=init.uniform(0.01, 16), seed=SEED)
    )
    torch.testing.assert_close(bias, uniform.double().log().float(), rtol=2**-23, atol=0)


def test_a_bare_random_source_stays_a_fill() -> None:
    captured = _record(lambda lin: lin.weight.copy_(torch.randn(7, 5) * 1))
    assert [type(op.action) for op in captured["weight"].ops] == [Computed]
    captured = _record(lambda lin: lin.weight.copy_(torch.randn(7, 5)))
    assert captured["weight"].ops[0].action == Fill(init.normal(0.0, 1.0))


# --------------------------------------------------------------------------- refused


def _refused(build: Callable[[nn.Linear], None], *words: str, param: str = "weight") -> str:
    with torch.device("meta"):
        lin = nn.Linear(SHAPE[1], SHAPE[0])
    with pytest.raises(shardinit.UnsupportedInitOpError) as caught:
        shardinit.capture_init(lin, lambda: build(lin))
    message = str(caught.value)
    for word in (f"'{param}'", f"{HERE}:", *words):
        assert word in message, message
    return message


def test_not_elementwise_is_refused() -> None:
    meta = torch.device("meta")
    _refused(lambda lin: lin.weight.copy_(torch.rand(7, 5, device=meta).cumsum(0)), "cumsum")
    _refused(lambda lin: lin.weight.copy_(torch.rand(7, 5).sort(1).values), "sort")
    _refused(lambda lin: lin.weight.copy_(torch.rand(7, 5) - torch.rand(7, 5).mean()), "mean")


def test_reading_values_of_a_parameter_is_refused() -> None:
    def copied(lin: nn.Linear) -> None:
        lin.weight.copy_(lin.bias.view(7, 1) * 2)

    line = copied.__code__.co_firstlineno + 1
    message = _refused(copied, "copy_", f"mul at {HERE}:{line}", "do not exist on meta")
    assert "parameter 'bias'" in message, message  # the parameter read, beside the written

    def control_flow(lin: nn.Linear) -> None:
        if lin.weight.max() > 0:
            lin.weight.data.zero_()

    _refused(control_flow, "max", "reads the parameter's values")
    # In place on a tensor made before the capture (not followed), from the parameter:
    # a read of the parameter, not a write of it.
    outside = torch.zeros(7, 5)
    message = _refused(lambda lin: outside.add_(lin.weight), "add_", "reads the parameter's")
    assert "in-place operation on the parameter" not in message, message


def _through_steps(lin: nn.Linear) -> None:  # in a temporary, then copied in
    t = (lin.bias * 0.5).exp()
    lin.bias.copy_(torch.cat([t[:3], t[3:]]).clone())


def _in_place_on_a_temporary(lin: nn.Linear) -> None:
    t = torch.zeros(7, 5, device=lin.weight.device)
    t.add_(lin.weight)
    lin.weight.copy_(t)


@pytest.mark.parametrize("build", [_through_steps, _in_place_on_a_temporary])
def test_a_parameters_default_through_temporaries_back_in_place_is_eagers(
    build: Callable[[nn.Linear], None],
) -> None:
    """Values init_fn did not set are the parameter's default (issue 37): computed on
    and copied back to their own positions, they are eager's steps on that default."""
    with torch.device("meta"):
        ours, eager = nn.Linear(SHAPE[1], SHAPE[0]), nn.Linear(SHAPE[1], SHAPE[0])
    shardinit.materialize(ours, seed=SEED, init_fn=lambda: build(ours))
    shardinit.materialize(eager, seed=SEED)  # the default, then the same code eagerly
    with torch.no_grad():
        build(eager)
    assert torch.equal(ours.weight, eager.weight) and torch.equal(ours.bias, eager.bias)


def test_values_computed_from_a_parameter_are_refused_where_they_are_used() -> None:
    _refused(lambda lin: lin.weight.data.add_(lin.bias.view(7, 1)), "add_", "parameter 'bias'")

    def control_flow(lin: nn.Linear) -> None:  # a value of them reaches Python
        if (lin.weight * 2 > 0).all():
            lin.weight.data.zero_()

    _refused(control_flow, "all at", "mul at", "do not exist on meta")
    _refused(lambda lin: float((lin.bias * 2)[0]), "__float__ at", "mul at", param="bias")


def test_a_buffer_computed_from_a_parameters_values_is_refused() -> None:
    class WithBuffer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(SHAPE[1], SHAPE[0])
            self.register_buffer("scale", torch.empty(SHAPE[0]))

    with torch.device("meta"):
        model = WithBuffer()
    with pytest.raises(shardinit.UnsupportedInitOpError) as caught:
        shardinit.capture_init(model, lambda: model.scale.copy_(model.lin.bias * 2))
    for word in ("buffer 'scale'", "copy_", "parameter 'lin.bias'", f"mul at {HERE}:"):
        assert word in str(caught.value), str(caught.value)


def test_a_parameters_shape_through_computed_values_is_replayed() -> None:
    """RWKV's ``ones_like(p * log(0.3) + zigzag)``: only the shape of values read from a
    parameter is used, so the result is the constant."""

    def build(lin: nn.Linear) -> None:
        zigzag = torch.tensor([(i + 1) % 3 - 1 for i in range(5)], device=lin.weight.device)
        lin.weight.copy_(torch.ones_like(lin.weight * math.log(0.3) + zigzag * 0.5))
        lin.bias.copy_(torch.full_like(lin.bias.exp(), 0.25) - torch.zeros_like(lin.bias + 1))

    captured = _record(build)
    assert captured["weight"].ops[0].action == Fill(init.constant(1.0))
    assert torch.equal(writer().full(captured["weight"], SEED), torch.ones(SHAPE))
    assert torch.equal(writer().full(captured["bias"], SEED), torch.full((7,), 0.25))


def test_broadcast_of_random_values_is_refused_at_its_call_site() -> None:
    def build(lin: nn.Linear) -> None:
        row = torch.rand(1, 5)
        lin.weight.copy_(row.expand(7, 5))

    line = build.__code__.co_firstlineno + 2
    message = _refused(build, "repeats random values", f"{HERE}:{line}", "copy_")
    assert "expand" in message, message

    def broadcast(lin: nn.Linear) -> None:
        lin.weight.copy_(torch.rand(5) + torch.zeros(7, 5))

    _refused(broadcast, "repeats random values")

    def overlapping(lin: nn.Linear) -> None:  # windows share elements
        lin.weight.copy_(torch.rand(11).unfold(0, 5, 1))

    _refused(overlapping, "repeats random values")
    _refused(lambda lin: lin.weight.copy_(torch.rand(40)[torch.arange(35) % 9].view(7, 5)))


def test_two_random_values_in_one_element_are_refused() -> None:
    _refused(lambda lin: lin.weight.copy_(torch.rand(7, 5) + torch.randn(7, 5)), "two random")

    def shifted(lin: nn.Linear) -> None:
        r = torch.rand(8, 5)
        lin.weight.copy_(r[1:] - r[:-1])

    _refused(shifted, "two random")


def _normal(name: str, shape: tuple[int, ...] = SHAPE) -> torch.Tensor:
    return shardinit.full(shardinit.ParamSpec(name, shape, init=init.normal(0, 1), seed=SEED))


def test_a_parameters_own_values_go_back_into_it() -> None:
    """NemotronH's ``kaiming_uniform_(p); copy_(p, p / sqrt(n))``: the values init code
    wrote to a parameter, read by elementwise steps, are a program of its own stream
    that may be written back at the same places (in place too, ``p.add_(p)``)."""

    def rescaled(lin: nn.Linear) -> None:
        nn.init.normal_(lin.weight)
        lin.weight.copy_(lin.weight / math.sqrt(3.0))
        lin.bias.data.normal_()
        lin.bias.data.add_(lin.bias.exp() * 2)

    captured = _record(rescaled)
    weight, bias = _normal("weight"), _normal("bias", (7,))
    expected = weight / math.sqrt(3.0)  # eager: float32's division by float32's sqrt(3)
    assert torch.equal(writer().full(captured["weight"], SEED), expected)
    exp2 = (bias.double().exp().float().double() * 2).float()
    torch.testing.assert_close(
        writer().full(captured["bias"], SEED), (bias.double() + exp2.double()).float(),
        rtol=2**-23, atol=0,
    )  # fmt: skip
    for box in (((0, 3), (0, 5)), ((2, 7), (1, 4))):
        rows, cols = (slice(*box[0]), slice(*box[1]))
        assert torch.equal(writer().box(captured["weight"], SEED, box), expected[rows, cols])


def test_own_values_back_through_one_element_dims() -> None:
    """Kimi Linear's ``copy_(A_log, uniform_(A_log, 1, 16).log())`` on a (1, 1, 4, 1)
    parameter: the write reads its one-element dims as 0, the fill as coordinates; the
    same places either way."""

    class Gate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.A_log = nn.Parameter(torch.empty(1, 1, 4, 1))

    with torch.device("meta"):
        gate = Gate()

    def init_fn() -> None:
        with torch.no_grad():
            gate.A_log.copy_(nn.init.uniform_(gate.A_log, a=1.0, b=16.0).log())

    record = shardinit.capture_init(gate, init_fn)["A_log"]
    uniform = shardinit.full(
        shardinit.ParamSpec("A_log", (1, 1, 4, 1), init=init.uniform(1.0, 16.0), seed=SEED)
    )
    torch.testing.assert_close(
        writer().full(record, SEED), uniform.double().log().float(), rtol=2**-23, atol=0
    )


def test_a_random_value_landing_in_two_places_is_refused() -> None:
    """A random value is drawn at its destination element's own index, so a copy of one
    into a second place would be another value; torch's would be equal: refused."""
    meta = torch.device("meta")

    def two_boxes(lin: nn.Linear) -> None:
        t = torch.rand(7, 5, device=meta)
        lin.weight.data[:3].copy_(t[:3])
        lin.weight.data[3:6].copy_(t[:3])

    def two_parameters(lin: nn.Linear) -> None:
        t = torch.randn(7, device=meta)
        lin.bias.data.copy_(t)
        lin.weight.data[:, 0].copy_(t * 2)

    def a_clone(lin: nn.Linear) -> None:
        t = torch.empty(7, device=meta).normal_()
        lin.bias.data.copy_(t.clone())
        lin.weight.data[:, 1].copy_(t)

    def moved_within(lin: nn.Linear) -> None:
        nn.init.normal_(lin.weight)
        lin.weight.data[:3].copy_(lin.weight[3:6] * 1.0)

    for build, second in ((two_boxes, 3), (two_parameters, 3), (a_clone, 3), (moved_within, 2)):
        line = build.__code__.co_firstlineno + second
        message = _refused(build, "land in a second place", f"copy_ at {HERE}:{line}")
        if build is not moved_within:  # the first place is named too
            assert f"copy_ at {HERE}:{line - 1}" in message, message


def test_disjoint_parts_of_a_random_temporary_land_once_each() -> None:
    """Parts of one random temporary copied to disjoint places (row by row, two
    parameters, computed from row by row) are each drawn once: captured, with the
    stream's values."""
    meta = torch.device("meta")

    def rows(lin: nn.Linear) -> None:
        t = torch.randn(14, 5, device=meta)
        for row in range(7):
            lin.weight.data[row].copy_(t[row])
        lin.bias.data.copy_(t[7:, 2])

    captured = _record(rows)
    assert torch.equal(writer().full(captured["weight"], SEED), _normal("weight"))
    assert torch.equal(writer().full(captured["bias"], SEED), _normal("bias", (7,)))

    def computed_rows(lin: nn.Linear) -> None:  # each row computed from its own part
        t = torch.randn(7, 5, device=meta)
        for row in range(7):
            lin.weight.data[row].copy_(t[row] * 2)
        lin.bias.data.zero_()

    captured = _record(computed_rows)
    expected = (_normal("weight").double() * 2).float()
    assert torch.equal(writer().full(captured["weight"], SEED), expected)


def test_values_drawn_from_torchs_generator_are_refused() -> None:
    _refused(lambda lin: lin.weight.copy_(torch.randint(0, 9, (7, 5)).float()), "random generator")


# --------------------------------------------------------------------------- constructors


class WithConstructorValues(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.6592))
        self.gain = nn.Parameter(torch.ones(4) * 3)
        self.noise = nn.Parameter(torch.randn(6) * 0.02)
        self.decay = nn.Parameter(torch.log(torch.arange(1, 5, dtype=torch.float32)))
        self.plain = nn.Parameter(torch.empty(3))  # never written: no constructor value
        self.proj = nn.Linear(4, 4)


def _build(record: bool = True) -> WithConstructorValues:
    with torch.device("meta"):
        if not record:
            return WithConstructorValues()
        with shardinit.record_constructors():
            return WithConstructorValues()


def test_constructor_values_are_replayed() -> None:
    model = _build()
    shardinit.materialize(model, seed=SEED, rules={"plain": init.zeros()})
    assert model.scale.item() == torch.tensor(2.6592).item()
    assert torch.equal(model.gain.detach(), torch.full((4,), 3.0))
    torch.testing.assert_close(
        model.decay.detach(), torch.log(torch.arange(1, 5.0)), rtol=2**-23, atol=0
    )
    noise = shardinit.full(shardinit.ParamSpec("noise", (6,), init=init.normal(0, 1), seed=SEED))
    # eager: a float32 product with the Python 0.02 as float32 holds it
    assert torch.equal(model.noise.detach(), noise * 0.02)
    assert torch.equal(model.plain.detach(), torch.zeros(3))


def test_without_recording_the_constructor_value_is_missing() -> None:
    with pytest.raises(shardinit.ShardInitError, match="scale"):
        shardinit.materialize(_build(record=False), seed=SEED, rules={"plain": init.zeros()})


def test_precedence_init_fn_then_rules_then_constructor_then_defaults() -> None:
    """gain: init_fn (all of it); scale: a rule beats its constructor value; decay: its
    constructor value; proj.weight: a constructor that wrote torch.nn's default; noise:
    init_fn covers part, the constructor value gives the rest."""
    model = _build()

    def init_fn() -> None:
        model.gain.data.fill_(7.0)
        model.noise.data[:2].zero_()

    rules = {"scale": init.constant(-1.0), "plain": init.zeros(), "gain": init.constant(5.0)}
    with pytest.warns(UserWarning, match="gain"):  # the rule that init_fn makes useless
        shardinit.materialize(model, seed=SEED, rules=rules, init_fn=init_fn)
    assert torch.equal(model.gain.detach(), torch.full((4,), 7.0))
    assert model.scale.item() == -1.0
    torch.testing.assert_close(
        model.decay.detach(), torch.log(torch.arange(1, 5.0)), rtol=2**-23, atol=0
    )
    noise = shardinit.full(shardinit.ParamSpec("noise", (6,), init=init.normal(0, 1), seed=SEED))
    expected = noise * 0.02  # eager: float32's product with float32's 0.02
    expected[:2] = 0
    assert torch.equal(model.noise.detach(), expected)
    plain = _build(record=False)
    shardinit.materialize(plain, seed=SEED, rules={"scale": init.zeros(), "gain": init.zeros(),
                                                   "noise": init.zeros(), "decay": init.zeros(),
                                                   "plain": init.zeros()})  # fmt: skip
    assert torch.equal(model.proj.weight.detach(), plain.proj.weight.detach())


def test_unreplayable_constructor_values_are_refused_unless_overridden() -> None:
    class Orthogonal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # orthogonal_ of the parameter itself is its own; transposed, another matrix's
            self.weight = nn.Parameter(nn.init.orthogonal_(torch.empty(6, 4)).T)

    with torch.device("meta"), shardinit.record_constructors():
        model = Orthogonal()
    with pytest.raises(shardinit.ShardInitError, match="constructor's value cannot be replayed"):
        shardinit.materialize(model, seed=SEED)
    shardinit.materialize(model, seed=SEED, rules={"weight": init.zeros()})
    assert not model.weight.any()


class ConstantsThroughRounding(nn.Module):
    """timm's constructors: the drop-path schedule ``linspace(0, 0.0, depth)`` on the CPU,
    a constant through a rounding step (``add_(0.0)``) and a scale (``mul_(0.1)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.rates = torch.linspace(0, 0.0, 2, device="cpu").tolist()
        self.bias = nn.Parameter(torch.zeros(4))
        self.bias.data.add_(0.0)
        self.gain = nn.Parameter(torch.ones(4))
        self.gain.data.mul_(0.1)


def test_shardinits_own_tensors_ignore_the_meta_default_device() -> None:
    """Issue 29's crash: the tensors shardinit builds for its own arithmetic (a constant's
    rounding, a scale's float32 factor, a spec's bounds, materialize's host buffer, the
    fingerprint's indices) are on the CPU whatever the default device is."""
    with torch.device("meta"), shardinit.record_constructors():
        assert torch.linspace(0, 0.0, 2, device="cpu").tolist() == [0.0, 0.0]
        model = ConstantsThroughRounding()
    with torch.device("meta"):
        spec = shardinit.ParamSpec("w", (4,), dtype=torch.bfloat16, init=init.uniform(0, 1),
                                   seed=SEED)  # fmt: skip
        shardinit.materialize(model, seed=SEED)
        lin = nn.Linear(SHAPE[1], SHAPE[0])

        def steps() -> None:
            lin.weight.data.uniform_(0.5, 2.0).log_()
            lin.bias.data.fill_(0.5).mul_(0.3)

        shardinit.materialize(lin, seed=SEED, init_fn=steps)
        printed = shardinit.fingerprint(lin.weight.detach())
    assert model.rates == [0.0, 0.0]
    assert torch.equal(model.bias.detach(), torch.zeros(4))
    assert torch.equal(model.gain.detach(), torch.full((4,), 0.1))
    assert lin.weight.device.type == "cpu" and spec.dtype == torch.bfloat16
    assert torch.equal(lin.bias.detach(), torch.full((7,), 0.5) * 0.3)
    uniform = shardinit.full(
        shardinit.ParamSpec("weight", SHAPE, init=init.uniform(0.5, 2.0), seed=SEED)
    )
    torch.testing.assert_close(lin.weight.detach(), uniform.double().log().float(),
                               rtol=2**-23, atol=0)  # fmt: skip
    assert printed == shardinit.fingerprint(lin.weight.detach())


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device; the host evaluation it copies to the device is tested "
    "on the CPU by the tests above",
)
def test_programs_on_cuda_destinations_equal_the_cpu() -> None:
    """CUDA destinations are evaluated on the host and copied: the same bits."""

    def build(lin: nn.Linear) -> None:
        lin.weight.copy_(TABLES["sin_cos"](lin.weight.device))
        lin.bias.data.uniform_(0.01, 16.0).log_()

    models = []
    for device in ("cpu", "cuda"):
        with torch.device("meta"):
            lin = nn.Linear(SHAPE[1], SHAPE[0])
        shardinit.materialize(lin, seed=SEED, device=device, init_fn=lambda lin=lin: build(lin))
        models.append(lin)
    for (name, cpu), cuda in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
        assert cuda.device.type == "cuda"
        assert torch.equal(cpu.detach(), cuda.detach().cpu()), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "initializer",
    [init.zeros(), init.ones(), init.constant(0.02), init.constant(1 / 3), init.constant(-2.5),
     init.constant(65504.0), init.constant(1e-8), init.normal(0.0, 0.02)],
)  # fmt: skip
def test_a_fill_is_handed_to_the_core_as_its_program_would_be(
    initializer: init.BaseInit, dtype: torch.dtype
) -> None:
    # The writer takes a fill's initializer without building its program: the same
    # initializer bare_source finds in that program, or none (then it is evaluated).
    from shardinit._program.exact import bare_source
    from shardinit._program.nodes import Const

    fill = Fill(initializer)
    assert fill.plain_init(dtype) == bare_source(fill.after(dtype, 2, 0, Const(math.nan)))
