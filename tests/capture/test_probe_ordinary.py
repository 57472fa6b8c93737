"""Ordinary init code that shardinit refused or named the wrong reason for, each fixed by
the rule where it lives (issue 51 item 2, "checked against init code that nobody
listed"), checked against eager torch:

* ``nan_to_num`` is a ``where`` of comparisons (its defaults the dtype's finite
  extremes): deterministic, so eager's bytes.
* Operands torch's operators read for their metadata only, by torch's own naming of
  them (``<f>_like``, ``new_<f>``, ``<f>_as``: :func:`metadata_operands`), are no read
  of a parameter's values: ``randint_like(p, ...)`` is refused as the draw of torch's
  generator it is, not as a read of ``p``.
* ``torch.normal(mean, std[, size])`` is the calls aten makes for it (``normal_``,
  ``mul_(std)``, ``add_(mean)``): the stream draws it, so it equals the same formula
  applied eagerly to the stream's ``normal_(0, 1)`` of the parameter, bit for bit.
* ``orthogonal_`` on a whole temporary (a constructor's new parameter, fla's
  ``w32 = weight.float(); orthogonal_(w32); weight.copy_(w32)``) whose values reach a
  parameter of the same shape at their own positions is that parameter's own
  ``orthogonal_``, bit for bit; landing anywhere else stays refused, naming why.

Under FSDP2 at worlds 1, 2 and 3 the gathered parameters are the unsharded bytes.
"""

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
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit
from shardinit._integration.capture.ops import metadata_operands

SEED = 11
Init = Callable[["_Model"], Any]


