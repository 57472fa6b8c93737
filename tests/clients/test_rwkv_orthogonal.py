"""HF RWKV (transformers 5.23, tiny config): the parameters its ``_init_weights`` fills
with ``orthogonal_`` (every Linear weight and the embedding, with RWKV's gains), given
as ``shardinit.init.orthogonal`` rules. Its other values (``time_decay``, ``time_mix_*``,
computed from the layer index and copied in) get plain rules here: RWKV's own init code
as ``init_fn`` is tested with the other clients (test_clients.py).

* World 1 (this process): each orthogonal parameter is the ``full`` of its spec, and its
  singular values are RWKV's own CPU init's (all equal to the gain, within 1e-5: the
  same construction and gain, different random matrices).
* FSDP2 at worlds 1 and 2 (gloo, in the shared groups of those worlds): the gathered
  parameters equal, byte for byte, the same model materialized unsharded in the same
  process.
"""

from __future__ import annotations

import math

import pytest
import torch
from materialize_workers import Checks, check, expect_equal, gloo_scenario, scenario_tests
from torch import nn

import shardinit
from shardinit import init

pytestmark = pytest.mark.clients

SEED = 77


def _rwkv() -> nn.Module:
    import transformers as tf

    config = tf.RwkvConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
        intermediate_size=64, context_length=16,
    )  # fmt: skip
    return tf.RwkvForCausalLM(config)


def _rwkv_gain(module: nn.Module, vocab: int, hidden: int) -> float:
    """The gain RWKV's ``_init_weights`` passes to ``orthogonal_`` for ``module``."""
    rows, cols = module.weight.shape
    if isinstance(module, nn.Embedding):
        return 1e-4 * math.sqrt(max(rows, cols))
    gain = math.sqrt(rows / cols) if rows > cols else 1.0
    return gain * (0.5 if (rows, cols) == (vocab, hidden) else 1.0)


def orthogonal_gains(model: nn.Module) -> dict[str, float]:
    """Canonical weight name -> RWKV's gain, for every orthogonal parameter."""
    config = model.config
    return {
        f"{name}.weight": _rwkv_gain(module, config.vocab_size, config.hidden_size)
        for name, module in model.named_modules()
        if isinstance(module, (nn.Linear, nn.Embedding))
    }


def _rules(model: nn.Module) -> list[tuple[str, init.Initializer]]:
    rules: list[tuple[str, init.Initializer]] = [
        (name, init.orthogonal(gain)) for name, gain in orthogonal_gains(model).items()
    ]
    return [*rules, ("*.time_*", init.uniform(0.0, 1.0))]


def _materialized(world_mesh: object = None) -> nn.Module:
    with torch.device("meta"):
        model = _rwkv()
    if world_mesh is not None:
        from torch.distributed.fsdp import fully_shard

        for block in model.rwkv.blocks:
            fully_shard(block, mesh=world_mesh)
        fully_shard(model, mesh=world_mesh)
    shardinit.materialize(model, seed=SEED, rules=_rules(model))
    return model


def test_world1_orthogonal_parameters_are_full_and_have_rwkvs_gains() -> None:
    model = _materialized()
    params = dict(model.named_parameters())
    torch.manual_seed(0)
    reference = dict(_rwkv().named_parameters())  # RWKV's own init, on the CPU
    gains = orthogonal_gains(model)
    assert len(gains) == 16
    for name, gain in gains.items():
        ours = params[name].detach()
        spec = shardinit.ParamSpec(name, ours.shape, ours.dtype, init.orthogonal(gain), seed=SEED)
        assert torch.equal(ours, shardinit.full(spec)), name
        theirs = reference[name].detach()
        want = torch.full((min(ours.shape),), gain, dtype=torch.float64)
        for weight in (ours, theirs):
            values = torch.linalg.svdvals(weight.double())
            assert torch.allclose(values, want, rtol=1e-5, atol=0), (name, values, gain)


@gloo_scenario(1, 2)  # joins the clients' groups of worlds 1 and 2 (no launch of its own)
def rwkv_scenario(rank: int, world: int) -> Checks:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    checks: Checks = {}

    def run() -> None:
        sharded = _materialized(mesh)
        plain = dict(_materialized().named_parameters())
        for name, param in sharded.named_parameters():
            expect_equal(name, param.full_tensor(), plain[name].detach())  # type: ignore[attr-defined]

    check(checks, "rwkv", run)
    return checks


test_fsdp2_worlds_give_identical_bytes = scenario_tests(rwkv_scenario, ["rwkv"], [1, 2])
