"""fla's RWKV7 and RWKV6 (flash-linear-attention 0.6), which no other test names: their
constructors call ``orthogonal_`` on a float32 copy of a new weight and copy it back
(``RWKV7Attention._orthogonal_init``, RWKV6's LoRA), which was refused as "orthogonal_
on a temporary". Built on meta inside ``record_constructors``, with the models' own
``init_weights`` as ``init_fn`` (the transformers recipe):

* World 1: every value eager's CPU construction gives the same under any seed (the
  constructor's tables: ``x_*`` mixes, ``k_k``, the LoRA biases, group norms, zeros) is
  eager's within 2 ulp (programs run in binary64: docs/capturing-init.md, "Rounding");
  every parameter eager makes orthogonal has singular values all equal to eager's gain.
* FSDP2 at worlds 1, 2 and 3 (gloo): the gathered model equals the unsharded one, byte
  for byte.

``ecosystem`` tests (``make test-ecosystem``, ``--runeco``): minutes on two cores.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit

# Two models built twice eagerly and three times by shardinit, at three world sizes:
# minutes on 2 cores, so with the other ecosystem setups (make test-ecosystem).
pytestmark = [pytest.mark.clients, pytest.mark.ecosystem]

SEED = 23


def _rwkv7() -> nn.Module:
    import fla.models as fm

    config = fm.RWKV7Config(
        hidden_size=64, num_hidden_layers=2, head_dim=16, vocab_size=100,
        intermediate_size=128, decay_low_rank_dim=8, gate_low_rank_dim=8,
        a_low_rank_dim=8, v_low_rank_dim=8,
    )  # fmt: skip
    return fm.RWKV7ForCausalLM(config)


def _rwkv6() -> nn.Module:
    import fla.models as fm

    config = fm.RWKV6Config(
        hidden_size=64, num_hidden_layers=2, num_heads=4, vocab_size=100,
        intermediate_size=128, proj_low_rank_dim=8, gate_low_rank_dim=8,
    )  # fmt: skip
    return fm.RWKV6ForCausalLM(config)


MODELS: dict[str, Callable[[], nn.Module]] = {"rwkv7": _rwkv7, "rwkv6": _rwkv6}
#: The parameters eager makes orthogonal (all singular values equal) at this size: RWKV7's
#: projections and low-rank weights and its head; RWKV6's low-rank projection's last
#: weight per layer.
ORTHOGONAL = {"rwkv7": 16, "rwkv6": 2}


def _quietly(build: Callable[[], nn.Module]) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fla's notes on Triton and on Bo's reference
        return build()


def _ours(
    build: Callable[[], nn.Module], shard: Callable[[nn.Module], Any] | None = None
) -> dict[str, torch.Tensor]:
    with torch.device("meta"), shardinit.record_constructors():
        model = _quietly(build)
    if shard is not None:
        shard(model)
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    return {
        name: (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
        for name, t in model.state_dict().items()
    }


def _eager(build: Callable[[], nn.Module], seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {name: t.detach().clone() for name, t in _quietly(build).state_dict().items()}


def _equal_gains(tensor: torch.Tensor) -> torch.Tensor | None:
    """The singular values of a matrix whose are all equal (orthogonal times a gain)."""
    if tensor.dim() != 2 or min(tensor.shape) < 2:
        return None
    values = torch.linalg.svdvals(tensor.double())
    return values if float(values.max() - values.min()) < 1e-5 * float(values.max()) else None


@pytest.mark.parametrize("name", sorted(MODELS))
def test_constructor_tables_and_orthogonal_gains_are_eagers(name: str) -> None:
    build = MODELS[name]
    ours, eager, other = _ours(build), _eager(build, 0), _eager(build, 1)
    assert ours.keys() == eager.keys()
    deterministic = orthogonal = 0
    for key, want in eager.items():
        got = ours[key]
        assert (got.shape, got.dtype) == (want.shape, want.dtype), key
        if torch.equal(want, other[key]):
            torch.testing.assert_close(got, want, rtol=2**-22, atol=0, msg=key)
            deterministic += 1
            continue
        gains = _equal_gains(want)
        if gains is not None:
            torch.testing.assert_close(
                torch.linalg.svdvals(got.double()), gains, rtol=1e-5, atol=0, msg=key
            )
            orthogonal += 1
    assert deterministic > 10 and orthogonal == ORTHOGONAL[name], (deterministic, orthogonal)


def _shard(world: int, model: nn.Module) -> None:
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _check_sharded(world: int, name: str) -> None:
    want = _ours(MODELS[name])
    got = _ours(MODELS[name], functools.partial(_shard, world))
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(got[key], value), key


@gloo_scenario(1, 2, 3)
def fla_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in MODELS:
        check(checks, name, functools.partial(_check_sharded, world, name))
    return checks


test_fla_under_fsdp2 = scenario_tests(fla_scenario, sorted(MODELS), [1, 2, 3])
