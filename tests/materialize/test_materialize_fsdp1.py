"""FSDP1 (``FullyShardedDataParallel``) on 2 and 3 CPU ranks, ``use_orig_params`` True
and False: ``fsdp1_param_init_fn`` only allocates, ``materialize`` fills each rank's flat
shard; the full parameters (``summon_full_params``) equal ``shardinit.full`` bit for bit."""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import partial

import pytest
import torch
from materialize_workers import (
    Block,
    Checks,
    TinyLM,
    assert_check_passed,
    check,
    expect_equal,
    expected_full,
    gloo_scenario,
    run_group,
    tinylm_expected_defaults,
)
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

import shardinit
from shardinit import init

pytestmark = pytest.mark.distributed

SEED = 99


def _wrap(use_orig_params: bool, dtype: torch.dtype) -> FSDP:
    with torch.device("meta"):
        model = TinyLM().to(dtype)
    return FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        device_id=torch.device("cpu"),
        param_init_fn=functools.partial(shardinit.fsdp1_param_init_fn, device="cpu"),
        use_orig_params=use_orig_params,
    )


def _check_full(model: FSDP, expected: dict[str, init.Initializer], dtype: torch.dtype) -> None:
    seen = []
    with FSDP.summon_full_params(model):
        for raw, param in model.named_parameters():
            name = shardinit.canonical_name(raw)
            rows = (5,) if name == "tok_embeddings.weight" else ()
            full = param.detach().clone()
            want = expected_full(name, tuple(full.shape), dtype, expected[name], SEED, rows)
            expect_equal(name, full, want)
            seen.append(name)
        inner = model.module
        assert torch.equal(inner.output.weight, inner.tok_embeddings.weight), "tie lost"
    assert sorted(seen) == sorted(expected), seen


def _check_padding_zero(model: FSDP) -> None:
    # Padding after the last parameter of each local flat shard stays zero.
    for unit in FSDP.fsdp_modules(model):
        handle = unit._handle
        if handle is None:
            continue
        flat = handle.flat_param
        used = sum(i.numel_in_shard or 0 for i in flat._shard_param_infos)
        pad = flat._shard_numel_padded
        if pad:
            assert torch.all(flat.data[-pad:] == 0), "end padding not zero"
        assert used <= flat.numel()


def _check_fingerprints(model: FSDP, dtype: torch.dtype) -> None:
    # Each rank reads only its flat shard; the sums across the unit's group give the
    # whole parameters' fingerprints, equal on every rank to those of the unwrapped model.
    with torch.device("meta"):
        plain = TinyLM().to(dtype)
    shardinit.materialize(plain, seed=SEED)
    want = shardinit.fingerprint_model(plain)
    got = shardinit.fingerprint_model(model)
    assert got == want, {name: (got.get(name), digest) for name, digest in want.items()}


def _check_refuse(model: FSDP) -> None:
    try:
        shardinit.materialize(model, seed=SEED)
    except shardinit.ShardInitError as error:
        assert "already materialized" in str(error)
    else:
        raise AssertionError("materialize accepted a materialized FSDP1 model")


class _TiedAcrossUnits(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight


def _check_tie_split_refused(use_orig_params: bool) -> None:
    init_fn = functools.partial(shardinit.fsdp1_param_init_fn, device="cpu")
    with torch.device("meta"):
        model = _TiedAcrossUnits()
    kwargs = {"param_init_fn": init_fn, "device_id": torch.device("cpu")}
    model.head = FSDP(model.head, use_orig_params=use_orig_params, **kwargs)  # type: ignore[assignment]
    wrapped = FSDP(model, use_orig_params=use_orig_params, **kwargs)
    try:
        shardinit.materialize(wrapped, seed=SEED)
    except shardinit.ShardInitError as error:
        message = str(error)
        assert "split across FSDP1 units: head.weight = emb.weight (units head, <root>)" in (
            message
        ), message
    else:
        raise AssertionError("materialize accepted a tie split across FSDP1 units")


def _tinylm_init(model: TinyLM) -> Callable[[], None]:
    """Init code for TinyLM: full fills everywhere but one weight, which is only scaled
    in part (so its default values are replayed first), cutting through flat shards."""

    def init_weights() -> None:
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(param)
            elif name.endswith("bias") or name == "layers.0.w1.weight":
                continue  # keep the torch.nn default
            else:
                nn.init.trunc_normal_(param, 0.0, 0.02, -0.04, 0.04)
        model.layers[0].w1.weight.data[1:].mul_(0.5)
        model.tok_embeddings.weight.data[3:20].normal_(0.0, 1.0)

    return init_weights


def _check_captured(use_orig_params: bool) -> None:
    with torch.device("meta"):
        model = TinyLM()
    captured = shardinit.capture_init(model, _tinylm_init(model))  # before wrapping
    wrapped = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        device_id=torch.device("cpu"),
        param_init_fn=functools.partial(shardinit.fsdp1_param_init_fn, device="cpu"),
        use_orig_params=use_orig_params,
    )
    # A rule for a parameter the captured code sets completely can never apply.
    with pytest.warns(UserWarning, match=r"norm\.weight \(rule '\*norm\.weight'\)"):
        shardinit.materialize(
            wrapped, seed=SEED, init_fn=captured, rules={"*norm.weight": init.zeros()}
        )
    with torch.device("meta"):
        plain = TinyLM()
    shardinit.materialize(plain, seed=SEED, init_fn=_tinylm_init(plain))  # world-1 replay
    want = dict(plain.named_parameters())
    seen = []
    with FSDP.summon_full_params(wrapped):
        for raw, param in wrapped.named_parameters():
            name = shardinit.canonical_name(raw)
            expect_equal(name, param.detach().clone(), want[name].detach())
            seen.append(name)
    assert sorted(seen) == sorted(want), seen
    assert "layers.0.w1.weight" in captured and not captured["layers.0.w1.weight"].covers_all()


