"""Real client libraries through their own init code (issues 14, 19): tiny transformers 5.23
models (Llama tied and untied, GPT-2, BERT, ModernBERT, T5; Mamba, Mamba2, Jamba,
Qwen3-Next, NemotronH, Kimi Linear, Whisper and RWKV, whose init code computes values)
and torchtitan 0.3.0's Llama3 (fused ``wqkv`` and not), each built on meta and
materialized with ``init_fn`` set to the library's own init (``model.init_weights``, or
HF's ``_init_weights`` through ``model.apply``).

* World 1 (this process): per parameter against the library's own CPU init without
  shardinit: constants exact, random parameters' std/mean/abs-max within sample-size
  tolerances, the same zeros (padding rows), the same ties; buffers equal.
* Worlds 1, 2, 3 (gloo, one launch per world for all models): meta -> ``fully_shard`` per
  block and root -> ``materialize``; the gathered parameters equal, byte for byte, the
  same model materialized unsharded in the same process (so every world gives the same
  bytes).
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import pytest
import torch
from client_models import MODELS, cpu_reference
from materialize_workers import (
    Checks,
    assert_check_passed,
    check,
    expect_equal,
    gloo_scenario,
    run_group,
    scenario_tests,
)
from torch import nn

import shardinit
from shardinit._integration.placements import is_dtensor

pytestmark = pytest.mark.clients

SEED = 1234
# Tied models drop the tie target's own init (as the library's CPU init does) and say so.
TIED = {
    "llama_tied", "llama_apply", "gpt2", "bert", "bert_apply", "t5", "modernbert", "mamba",
    "whisper",
}  # fmt: skip


def _materialized(name: str, world_mesh: object = None) -> nn.Module:
    entry = MODELS[name]
    with torch.device("meta"):
        model = entry.build()
    if world_mesh is not None:
        from torch.distributed.fsdp import fully_shard

        for block in entry.blocks(model):
            fully_shard(block, mesh=world_mesh)
        # FSDP2 refuses scalar parameters (CLIP's logit_scale): they stay plain, on meta,
        # and materialize allocates them whole.
        scalars = {p for p in model.parameters() if p.dim() == 0}
        fully_shard(model, mesh=world_mesh, ignored_params=scalars or None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the dropped tie writes (tested below)
        shardinit.materialize(model, seed=SEED, init_fn=entry.init(model))
    return model


def _ties(model: nn.Module) -> list[set[str]]:
    groups: dict[int, set[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), set()).add(name)
    return sorted((g for g in groups.values() if len(g) > 1), key=sorted)


def _zeros_agree(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """The same zero rows (padding rows, zeroed blocks) exactly, and the same zeros up to
    isolated random draws of exactly 0.0: a value derived from a 24-bit uniform is 0.0
    with probability about 2**-24 per element, for shardinit and torch alike (6 and 4 in
    2**26 draws of a Linear's default), so a weight of a few hundred thousand elements
    holds one now and then. Up to ``2 + n * 2**-20`` isolated differences are allowed."""
    if ours.dim() >= 2 and ours.shape[-1] > 1:  # (a 1x1 kernel's "row" is one draw)
        rows = (ours == 0).all(-1), (theirs == 0).all(-1)
        assert torch.equal(*rows), f"{name}: zero rows (padding rows) differ"
    differ = int(((ours == 0) != (theirs == 0)).sum())
    assert differ <= 2 + ours.numel() * 2**-20, f"{name}: zero pattern differs ({differ})"


def _like_library(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Constants exact; random values: the same zeros (padding rows), std and mean within
    6 standard errors of the sample (n elements), abs-max within a factor 2 (the
    largest of n >= 64 normal samples lies between about 2 and 5 standard deviations).
    The moments are those of the values within :func:`_bulk`'s cut; beyond it, each
    side may hold only isolated values."""
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, name
    if theirs.unique().numel() <= 1:
        assert torch.equal(ours, theirs), f"{name}: constant differs"
        return
    _zeros_agree(name, ours, theirs)
    values, reference = _bulk(name, ours[theirs != 0].double(), theirs[theirs != 0].double())
    n = values.numel()
    std = float(reference.std())
    assert abs(float(values.std()) / std - 1) < 6 / math.sqrt(2 * n), f"{name}: std"
    assert abs(float(values.mean() - reference.mean())) < 6 * std * math.sqrt(2 / n), name
    ratio = float(values.abs().max() / reference.abs().max())
    assert 1 / 2 < ratio < 2, f"{name}: abs-max ratio {ratio}"


def _bulk(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Both samples without their isolated far outliers: values beyond 20 times the
    library's median magnitude (13.5 standard deviations of a normal; none of a uniform),
    of which each side may hold ``2 + n * 2**-20``. Torch's float32 ``uniform_`` returns
    its lower end with probability 2**-24, so timm's ``trunc_normal_`` (``uniform_`` then
    ``erfinv_`` then ``clamp_``) with its default absolute bounds of +-2 puts a value at
    -2 (100 standard deviations of std 0.02) about once in 16 million draws; shardinit's
    U24 can be 0 as well. One such value moves a 150k-element sample's std by 3 %."""
    cut = 20 * float(theirs.abs().median())
    allowed = 2 + theirs.numel() * 2**-20
    for side in (ours, theirs):
        assert int((side.abs() > cut).sum()) <= allowed, f"{name}: values far out"
    return ours[ours.abs() <= cut], theirs[theirs.abs() <= cut]


# --------------------------------------------------------------------------- computed values
# Parameters whose init code computes values (issue 19), replayed as init programs: the
# library's CPU init computes them with torch's float32 kernels, shardinit in binary64
# rounded once per float32 temporary, so deterministic tables agree up to the last bits
# (2 ulp of float32 for values of magnitude <= 1, relative 2**-22 above); random ones are
# checked for their range.
ULPS = 2**-22


def _table(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    torch.testing.assert_close(ours, theirs, rtol=ULPS, atol=ULPS, msg=name)


def _within(low: float, high: float, through: Callable[[torch.Tensor], torch.Tensor]) -> Check:
    """Random values whose image ``through`` lies in [low, high] (float32 rounding:
    relative 1e-6), all distinct, not the library's own draws."""

    def check(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        image = through(ours.double())
        assert bool((image >= low * (1 - 1e-6)).all() and (image <= high * (1 + 1e-6)).all()), (
            f"{name}: {image.min()} .. {image.max()} outside [{low}, {high}]"
        )
        assert ours.unique().numel() == ours.numel(), f"{name}: repeated values"
        assert not torch.equal(ours, theirs), f"{name}: torch's own draws"

    return check


Check = Callable[[str, torch.Tensor, torch.Tensor], None]
_DT = _within(1e-3, 0.1, torch.nn.functional.softplus)  # time_step_min / max
COMPUTED: dict[str, dict[str, Check]] = {
    "mamba": {"mixer.A_log": _table, "mixer.dt_proj.bias": _DT},
    "mamba2": {"mixer.A_log": _table, "mixer.dt_bias": _DT},
    "jamba": {"mamba.A_log": _table},
    "qwen3_next": {"linear_attn.A_log": _within(0.01, 16.0, torch.exp)},
    "nemotron_h": {"mixer.A_log": _table, "mixer.dt_bias": _DT},
    "kimi_linear": {
        "forget_gate.A_log": _within(1.0, 16.0, torch.exp),
        "forget_gate.dt_bias": _DT,
    },
    "whisper": {"encoder.embed_positions.weight": _table},
    "rwkv": {
        suffix: _table
        for suffix in ("time_decay", "time_mix_key", "time_mix_value", "time_mix_receptance")
    },
    "titan_qwen3_5": {"attn.A_log": _within(0.01, 16.0, torch.exp)},
}


def _compare(model: str, name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    for suffix, compare in COMPUTED.get(model, {}).items():
        if name.endswith(suffix):
            compare(name, ours, theirs)
            return
    _like_library(name, ours, theirs)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_world1_matches_the_librarys_own_cpu_init(name: str) -> None:
    entry = MODELS[name]
    with torch.device("meta"):
        model = entry.build()
    if name in TIED:
        with pytest.warns(UserWarning, match="tied parameter holders are dropped"):
            shardinit.materialize(model, seed=SEED, init_fn=entry.init(model))
    else:
        shardinit.materialize(model, seed=SEED, init_fn=entry.init(model))
    reference = cpu_reference(name)
    assert _ties(model) == _ties(reference)
    theirs = dict(reference.named_parameters())
    assert sorted(n for n, _ in model.named_parameters()) == sorted(theirs)
    for param_name, param in model.named_parameters():
        _compare(name, param_name, param.detach(), theirs[param_name].detach())
    buffers = dict(reference.named_buffers())
    for buffer_name, buffer in model.named_buffers():
        expect_equal(buffer_name, buffer, buffers[buffer_name])


def test_mamba_dt_bias_is_log_uniform_through_softplus() -> None:
    """Mamba's ``dt_proj.bias`` is the inverse softplus of ``dt``, log-uniform on
    [time_step_min, time_step_max]: softplus of the replayed values lies there, and
    ``log`` of it passes a Kolmogorov-Smirnov test against the uniform law on
    [log min, log max] (n = 4096: D_n < 1.63 / sqrt(n), the 1 % critical value)."""
    import transformers as tf
    from transformers.models.mamba.modeling_mamba import MambaMixer

    from shardinit.shard import writer

    config = tf.MambaConfig(hidden_size=2048, expand=2, state_size=4, time_step_rank=8)
    low, high = config.time_step_min, config.time_step_max
    with torch.device("meta"):
        mixer = MambaMixer(config, layer_idx=0)
    record = shardinit.capture_init(mixer, mixer.init_mamba_weights)["dt_proj.bias"]
    values = writer().full(record, seed=SEED).double()
    dt = torch.nn.functional.softplus(values)
    assert values.numel() == 4096
    assert bool((dt >= low * (1 - 1e-6)).all() and (dt <= high * (1 + 1e-6)).all())
    u = ((dt.log() - math.log(low)) / (math.log(high) - math.log(low))).sort().values
    n = u.numel()
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    distance = max(float((ranks / n - u).max()), float((u - (ranks - 1) / n).max()))
    assert distance < 1.63 / math.sqrt(n), distance


# --------------------------------------------------------------------------- worlds 1-3


@gloo_scenario(1, 2, 3)
def clients_scenario(rank: int, world: int) -> Checks:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    checks: Checks = {}
    for name in sorted(MODELS):

        def run(name: str = name) -> None:
            _expect_gathered_equal_unsharded(name, _materialized(name, mesh))

        check(checks, name, run)
    return checks


def _expect_gathered_equal_unsharded(name: str, sharded: nn.Module) -> None:
    """Every gathered parameter of ``sharded`` equals the world-1 materialization."""
    plain = dict(_materialized(name).named_parameters())
    for param_name, param in sharded.named_parameters():
        full = param.full_tensor() if is_dtensor(param) else param.detach()
        expect_equal(param_name, full, plain[param_name].detach())


test_fsdp2_worlds_give_identical_bytes = scenario_tests(clients_scenario, sorted(MODELS), [1, 2, 3])


# --------------------------------------------------------------------------- FSDP2 + TP


def _tensor_parallel(name: str, mesh: object) -> nn.Module:
    """transformers' own TP plan on the "tp" dim, then fully_shard on "dp"."""
    from torch.distributed.fsdp import fully_shard
    from transformers.distributed.tensor_parallel import apply_tensor_parallelism

    entry = MODELS[name]
    with torch.device("meta"):
        model = entry.build()
    plan = model._expand_parallel_plan(model.tp_plan)  # type: ignore[operator]
    apply_tensor_parallelism(model, mesh["tp"], plan)  # type: ignore[index]
    for block in entry.blocks(model):
        fully_shard(block, mesh=mesh["dp"])  # type: ignore[index]
    fully_shard(model, mesh=mesh["dp"])  # type: ignore[index]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        shardinit.materialize(model, seed=SEED, init_fn=entry.init(model))
    return model


@gloo_scenario(4)
def tp_scenario(rank: int, world: int) -> Checks:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    checks: Checks = {}
    for name in sorted(n for n, m in MODELS.items() if m.tp_plan):

        def run(name: str = name) -> None:
            _expect_gathered_equal_unsharded(name, _tensor_parallel(name, mesh))

        check(checks, name, run)
    return checks


@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted(n for n, m in MODELS.items() if m.tp_plan))
def test_fsdp2_tp_2x2_with_transformers_plan_gives_identical_bytes(name: str) -> None:
    assert_check_passed(_tp_results(), name)


@functools.cache
def _tp_results() -> dict[str, list[str]]:
    return run_group(4, tp_scenario)