class _Model(nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.a = nn.Linear(16, 12, dtype=dtype)  # weight (12, 16)
        self.b = nn.Linear(12, 16, dtype=dtype)  # weight (16, 12)


def _build(dtype: torch.dtype = torch.float32) -> _Model:
    with torch.device("meta"), shardinit.record_constructors():
        return _Model(dtype)


_state = probe_states.state


def _ours(init: Init, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    return probe_states.ours(_build(dtype), init, SEED)


def _eager(init: Init, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    return probe_states.eager(_build(dtype), init, SEED)


def _same_bytes(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        assert torch.equal(
            got[name].view(-1).view(torch.uint8), value.view(-1).view(torch.uint8)
        ), name


def _w(m: _Model) -> torch.Tensor:
    return m.a.weight


_SPECIALS = torch.tensor([math.nan, math.inf, -math.inf, 1.0e38, -0.0])

DETERMINISTIC: dict[str, Init] = {
    "nan_to_num_defaults": lambda m: (_w(m)[0, :5].copy_(_SPECIALS), _w(m).nan_to_num_()),
    "nan_to_num_arguments": lambda m: (
        _w(m)[1, 3:8].copy_(_SPECIALS),
        _w(m).nan_to_num_(nan=0.5, posinf=2.0, neginf=-3.0),
    ),
    "nan_to_num_of_temporary": lambda m: m.a.bias[:5].copy_(_SPECIALS.nan_to_num(posinf=9.0)),
    "nan_to_num_out_of_place": lambda m: _w(m).copy_(
        torch.full((12, 16), math.inf).nan_to_num(neginf=1.0)
    ),
    "nan_to_num_of_defaults": lambda m: _w(m).nan_to_num_(),
    # operands read for their metadata only (torch's _like / new_ / _as operators):
    "new_empty_strided_filled": lambda m: _w(m).copy_(
        _w(m).new_empty_strided((12, 16), (16, 1)).fill_(3.0)
    ),
    "type_as_param": lambda m: m.a.bias.copy_(torch.arange(12).type_as(_w(m)) / 4),
    "empty_like_filled": lambda m: _w(m).copy_(torch.empty_like(_w(m)).fill_(-2.0)),
}

NARROW: dict[str, tuple[torch.dtype, Init]] = {
    "bf16_nan_to_num": (
        torch.bfloat16,
        lambda m: (_w(m)[0, :5].copy_(_SPECIALS), _w(m).nan_to_num_()),
    ),
    "fp16_nan_to_num": (
        torch.float16,
        lambda m: (_w(m)[2, :5].copy_(_SPECIALS), _w(m).nan_to_num_(neginf=-1.0)),
    ),
}


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_deterministic_init_code_gives_eagers_bytes(name: str) -> None:
    init = DETERMINISTIC[name]
    _same_bytes(_ours(init), _eager(init))


@pytest.mark.parametrize("name", sorted(NARROW))
def test_narrow_dtypes_give_eagers_bytes(name: str) -> None:
    dtype, init = NARROW[name]
    _same_bytes(_ours(init, dtype), _eager(init, dtype))


def test_the_metadata_rule_covers_torchs_own_list_of_like_constructors() -> None:
    """FakeTensor's ``_like_tensor_constructors`` (torch's list of the factories that
    take a tensor's metadata, private, checked 2.15.0) all read their ``self`` for it
    by the naming rule; ``view_as``'s ``other`` too; an elementwise op reads all."""
    from torch._subclasses.fake_tensor import _like_tensor_constructors

    names = {op._opname for op in _like_tensor_constructors}
    assert names >= {"randint_like", "empty_like", "new_zeros"}
    assert all(metadata_operands(name) == frozenset({0}) for name in names)
    for name in ("view_as", "expand_as", "reshape_as", "type_as", "resize_as_"):
        assert metadata_operands(name) == frozenset({1}), name
    for name in ("add", "view_as_real", "as_strided", "copy_", "no_such_op"):
        assert metadata_operands(name) == frozenset(), name


# ------------------------------------------------------------------ random values


def _normal_scaled(mean: torch.Tensor | float, std: torch.Tensor | float) -> Init:
    """What eager's ``torch.normal(mean, std)`` computes, on the stream's standard
    normal of the weight: ``z * std + mean`` in the weight's dtype."""

    def init(m: _Model) -> None:
        _w(m).normal_(0.0, 1.0)
        if isinstance(std, torch.Tensor):
            _w(m).mul_(std)
        _w(m).add_(mean)

    return init


_MEAN = torch.linspace(-1.0, 1.0, 16)
_STD = torch.linspace(0.01, 0.2, 12).unsqueeze(1).expand(12, 16).contiguous()

#: Init code drawing random values, each paired with code drawing the same ones.
RANDOM: dict[str, tuple[Init, Init]] = {
    "normal_of_tensors": (
        lambda m: _w(m).copy_(torch.normal(_MEAN.expand(12, 16), _STD)),
        _normal_scaled(_MEAN, _STD),
    ),
    "normal_broadcast_tensors": (
        lambda m: _w(m).copy_(torch.normal(_MEAN, _STD[:, :1])),
        _normal_scaled(_MEAN, _STD[:, :1]),
    ),
    "normal_of_numbers_and_size": (
        lambda m: _w(m).copy_(torch.normal(2.0, 0.5, size=(12, 16))),
        lambda m: _w(m).normal_(2.0, 0.5),
    ),
    "normal_tensor_mean_number_std": (
        lambda m: _w(m).copy_(torch.normal(torch.full((12, 16), 3.0), 0.25)),
        lambda m: (_w(m).normal_(0.0, 0.25), _w(m).add_(3.0)),
    ),
    "orthogonal_of_a_temporary_copied_whole": (
        lambda m: _w(m).copy_(nn.init.orthogonal_(torch.empty(12, 16), gain=0.5)),
        lambda m: nn.init.orthogonal_(_w(m), gain=0.5),
    ),
    "orthogonal_of_a_temporary_in_halves": (
        lambda m: [
            _w(m)[part].copy_(t[part])
            for t in [nn.init.orthogonal_(torch.empty(12, 16))]
            for part in (slice(0, 5), slice(5, 12))
        ],
        lambda m: nn.init.orthogonal_(_w(m)),
    ),
    "orthogonal_of_a_temporary_scaled": (
        lambda m: _w(m).copy_(nn.init.orthogonal_(torch.empty(12, 16)) * 3.0),
        lambda m: (nn.init.orthogonal_(_w(m)), _w(m).mul_(3.0)),
    ),
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_init_code_draws_what_its_equivalent_draws(name: str) -> None:
    spelled, equivalent = RANDOM[name]
    got = _ours(spelled)
    _same_bytes(got, _ours(equivalent))
    assert got["a.weight"].unique().numel() > 100


class _Orthogonal(nn.Module):
    """fla's RWKV spellings: ``orthogonal_`` in the constructor, on the new parameter
    and on its float32 copy, copied back."""

    def __init__(self, dtype: torch.dtype = torch.float32, through_float: bool = False) -> None:
        super().__init__()
        self.a = nn.Linear(16, 12, bias=False, dtype=dtype)
        self.b = nn.Linear(12, 16, bias=False, dtype=dtype)
        if through_float:
            with torch.no_grad():
                w32 = self.a.weight.float()
                nn.init.orthogonal_(w32, gain=0.5)
                self.a.weight.copy_(w32)
        else:
            nn.init.orthogonal_(self.a.weight, gain=0.5)
        nn.init.orthogonal_(self.b.weight)


def _constructed(**options: Any) -> dict[str, torch.Tensor]:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Orthogonal(**options)
    shardinit.materialize(model, seed=SEED)
    return _state(model)


def _orthogonal_by_init_fn(dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = _Orthogonal.__new__(_Orthogonal)
        nn.Module.__init__(model)
        model.a = nn.Linear(16, 12, bias=False, dtype=dtype)
        model.b = nn.Linear(12, 16, bias=False, dtype=dtype)

    def init_fn() -> None:
        with torch.no_grad():
            nn.init.orthogonal_(model.a.weight, gain=0.5)
            nn.init.orthogonal_(model.b.weight)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    return _state(model)


@pytest.mark.parametrize("through_float", [False, True])
def test_orthogonal_in_a_constructor_is_the_parameters_own(through_float: bool) -> None:
    got = _constructed(through_float=through_float)
    _same_bytes(got, _orthogonal_by_init_fn())
    weight = got["a.weight"].double()
    assert torch.allclose(weight @ weight.T, 0.25 * torch.eye(12, dtype=torch.float64), atol=1e-5)


def test_orthogonal_of_a_float32_copy_lands_rounded_in_a_bfloat16_parameter() -> None:
    """The float32 matrix the stream computes for the parameter, rounded once to
    bfloat16, as eager's ``copy_`` rounds it."""
    got = _constructed(dtype=torch.bfloat16, through_float=True)["a.weight"]
    full = _constructed(through_float=True)["a.weight"]
    assert torch.equal(got, full.to(torch.bfloat16))


# ------------------------------------------------------------------ refused


def _refused_orthogonal(
    copy: Callable[[_Model, torch.Tensor], Any], shape: tuple[int, ...]
) -> Init:
    def init(m: _Model) -> None:
        copy(m, nn.init.orthogonal_(torch.empty(shape)))

    return init


_MISPLACED = "whole-tensor draw"

REFUSED: dict[str, tuple[Init, str]] = {
    "randint_like_of_a_parameter": (
        lambda m: _w(m).copy_(torch.randint_like(_w(m), 0, 5)),
        "randint_like at .* draws from torch's random generator",
    ),
    "normal_with_a_generator": (
        lambda m: _w(m).copy_(
            torch.normal(torch.zeros(12, 16), 1.0, generator=torch.Generator().manual_seed(0))
        ),
        "draws from torch's random generator",
    ),
    "orthogonal_transposed": (
        _refused_orthogonal(lambda m, t: _w(m).copy_(t.T), (16, 12)),
        _MISPLACED,
    ),
    "orthogonal_part_of_a_larger_temporary": (
        _refused_orthogonal(lambda m, t: _w(m).copy_(t[:12]), (24, 16)),
        _MISPLACED,
    ),
    "orthogonal_into_a_part": (
        _refused_orthogonal(lambda m, t: _w(m)[:6].copy_(t), (6, 16)),
        _MISPLACED,
    ),
    "orthogonal_through_a_reshape": (
        _refused_orthogonal(lambda m, t: _w(m).view(16, 12).copy_(t), (16, 12)),
        _MISPLACED,
    ),
    "orthogonal_shifted_rows": (
        _refused_orthogonal(lambda m, t: _w(m)[:6].copy_(t[6:]), (12, 16)),
        _MISPLACED,
    ),
    "orthogonal_into_two_parameters": (
        _refused_orthogonal(lambda m, t: (_w(m).copy_(t), m.b.weight.copy_(t.T)), (12, 16)),
        _MISPLACED,
    ),
    "orthogonal_of_a_view": (
        lambda m: _w(m).copy_(nn.init.orthogonal_(torch.empty(24, 16)[:12])),
        "not the whole temporary",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_stays_refused_names_why(name: str) -> None:
    init, why = REFUSED[name]
    model = _build()

    def init_fn() -> None:
        with torch.no_grad():
            init(model)

    with pytest.raises(shardinit.UnsupportedInitOpError, match=why):
        shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert all(p.is_meta for p in model.parameters())


class _Placed(nn.Module):
    def __init__(
        self, view: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]
    ) -> None:
        super().__init__()
        drawn = nn.init.orthogonal_(torch.empty(shape))
        self.w = nn.Parameter(view(drawn))


@pytest.mark.parametrize(
    ("view", "shape"),
    [(lambda t: t.T, (16, 12)), (lambda t: t[:12], (24, 12)), (lambda t: t.view(12, 16), (16, 12))],
    ids=["transposed", "part", "reshaped"],
)
def test_a_constructor_orthogonal_out_of_place_is_refused_naming_why(
    view: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]
) -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Placed(view, shape)
    with pytest.raises(shardinit.ShardInitError, match=_MISPLACED):
        shardinit.materialize(model, seed=SEED)


# ------------------------------------------------------------------ FSDP2

SHARDED = ("normal_of_tensors", "orthogonal_of_a_temporary_in_halves", "nan_to_num_defaults")


def _check_sharded(world: int, name: str) -> None:
    init = DETERMINISTIC[name] if name in DETERMINISTIC else RANDOM[name][0]
    want = _ours(init)
    model = _build()
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model.a, mesh=mesh)
    fully_shard(model, mesh=mesh)

    def init_fn() -> None:
        with torch.no_grad():
            init(model)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert isinstance(model.a.weight, DTensor)
    _same_bytes(_state(model), want)


def _check_sharded_constructor(world: int) -> None:
    want = _constructed(through_float=True)
    with torch.device("meta"), shardinit.record_constructors():
        model = _Orthogonal(through_float=True)
    mesh = init_device_mesh("cpu", (world,))
    fully_shard(model.a, mesh=mesh)
    fully_shard(model, mesh=mesh)
    shardinit.materialize(model, seed=SEED)
    assert isinstance(model.a.weight, DTensor)
    _same_bytes(_state(model), want)


@gloo_scenario(1, 2, 3)
def probe_ordinary_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in SHARDED:
        check(checks, name, functools.partial(_check_sharded, world, name))
    check(checks, "constructor_orthogonal", functools.partial(_check_sharded_constructor, world))
    return checks


test_probes_under_fsdp2 = scenario_tests(
    probe_ordinary_scenario, [*SHARDED, "constructor_orthogonal"], [1, 2, 3]
)
