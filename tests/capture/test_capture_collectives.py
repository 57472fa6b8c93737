"""Collectives in init code (issue 51): peft's LoRA on a tensor-parallel base
(``_hf_tp_plan`` / ``_hf_device_mesh`` on the base layer, as transformers' tensor
parallelism leaves them) broadcasts its unsharded adapter weights from the group's first
rank in ``reset_lora_parameters``. Under shardinit every rank records the same values,
so the broadcast is the identity: followed at worlds 1, 2 and 3, the values gathered
from every rank are one, and the model's without the broadcast. A broadcast of values
init code computed from the rank, an ``all_reduce`` that sums, and a collective that
moves other ranks' values in are refused on every rank, naming the op and the line."""

from __future__ import annotations

import functools
from collections import OrderedDict

import pytest
import torch
import torch.distributed as dist
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

import shardinit

SEED = 51
NAMES = ("proj.lora_A.default.weight", "proj.lora_B.default.weight")


def _lora(tp_base: bool) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    with torch.device("meta"), shardinit.record_constructors():
        base = nn.Sequential(OrderedDict(proj=nn.Linear(8, 6), out=nn.Linear(6, 2)))
        config = LoraConfig(r=4, target_modules=["proj"], init_lora_weights="gaussian")
        model = get_peft_model(base, config)
    if tp_base:  # what transformers' tensor parallelism leaves on a colwise layer
        layer = model.base_model.model.proj.base_layer
        layer._hf_tp_plan = "colwise"
        layer._hf_device_mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return model


def _reset_adapters(model: nn.Module) -> None:
    from peft.tuners.lora import LoraLayer

    for module in model.modules():
        if isinstance(module, LoraLayer):
            module.reset_lora_parameters("default", "gaussian")
            nn.init.normal_(module.lora_B["default"].weight, std=0.5)


def _adapters(model: nn.Module) -> dict[str, torch.Tensor]:
    state = model.base_model.model.state_dict()
    return {name: state[name].detach().clone() for name in NAMES}


def _check_broadcast_followed() -> None:
    plain, tp = _lora(tp_base=False), _lora(tp_base=True)
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: _reset_adapters(plain))
    shardinit.materialize(tp, seed=SEED, init_fn=lambda: _reset_adapters(tp))
    got = _adapters(tp)
    for name, want in _adapters(plain).items():
        assert torch.equal(got[name], want), name
    gathered: list[dict[str, torch.Tensor] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, got)
    for other in gathered:
        assert other is not None and all(torch.equal(other[n], got[n]) for n in NAMES)
    assert got[NAMES[0]].std() > 0  # drawn values, not a constant every rank would agree on


def _refused(init_fn_of, pattern: str) -> None:  # type: ignore[no-untyped-def]
    model = _lora(tp_base=False)
    with pytest.raises(shardinit.UnsupportedInitOpError, match=pattern):
        shardinit.materialize(model, seed=SEED, init_fn=init_fn_of(model))


def _weight(model: nn.Module) -> torch.Tensor:
    return model.base_model.model.proj.lora_A["default"].weight


def _check_rank_values_refused() -> None:
    def init_fn_of(model: nn.Module):  # type: ignore[no-untyped-def]
        def init() -> None:
            with torch.no_grad():
                _weight(model).fill_(float(dist.get_rank()))
            dist.broadcast(_weight(model).data, src=0)

        return init

    if dist.get_world_size() == 1:  # one rank: its values are the group's
        model = _lora(tp_base=False)
        shardinit.materialize(model, seed=SEED, init_fn=init_fn_of(model))
        assert torch.equal(_weight(model).detach(), torch.zeros(4, 8))
        return
    _refused(init_fn_of, r"lora_A.*broadcast at .*test_capture_collectives.*not the same")


def _check_sum_and_gather_refused() -> None:
    def summed(model: nn.Module):  # type: ignore[no-untyped-def]
        return lambda: dist.all_reduce(_weight(model).data)

    def gathered(model: nn.Module):  # type: ignore[no-untyped-def]
        def init() -> None:
            parts = [torch.empty(4, 8) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, _weight(model).data)

        return init

    if dist.get_world_size() > 1:
        _refused(summed, r"lora_A.*all_reduce\(op=.*SUM.*only MAX and MIN")
    _refused(gathered, r"lora_A.*all_gather at .*moves other ranks' values")


@gloo_scenario(1, 2, 3)
def collectives_scenario(rank: int, world: int) -> Checks:
    del rank, world
    checks: Checks = {}
    check(checks, "broadcast", _check_broadcast_followed)
    check(checks, "rank values", _check_rank_values_refused)
    check(checks, "sum and gather", _check_sum_and_gather_refused)
    return checks


@functools.cache
def _results(world: int) -> dict[str, list[str]]:
    return run_group(world, collectives_scenario)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", ["broadcast", "rank values", "sum and gather"])
def test_collectives_in_init_code(world: int, name: str) -> None:
    assert_check_passed(_results(world), name)
