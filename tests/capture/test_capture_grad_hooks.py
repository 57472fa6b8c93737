"""Gradient hooks init code registers on a parameter (issue 51):
``register_post_accumulate_grad_hook`` (an optimizer step in backward, as transformers'
layer-wise optimizers register it) and ``register_hook`` (a gradient scale), inside
``init_fn`` and on the meta model before ``materialize``. The materialized model's
backward runs them as eager's does: its parameters after one step are eager's, and a
removed handle's hook does not run. A sharded parameter's hook is refused, named."""

from __future__ import annotations

import pytest
import torch
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit

SEED = 51


def _model(device: str) -> nn.Sequential:
    with torch.device(device):
        return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2))


def _sgd_in_backward(param: torch.Tensor) -> None:
    with torch.no_grad():
        param.add_(param.grad, alpha=-0.5)  # type: ignore[arg-type]
    param.grad = None


def _init_with_hooks(model: nn.Sequential, calls: list[str]) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_((torch.arange(p.numel(), dtype=torch.float32).view(p.shape) - 5) / 7)
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(_sgd_in_backward)
    model[2].weight.register_hook(lambda grad: calls.append("scale") or grad * 2)
    removed = model[0].bias.register_hook(lambda grad: calls.append("removed") or grad * 0)
    removed.remove()


def _step(model: nn.Sequential) -> dict[str, torch.Tensor]:
    x = torch.linspace(-2.0, 2.0, 8).view(2, 4)
    model(x).square().sum().backward()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_hooks_registered_in_init_code_run_as_in_eager() -> None:
    eager_calls: list[str] = []
    eager = _model("cpu")
    _init_with_hooks(eager, eager_calls)
    meta, calls = _model("meta"), []
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: _init_with_hooks(meta, calls))
    want, got = _step(eager), _step(meta)
    for name, value in want.items():
        assert torch.equal(got[name], value), name
    assert calls == eager_calls == ["scale"]
    assert all(p.grad is None for p in meta.parameters())  # the hooks took the step


def test_a_hook_registered_on_the_meta_model_is_kept() -> None:
    meta, seen = _model("meta"), []
    meta[0].weight.register_post_accumulate_grad_hook(lambda p: seen.append(p.shape))
    shardinit.materialize(meta, seed=SEED)
    _step(meta)
    assert seen == [torch.Size([3, 4])]


def _check_sharded_refusal() -> None:
    sharded = _model("meta")
    fully_shard(sharded, mesh=init_device_mesh("cpu", (1,)))

    def init() -> None:
        sharded[0].weight.register_post_accumulate_grad_hook(_sgd_in_backward)

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"'0.weight'.*sharded"):
        shardinit.materialize(sharded, seed=SEED, init_fn=init)


@gloo_scenario(1)
def grad_hook_scenario(rank: int, world: int) -> Checks:
    del rank, world
    checks: Checks = {}
    check(checks, "sharded", _check_sharded_refusal)
    return checks


@pytest.mark.distributed
def test_a_hook_on_a_sharded_parameter_is_refused() -> None:
    assert_check_passed(run_group(1, grad_hook_scenario), "sharded")