def _check_plain_init_fn_refused() -> None:
    model = _wrap(False, torch.float32)
    try:
        shardinit.materialize(model, seed=SEED, init_fn=lambda: None)
    except shardinit.ShardInitError as error:
        assert "capture it on the meta model before wrapping" in str(error), str(error)
    else:
        raise AssertionError("materialize accepted a plain init_fn for FSDP1")


def _check_tie_outside_units_refused() -> None:
    # The embedding is wrapped, the head sharing its weight is outside every unit.
    init_fn = functools.partial(shardinit.fsdp1_param_init_fn, device="cpu")
    with torch.device("meta"):
        model = _TiedAcrossUnits()
    model.emb = FSDP(model.emb, param_init_fn=init_fn, device_id=torch.device("cpu"))  # type: ignore[assignment]
    try:
        shardinit.materialize(model, seed=SEED)
    except shardinit.ShardInitError as error:
        assert "emb.weight" in str(error) and "<no FSDP1 unit>" in str(error), str(error)
    else:
        raise AssertionError("materialize accepted a tie leaving the FSDP1 units")


@gloo_scenario(2, 3)
def fsdp1_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    check(checks, "tie_outside_units", _check_tie_outside_units_refused)
    for use_orig in (True, False):
        check(checks, f"captured_orig{use_orig}", partial(_check_captured, use_orig))
    check(checks, "plain_init_fn_refused", _check_plain_init_fn_refused)
    for use_orig in (True, False):
        check(checks, f"tie_split_orig{use_orig}", partial(_check_tie_split_refused, use_orig))
    for use_orig in (True, False):
        tag = f"orig{use_orig}"
        model = _wrap(use_orig, torch.float32)
        shardinit.materialize(model, seed=SEED)
        expected = tinylm_expected_defaults(model.module, torch.float32)
        check(checks, f"defaults_{tag}", partial(_check_full, model, expected, torch.float32))
        check(checks, f"padding_{tag}", partial(_check_padding_zero, model))
        check(checks, f"fingerprints_{tag}", partial(_check_fingerprints, model, torch.float32))
        check(checks, f"refuse_{tag}", partial(_check_refuse, model))
    bf16 = _wrap(False, torch.bfloat16)
    rules = {"*norm.weight": init.ones(), "*.bias": init.zeros(), "*": init.normal(0, 0.02)}
    shardinit.materialize(bf16, seed=SEED, rules=rules)
    expected_bf16 = {
        name: init.ones()
        if name.endswith("norm.weight")
        else init.zeros()
        if name.endswith("bias")
        else init.normal(0, 0.02)
        for name in tinylm_expected_defaults(bf16.module, torch.bfloat16)
    }

    # Rules replace the Embedding default, so no padding row: compare without zero rows.
    def check_bf16() -> None:
        with FSDP.summon_full_params(bf16):
            for raw, param in bf16.named_parameters():
                name = shardinit.canonical_name(raw)
                want = expected_full(
                    name, tuple(param.shape), torch.bfloat16, expected_bf16[name], SEED
                )
                expect_equal(name, param.detach().clone(), want)

    check(checks, "rules_bf16", check_bf16)
    return checks


@functools.cache
def results(world: int) -> dict[str, list[str]]:
    return run_group(world, fsdp1_scenario)


CHECKS = [
    f"{kind}_orig{flag}"
    for kind in ("defaults", "padding", "fingerprints", "refuse", "tie_split", "captured")
    for flag in (True, False)
] + ["rules_bf16", "plain_init_fn_refused", "tie_outside_units"]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", CHECKS)
def test_fsdp1(world: int, name: str) -> None:
    assert_check_passed(results(world), name)


@pytest.mark.parametrize("world", [2, 3])
def test_every_check_of_the_scenario_is_asserted(world: int) -> None:
    # A check the scenario runs but CHECKS does not list would pass unseen.
    assert sorted(results(world)) == sorted(CHECKS)


def test_ties_of_freed_models_are_forgotten() -> None:
    """fsdp1_param_init_fn remembers every tie it allocates (materialize checks that
    FSDP1 kept each inside one unit); a model that was freed leaves none behind."""
    import gc

    from shardinit._integration import fsdp1

    def allocate_tied_pair() -> None:
        with torch.device("meta"):
            first, second = nn.Linear(4, 4), nn.Linear(4, 4)
        second.weight = first.weight
        for module in (first, second):
            shardinit.fsdp1_param_init_fn(module, device="cpu")
        assert first.weight is second.weight and not first.weight.is_meta

    before = len(fsdp1._live_ties())
    allocate_tied_pair()
    gc.collect()
    allocate_tied_pair()
    assert len(fsdp1._TIES) == before + 1  # the first pair's tie was pruned
    gc.collect()
    assert len(fsdp1._live_ties()) == before
