"""Init code nobody listed (issue 51's "checked against init code that nobody listed"),
round 10: what an ML engineer writes in ``_init_weights`` / ``reset_parameters``, run
by shardinit's capture and eagerly on the same model, compared by state
(tests/helpers/probe_states.py).

* ``DETERMINISTIC``: constants, tables, copies, masks, index writes, narrow and
  integer dtypes: eager's bytes.
* ``RANDOM``: random fills spelled as engineers spell them (kaiming with its modes,
  xavier with a gain, slices drawn apart, ``copy_`` of a scaled draw), each bit for bit
  the stream's fill it stands for.
* ``REFUSED``: what the capture cannot compute, refused naming the operation.
* Sinusoidal tables written to every other column (``pe[:, 0::2] = sin``), a few
  hundred elements and more: torch's values (each slice one write, not one per element);
  a value that still nests past Python's recursion limit (a flat step written element
  by element) is refused naming the tensor.

Under FSDP2 at worlds 1 and 2 (gloo) a few give the unsharded bytes."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import probe_states
import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn

import shardinit

SEED = 5
Init = Callable[["_Model"], Any]


class _Model(nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.a = nn.Linear(16, 12, dtype=dtype)  # weight (12, 16)
        self.b = nn.Linear(12, 16, dtype=dtype)  # weight (16, 12)
        self.conv = nn.Conv2d(4, 6, 3, dtype=dtype)  # weight (6, 4, 3, 3)
        self.emb = nn.Embedding(10, 8, padding_idx=0, dtype=dtype)


def _build(dtype: torch.dtype = torch.float32) -> _Model:
    with torch.device("meta"), shardinit.record_constructors():
        return _Model(dtype)


def _same_bytes(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        differ = got[name].reshape(-1).view(torch.uint8) != value.reshape(-1).view(torch.uint8)
        assert not bool(differ.any()), f"{name}: {int(differ.sum())} bytes differ"


def _w(m: _Model) -> torch.Tensor:
    return m.a.weight


def _grid(rows: int = 12, cols: int = 16) -> torch.Tensor:
    return torch.arange(rows * cols, dtype=torch.float32).view(rows, cols)


DETERMINISTIC: dict[str, Init] = {
    "slice_add_after_fill": lambda m: (_w(m).fill_(0.5), _w(m)[:, :4].add_(1.5)),
    "index_fill_columns": lambda m: (
        _w(m).zero_(), _w(m).index_fill_(1, torch.tensor([0, 3, 5]), 2.0)),
    "masked_fill_upper": lambda m: (
        _w(m).fill_(1.0), _w(m).masked_fill_(torch.ones(12, 16, dtype=torch.bool).triu(1), 0.0)),
    "scatter_one_hot": lambda m: (
        _w(m).zero_(), _w(m).scatter_(1, (torch.arange(12) * 5 % 16).unsqueeze(1), 1.0)),
    "where_of_coordinates": lambda m: _w(m).copy_(
        torch.where(torch.arange(16) % 3 == 0, 1.0, -1.0).expand(12, 16)),
    "diag_embed_top_block": lambda m: (
        m.b.weight.zero_(), m.b.weight[:12].copy_(torch.diag_embed(torch.arange(12.0)))),
    "eye_": lambda m: nn.init.eye_(_w(m)),
    "dirac_": lambda m: nn.init.dirac_(m.conv.weight),
    "fill_diagonal_": lambda m: (_w(m).zero_(), _w(m).fill_diagonal_(3.0)),
    "tril_in_place": lambda m: (_w(m).fill_(2.0), _w(m).tril_()),
    "triu_of_ones": lambda m: _w(m).copy_(torch.ones(12, 16).triu(2)),
    "clamp_of_linspace": lambda m: (
        _w(m).copy_(torch.linspace(-3, 3, 192).view(12, 16)), _w(m).clamp_(-1, 1)),
    "flip_of_table": lambda m: _w(m).copy_(_grid().flip(1) / 7),
    "roll_of_table": lambda m: _w(m).copy_(_grid().roll(3, 1)),
    "repeat_of_tensor": lambda m: m.a.bias.copy_(torch.tensor([1.0, 2.0, 3.0]).repeat(4)),
    "cat_of_halves": lambda m: m.a.bias.copy_(torch.cat([torch.zeros(6), torch.ones(6)])),
    "outer_of_aranges": lambda m: _w(m).copy_(torch.outer(torch.arange(12.0), torch.arange(16.0))),
    "inverse_frequencies": lambda m: m.a.bias.copy_(
        1.0 / (10000 ** (torch.arange(0, 12).float() / 12))),
    "data_assignment": lambda m: setattr(_w(m), "data", torch.full((12, 16), 0.25)),
    "padding_row_zeroed_after_constant": lambda m: (
        m.emb.weight.fill_(1.0), m.emb.weight[m.emb.padding_idx].zero_()),
    "bias_from_own_fill": lambda m: (m.a.bias.fill_(2.0), m.a.bias.mul_(m.a.bias)),
    "transposed_view_write": lambda m: _w(m).t().copy_(_grid(16, 12)),
    "unfolded_rows_fill": lambda m: (_w(m).zero_(), _w(m).view(-1)[::17].fill_(4.0)),
    "conv_center_tap": lambda m: (
        m.conv.weight.zero_(), m.conv.weight[:, :, 1, 1].fill_(1.0)),
    "cumsum_of_ones": lambda m: _w(m).copy_(torch.ones(12, 16).cumsum(1)),
    "matmul_of_tables": lambda m: _w(m).copy_(_grid(12, 4) @ _grid(4, 16)),
    "parameter_reassigned": lambda m: setattr(
        m.a, "weight", nn.Parameter(torch.full((12, 16), 2.0))),
    "index_copy_rows": lambda m: (
        _w(m).zero_(), _w(m).index_copy_(0, torch.tensor([1, 4]), torch.ones(2, 16))),
    "bool_mask_assignment": lambda m: (
        _w(m).fill_(3.0), _w(m).__setitem__(torch.eye(12, 16, dtype=torch.bool), -1.0)),
    "index_rows_assignment": lambda m: (
        _w(m).zero_(), _w(m).__setitem__(torch.tensor([0, 5, 7]), 1.0)),
    "masked_scatter_diagonal": lambda m: (_w(m).zero_(), _w(m).masked_scatter_(
        torch.eye(12, 16, dtype=torch.bool), _grid())),
    "kron_blocks": lambda m: _w(m).copy_(torch.kron(torch.eye(3, 4), torch.ones(4, 4))),
    "block_diag": lambda m: m.b.weight.copy_(
        torch.block_diag(torch.ones(8, 6), 2 * torch.ones(8, 6))),
    "sort_of_table": lambda m: _w(m).copy_(_grid().flip(1).sort(1).values),
    "powers_of_half": lambda m: m.a.bias.copy_(torch.pow(0.5, torch.arange(12.0))),
    "outer_of_linspaces": lambda m: _w(m).copy_(
        torch.linspace(0, 1, 12)[:, None] * torch.linspace(-1, 1, 16)[None]),
    "meshgrid_sum": lambda m: _w(m).copy_(torch.stack(
        torch.meshgrid(torch.arange(12.0), torch.arange(16.0), indexing="ij")).sum(0)),
    "real_of_polar": lambda m: m.a.bias.copy_(
        torch.polar(torch.ones(12), torch.arange(12.0)).real),
}  # fmt: skip


def _pos_div(n: int, d: int) -> torch.Tensor:
    position = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    return position * torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_deterministic_init_code_gives_eagers_bytes(name: str) -> None:
    init = DETERMINISTIC[name]
    _same_bytes(probe_states.ours(_build(), init, SEED), probe_states.eager(_build(), init, SEED))


NARROW: dict[str, tuple[torch.dtype, Init]] = {
    "bf16_table": (torch.bfloat16, lambda m: _w(m).copy_(_grid() / 3)),
    "fp16_fill_then_scale": (torch.float16, lambda m: (_w(m).fill_(0.1), _w(m).mul_(3.0))),
    "fp64_eye": (torch.float64, lambda m: nn.init.eye_(_w(m))),
    "bf16_masked_fill": (torch.bfloat16, lambda m: (
        _w(m).fill_(1.0), _w(m).masked_fill_(torch.eye(12, 16, dtype=torch.bool), -2.0))),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NARROW))
def test_other_dtypes_give_eagers_bytes(name: str) -> None:
    dtype, init = NARROW[name]
    _same_bytes(
        probe_states.ours(_build(dtype), init, SEED), probe_states.eager(_build(dtype), init, SEED)
    )


#: Init code drawing random values, each paired with code drawing the same ones.
RANDOM: dict[str, tuple[Init, Init]] = {  # (a.weight: fan_in 16, fan_out 12)
    "kaiming_normal_fan_out_relu": (
        lambda m: nn.init.kaiming_normal_(_w(m), mode="fan_out", nonlinearity="relu"),
        lambda m: _w(m).normal_(0.0, math.sqrt(2.0 / 12))),
    "kaiming_uniform_leaky": (
        lambda m: nn.init.kaiming_uniform_(_w(m), a=0.2, nonlinearity="leaky_relu"),
        lambda m: _w(m).uniform_(
            -math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.04)) / 4,
            math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.04)) / 4)),
    "xavier_normal_gain": (
        lambda m: nn.init.xavier_normal_(_w(m), gain=nn.init.calculate_gain("tanh")),
        lambda m: _w(m).normal_(0.0, 5.0 / 3 * math.sqrt(2.0 / 28))),
    "normal_init_helper": (
        lambda m: nn.init.normal_(_w(m), mean=0.1, std=0.02),
        lambda m: _w(m).normal_(0.1, 0.02)),
    "slices_drawn_apart": (
        lambda m: (_w(m)[:6].normal_(0, 0.5), _w(m)[6:].uniform_(-1, 1)),
        lambda m: (_w(m).normal_(0, 0.5), _w(m)[6:].uniform_(-1, 1))),
    "draw_then_zero_padding_row": (
        lambda m: (m.emb.weight.normal_(), m.emb.weight[0].zero_()),
        lambda m: (nn.init.normal_(m.emb.weight), m.emb.weight[0].fill_(0.0))),
    "uniform_through_data": (
        lambda m: _w(m).data.uniform_(-0.1, 0.1),
        lambda m: nn.init.uniform_(_w(m), -0.1, 0.1)),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_init_code_draws_what_its_equivalent_draws(name: str) -> None:
    spelled, equivalent = RANDOM[name]
    _same_bytes(
        probe_states.ours(_build(), spelled, SEED), probe_states.ours(_build(), equivalent, SEED)
    )


#: Init code the capture cannot compute, refused naming the operation.
REFUSED: dict[str, tuple[Init, str]] = {
    "sparse_": (lambda m: nn.init.sparse_(_w(m), 0.5, std=0.01),
                r"sparse_\(sparsity=0.5, std=0.01\).*random positions of the whole tensor"),
    "copy_of_another_parameter": (
        lambda m: (_w(m).fill_(1.5), m.b.weight.copy_(_w(m).T)),
        r"parameter 'b.weight': copy_ .*reads the values of parameter 'a.weight'"),
    "rows_normalized_by_their_norm": (
        lambda m: (_w(m).normal_(), _w(m).div_(_w(m).norm(dim=1, keepdim=True))),
        r"parameter 'a.weight': norm at .*reads the parameter's values"),
    "randperm_of_rows": (lambda m: _w(m).copy_(_grid()[torch.randperm(12)]),
                         r"randperm at .*draws from torch's random generator"),
    "bernoulli_": (lambda m: _w(m).bernoulli_(0.3), r"parameter 'a.weight': bernoulli_ at "),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_capture_cannot_compute_is_refused_by_name(name: str) -> None:
    init, message = REFUSED[name]
    with pytest.raises(shardinit.ShardInitError, match=message):
        probe_states.ours(_build(), init, SEED)


# ------------------------------------------------------------- a parameter's own values


def _draw(m: _Model) -> None:
    _w(m).normal_()


#: Steps on the values ``_draw`` put in ``a.weight``: the oracle is eager torch's step
#: applied to shardinit's own draw (the same random values), bit for bit.
OWN: dict[str, Init] = {
    "clone_copied_back": lambda m: _w(m).copy_(_w(m).clone()),
    "rows_cloned_back_in_place": lambda m: _w(m)[1:].copy_(_w(m)[1:].clone()),
    "clone_scaled_back": lambda m: _w(m).copy_(_w(m).clone().mul_(2.0)),
    "transposed_contiguous_back": lambda m: _w(m).copy_(_w(m).T.contiguous().T),
    "clone_filled_then_copied": lambda m: _w(m).copy_(_w(m).clone().fill_(2.0)),
    "where_positive": lambda m: _w(m).copy_(torch.where(_w(m) > 0, _w(m), 0.0)),
    "masked_fill_of_negatives": lambda m: _w(m).masked_fill_(_w(m) < 0, 0.0),
    "clamp_": lambda m: _w(m).clamp_(-0.5, 0.5),
    "triu_": lambda m: _w(m).triu_(),
    "bfloat16_round_trip": lambda m: _w(m).copy_(_w(m).bfloat16().float()),
}


@pytest.mark.parametrize("name", sorted(OWN))
def test_steps_on_a_parameters_own_values_are_eagers(name: str) -> None:
    got = probe_states.ours(_build(), lambda m: (_draw(m), OWN[name](m)), SEED)
    model = _build()
    probe_states.ours(model, _draw, SEED)
    with torch.no_grad():
        OWN[name](model)
    _same_bytes(got, probe_states.state(model))


_SECOND_PLACE = r"random values that normal_\(mean=0.0, std=1.0\) at .* would land in a second"


@pytest.mark.parametrize("moved", [
    lambda m: _w(m)[1:].copy_(_w(m)[:-1].clone()),
    lambda m: _w(m)[:, 1:].copy_(_w(m)[:, :-1].clone()),
    lambda m: _w(m)[1:].copy_(_w(m).clone()[:-1]),
    lambda m: _w(m)[1:].copy_(_w(m).data.clone()[:-1]),
    lambda m: _w(m).__setitem__(slice(1, None), _w(m).detach().clone()[:-1]),
    lambda m: _w(m)[1:].copy_(torch.empty_like(_w(m)).copy_(_w(m))[:-1]),
    lambda m: _w(m)[1:].copy_(_w(m).new_empty((12, 16)).copy_(_w(m))[:-1]),
], ids=["rows", "columns", "slice_of_clone", "data_clone", "detached_clone_assigned",
        "empty_like_copied", "new_empty_copied"])  # fmt: skip
def test_a_clone_of_random_values_moved_to_other_places_is_refused(moved: Init) -> None:
    """Eager's shift puts row 0's values in rows 0 and 1. A clone's values are the
    parameter's at their places: landing elsewhere, they are refused as any copy of
    them is (before: the clone was a fill, drawn again where it landed, so every row
    kept its own values, silently unlike eager's)."""
    with pytest.raises(shardinit.ShardInitError, match=_SECOND_PLACE):
        probe_states.ours(_build(), lambda m: (_draw(m), moved(m)), SEED)


# ------------------------------------------------------- tables in every other column


class _Sinusoids(nn.Module):
    """The positional table of PyTorch's transformer tutorial (sin in the even columns,
    cos in the odd ones), held as a buffer and copied into a parameter (or not)."""

    def __init__(self, rows: int, dim: int, copied: bool = True) -> None:
        super().__init__()
        table = torch.zeros(rows, dim)
        table[:, 0::2] = torch.sin(_pos_div(rows, dim))
        table[:, 1::2] = torch.cos(_pos_div(rows, dim))
        self.register_buffer("pe", table)
        self.weight = nn.Parameter(torch.empty(rows, dim) if copied else torch.zeros(1))
        if copied:
            with torch.no_grad():
                self.weight.copy_(table)


def _sinusoids(rows: int, dim: int, copied: bool = True) -> _Sinusoids:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Sinusoids(rows, dim, copied)
    shardinit.materialize(model, seed=SEED)
    return model


def _within_ulps(got: torch.Tensor, want: torch.Tensor, ulps: int) -> None:
    """Transcendental tables: torch's float32 kernels against the capture's binary64
    steps, equal up to the last bits (docs/capturing-init.md, "Rounding")."""
    apart = (got.view(torch.int32).long() - want.view(torch.int32).long()).abs()
    assert int(apart.max()) <= ulps


def test_a_small_table_in_every_other_column_is_eagers() -> None:
    model, reference = _sinusoids(4, 8), _Sinusoids(4, 8)
    assert torch.equal(model.pe, reference.pe)
    _within_ulps(model.weight.detach(), reference.weight.detach(), 2)


def test_the_tutorials_positional_table_is_eagers() -> None:
    # Past the recursion limit before (one write per element of each slice, one nested
    # ``where`` per write in the fold): refused, naming the tensor (and a RecursionError
    # before that). The buffer is torch's table; the parameter copied from it too.
    model, reference = _sinusoids(256, 32), _Sinusoids(256, 32)
    assert torch.equal(model.pe, reference.pe)
    _within_ulps(model.weight.detach(), reference.weight.detach(), 2)


class _FlatSteps(nn.Module):
    """Every third element of a table's flat view written (``t.view(-1)[::3]``): a flat
    step across rows, written element by element, held as a buffer and copied into a
    parameter (or not)."""

    def __init__(self, size: int, copied: bool) -> None:
        super().__init__()
        table = torch.zeros(size, size)
        steps = table.view(-1)[::3]
        steps.copy_(torch.arange(steps.numel(), dtype=torch.float32))
        self.register_buffer("pe", table)
        self.weight = nn.Parameter(torch.empty(size, size) if copied else torch.zeros(1))
        if copied:
            with torch.no_grad():
                self.weight.copy_(table)


@pytest.mark.parametrize(
    "size, copied, refused",
    [(64, True, r"temporary empty\(64, 64\) .*: the capture's expression .* recursion limit"),
     (64, False, r"buffer pe: .*cannot be computed \(the capture's expression .* recursion")],
)  # fmt: skip
def test_a_table_too_deep_for_the_capture_is_refused_naming_it(
    size: int, copied: bool, refused: str
) -> None:
    """Each element of a flat step across rows is a piece of its own, and a read of the
    table folds every piece into one nested value: past a thousand pieces it nests
    deeper than Python's recursion limit, refused naming the tensor (before: a bare
    RecursionError from record_constructors' exit). A small one is torch's table."""
    with torch.device("meta"), shardinit.record_constructors():
        small = _FlatSteps(8, copied)
    shardinit.materialize(small, seed=SEED)
    assert torch.equal(small.pe, _FlatSteps(8, copied).pe)
    with pytest.raises(shardinit.ShardInitError, match=refused):
        with torch.device("meta"), shardinit.record_constructors():
            model = _FlatSteps(size, copied)
        shardinit.materialize(model, seed=SEED)


# ------------------------------------------------------------- constructors' tensors


class _Constructed(nn.Module):
    """Buffers of integer, bool and narrow dtypes, some computed from others, and
    parameters of 16-bit dtypes set in the constructor."""

    def __init__(self, complex_parameter: bool = False) -> None:
        super().__init__()
        self.register_buffer("index", torch.arange(12) * 5 % 7)
        self.register_buffer("mask", torch.ones(6, 6).tril().bool())
        self.register_buffer("causal", torch.zeros(6, 6).masked_fill(~self.mask, -math.inf))
        self.register_buffer("odd", self.index * 2 + 1)
        self.register_buffer("wrapped", (torch.arange(10) - 3).to(torch.uint8))
        self.register_buffer("thirds", (torch.arange(8) / 3).half())
        self.register_buffer("relative", torch.arange(4)[:, None] - torch.arange(4)[None] + 3)
        self.h = nn.Parameter(torch.full((3, 4), 0.1, dtype=torch.float16))
        self.lin = nn.Linear(4, 4, dtype=torch.bfloat16)
        with torch.no_grad():
            self.lin.weight.copy_(torch.eye(4) * 0.3)
            self.lin.bias.zero_()
        if complex_parameter:
            self.rotation = nn.Parameter(torch.zeros(4, dtype=torch.complex64))


def test_constructors_tensors_of_every_dtype_are_eagers() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Constructed()
    shardinit.materialize(model, seed=SEED)
    _same_bytes(probe_states.state(model), probe_states.state(_Constructed()))


def test_a_complex_parameter_is_refused_naming_it() -> None:
    """Stream format v1 has no complex dtype (before: ParamSpec's message, unnamed)."""
    with torch.device("meta"), shardinit.record_constructors():
        model = _Constructed(complex_parameter=True)
    with pytest.raises(shardinit.ShardInitError, match=r"^parameter rotation: dtype .*complex64"):
        shardinit.materialize(model, seed=SEED)


# ------------------------------------------------------------------ FSDP2

SHARDED = ("scatter_one_hot", "masked_scatter_diagonal", "conv_center_tap", "slices_drawn_apart")


def _check_sharded(world: int, name: str) -> None:
    """Sharded by row across ranks (each a part of every write), gathered: the
    unsharded run's bytes."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    init = DETERMINISTIC[name] if name in DETERMINISTIC else RANDOM[name][0]
    want = probe_states.ours(_build(), init, SEED)
    model = _build()
    mesh = init_device_mesh("cpu", (world,))
    for part in (model.a, model.conv):
        fully_shard(part, mesh=mesh)
    fully_shard(model, mesh=mesh)
    got = probe_states.ours(model, init, SEED)
    assert isinstance(model.a.weight, DTensor)
    _same_bytes(got, want)


@gloo_scenario(1, 2)
def unlisted_patterns_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in SHARDED:
        check(checks, name, functools.partial(_check_sharded, world, name))
    return checks


test_patterns_under_fsdp2 = scenario_tests(unlisted_patterns_scenario, SHARDED, [1, 2])


_AMPLIFIED = (
    "the core's exp is within 1 ulp but not torch's bits: a 1-ulp inverse frequency, times "
    "a position in the hundreds, moves sin's argument by an ulp of ~190 (1.5e-5), which "
    "sin passes on whole; the table needs torch's own values (a table, not a program)"
)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=_AMPLIFIED)
def test_a_long_sinusoidal_table_is_eagers_to_the_last_bits() -> None:
    """``sin(position * exp(-k * log(10000) / d))`` for 512 positions of 64 dims (the
    tutorial's table, its halves written contiguously): docs/capturing-init.md's
    "Rounding" says deterministic tables agree to the last bits; at positions in the
    hundreds they differ by up to 1.5e-5 (65536 ulp near sin's zeros)."""
    with torch.device("meta"):
        model = nn.Embedding(512, 32)
    shardinit.materialize(  # (computed in init_fn: a program, not the table of its memory)
        model, seed=SEED, init_fn=lambda: model.weight.data.copy_(torch.sin(_pos_div(512, 64)))
    )
    _within_ulps(model.weight.detach(), torch.sin(_pos_div(512, 64)), 2)
