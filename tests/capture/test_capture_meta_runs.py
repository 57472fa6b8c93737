"""The capture skips an in-place step on a meta temporary that torch already ran with the
same key (:mod:`shardinit._integration.capture.dispatch.metaruns`): the values materialized are
the same bytes as with every step run, parameters of one shape still get their own
values, and only calls whose outcome the key fixes are skipped."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from test_capture_trunc_normal import timm_style_trunc_normal_
from torch import nn

import shardinit
from shardinit._integration.capture.dispatch import metaruns


class _Blocks(nn.Module):
    """Three layers of one shape whose constructor runs timm's ``trunc_normal_``."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(48, 40) for _ in range(3))
        for layer in self.layers:
            timm_style_trunc_normal_(layer.weight, 0.0, 0.02, -0.04, 0.04)
            nn.init.zeros_(layer.bias)


def _materialized() -> dict[str, torch.Tensor]:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Blocks()
    shardinit.materialize(model, seed=3)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_skipped_meta_steps_give_the_bytes_of_every_step_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs: list[Any] = []
    hits: list[Any] = []
    passed = metaruns._PASSED
    monkeypatch.setattr(metaruns, "_PASSED", type(passed)())
    real_key = metaruns._key

    def counting_key(func: Any, args: Any, kwargs: Any) -> Any:
        key = real_key(func, args, kwargs)
        (hits if key is not None and metaruns._PASSED.get(key) else runs).append(func)
        return key

    monkeypatch.setattr(metaruns, "_key", counting_key)
    fast = _materialized()
    assert any(getattr(f, "__name__", "") == "clamp_" for f in hits), "nothing was skipped"
    monkeypatch.setattr(metaruns, "_key", lambda *_: None)
    slow = _materialized()
    assert fast.keys() == slow.keys()
    for name, values in fast.items():
        assert values.view(torch.int32).equal(slow[name].view(torch.int32)), name
    weights = [fast[f"layers.{k}.weight"] for k in range(3)]
    assert not weights[0].equal(weights[1]) and not weights[1].equal(weights[2])
    assert float(weights[0].abs().max()) <= 0.04 and float(weights[0].std()) > 0.01


def _counting(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> Callable[[], int]:  # fmt: skip
    calls = [0]

    def run() -> Any:
        calls[0] += 1
        return func(*args, **kwargs)

    def again() -> int:
        metaruns.run_meta_inplace(run, func, args, kwargs)
        return calls[0]

    return again


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metaruns, "_PASSED", type(metaruns._PASSED)())


def test_a_repeated_plain_meta_call_runs_once_and_still_bumps_the_version() -> None:
    tensor = torch.empty(4, 6, device="meta")
    clamp = _counting(torch.Tensor.clamp_, (tensor,), {"min": -2.0, "max": 2.0})
    assert [clamp(), clamp(), clamp()] == [1, 1, 1]
    assert tensor._version == 3
    # Another bound, an int for a float, another shape: other keys, run again.
    assert _counting(torch.Tensor.clamp_, (tensor,), {"min": -1.0, "max": 2.0})() == 1
    assert _counting(torch.Tensor.clamp_, (tensor,), {"min": -2, "max": 2.0})() == 1
    other = torch.empty(6, 4, device="meta")
    assert _counting(torch.Tensor.clamp_, (other,), {"min": -2.0, "max": 2.0})() == 1


def test_calls_whose_outcome_the_key_does_not_fix_always_run() -> None:
    # A step that changes the tensor's metadata.
    transpose = _counting(torch.Tensor.t_, (torch.empty(2, 3, device="meta"),), {})
    assert [transpose(), transpose()] == [1, 2]
    # A tensor argument, a tensor autograd records, a CPU tensor.
    meta = torch.empty(3, device="meta")
    add = _counting(torch.Tensor.add_, (meta, torch.ones(3, device="meta")), {})
    assert [add(), add()] == [1, 2]
    leaf = torch.empty(3, device="meta", requires_grad=True)
    scaled = leaf * 2
    mul = _counting(torch.Tensor.mul_, (scaled, 2.0), {})
    assert [mul(), mul()] == [1, 2]
    cpu = _counting(torch.Tensor.mul_, (torch.ones(3), 2.0), {})
    assert [cpu(), cpu()] == [1, 2]
    with torch.inference_mode():
        inference = torch.empty(3, device="meta")
        scale = _counting(torch.Tensor.mul_, (inference, 2.0), {})
        assert [scale(), scale()] == [1, 2]
    # Outside inference mode torch refuses its write each time, though the same call on
    # an ordinary tensor of that key has run.
    assert _counting(torch.Tensor.mul_, (torch.empty(3, device="meta"), 2.0), {})() == 1
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"[Ii]nference"):
            metaruns.run_meta_inplace(
                lambda: inference.mul_(2.0), torch.Tensor.mul_, (inference, 2.0), {}
            )


def test_a_refused_call_raises_every_time() -> None:
    tensor = torch.empty(3, device="meta")
    clamp = _counting(torch.Tensor.clamp_, (tensor,), {"min": None, "max": None})
    for _ in range(2):
        with pytest.raises(ValueError, match="both min and max are none"):
            clamp()
    assert metaruns._PASSED.get(metaruns._key(torch.Tensor.clamp_, (tensor,), {})) is None


def test_a_repeated_element_write_runs_once_and_a_tensor_value_always() -> None:
    table = torch.empty(4, 6, dtype=torch.int64, device="meta")
    write = _counting(torch.Tensor.__setitem__, (table, (1, slice(0, 3)), 7), {})
    assert [write(), write(), write()] == [1, 1, 1]
    assert table._version == 3
    skipped = metaruns.run_meta_inplace(
        lambda: pytest.fail("ran"), torch.Tensor.__setitem__, (table, (1, slice(0, 3)), 7), {}
    )
    assert skipped is None  # as __setitem__ returns
    # Another index (a slice's bound, an Ellipsis), another value: other keys.
    assert _counting(torch.Tensor.__setitem__, (table, (1, slice(0, 4)), 7), {})() == 1
    assert _counting(torch.Tensor.__setitem__, (table, (Ellipsis, 2), 7), {})() == 1
    assert _counting(torch.Tensor.__setitem__, (table, (1, slice(0, 3)), 8), {})() == 1
    # A tensor value or a tensor index: run each time.
    value = torch.ones(3, dtype=torch.int64, device="meta")
    copy = _counting(torch.Tensor.__setitem__, (table, (1, slice(0, 3)), value), {})
    assert [copy(), copy()] == [1, 2]
    rows = torch.tensor([0, 2], device="meta")
    indexed = _counting(torch.Tensor.__setitem__, (table, rows, 0), {})
    assert [indexed(), indexed()] == [1, 2]


class _Constructed(nn.Module):
    """A constructor's ``torch.nn.init`` call, recorded by ``record_constructors``."""

    def __init__(self, init: Callable[[nn.Parameter], object]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(4, 6))
        init(self.weight)


@pytest.mark.parametrize(
    "init",
    [
        lambda w: nn.init.normal_(w, 0.0, -1.0),  # the body's aten normal_ refuses it
        lambda w: nn.init.kaiming_normal_(w, mode="fan_x"),  # the body's own check
        lambda w: nn.init.xavier_uniform_(w[0]),  # fans of a 1-D tensor
    ],
    ids=["negative-std", "mode", "fans"],
)
def test_an_init_call_eager_refuses_raises_in_a_recorded_constructor(
    init: Callable[[nn.Parameter], object],
) -> None:
    # A recorded call's body is skipped on a meta temporary only where its translation
    # took the arguments: else the body runs, and raises what eager raises.
    with pytest.raises((RuntimeError, ValueError)) as eager:
        _Constructed(init)
    expected = pytest.raises(type(eager.value), match=re.escape(str(eager.value)[:40]))
    with torch.device("meta"), shardinit.record_constructors(), expected:
        _Constructed(init)


def test_a_recorded_constructor_call_gives_its_values() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Constructed(lambda w: nn.init.normal_(w, 0.0, 0.5))
    shardinit.materialize(model, seed=5)
    assert model.weight.device.type == "cpu"
    assert 0.2 < float(model.weight.detach().std()) < 1.0
