"""``shardinit plan`` at cluster scale: closed-form layouts checked against DTensor's
geometry rank by rank, the presets' sizes, one rank generated for real, bad input."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import shardinit
from shardinit import ShardInitError
from shardinit._integration.fingerprint import digest_of_total
from shardinit._integration.placements import local_runs
from shardinit._layout import Split
from shardinit._torch_compat import strided_shard
from shardinit.cli import run
from shardinit.cli.generate import generate_rank, param_spec
from shardinit.cli.layout import LayoutPlan, byte_summary, plan_layout
from shardinit.cli.models import (
    MODELS,
    ParamEntry,
    param_table,
    tp_style,
)
from shardinit.cli.transformer import build_model

# Uneven on purpose: 7 rows on many ranks leaves short and empty shards; "wq" and "w2"
# get the TP plan's column-wise and row-wise splits.
UNEVEN = [
    ParamEntry("emb.weight", (7, 3), "embedding"),
    ParamEntry("blocks.0.attention.wq.weight", (10, 5), "linear"),
    ParamEntry("blocks.0.feed_forward.w2.weight", (5, 9), "linear"),
    ParamEntry("blocks.0.norm.weight", (5,), "norm"),
    ParamEntry("scale", (), "norm"),
]

CASES = [
    (UNEVEN, 1, 1, 1),
    (UNEVEN, 3, 1, 1),
    (UNEVEN, 16, 1, 1),
    (UNEVEN, 6, 2, 1),
    (UNEVEN, 40, 4, 1),
    (UNEVEN[:4], 40, 4, 1),
    (UNEVEN, 30, 5, 1),
    (param_table("tiny"), 12, 4, 1),
    (param_table("tiny"), 96, 2, 1),
    (param_table("tiny"), 200, 1, 1),
    (param_table("tiny-moe"), 16, 2, 2),
    (param_table("tiny-moe"), 48, 2, 4),
    (param_table("tiny-moe"), 64, 1, 8),
    (param_table("tiny-moe"), 64, 4, 8),  # dp 16 > 8 experts: FSDP on the hidden dim
    (param_table("tiny-moe"), 24, 3, 1),
]


def torch_placement(split: Split) -> Any:
    """The torch placement object of ``split``: what the CLI's torch-free layout means
    in torch's terms."""
    from torch.distributed.tensor.placement_types import Replicate, Shard

    if split.dim is None:
        return Replicate()
    if split.split_factor > 1:
        return strided_shard(split.dim, split.split_factor)
    return Shard(split.dim)


def _reference_bytes(plan: LayoutPlan) -> list[int]:
    """Every rank's bytes, summed over the regions that DTensor's geometry
    (``placements.local_runs`` on torch placement objects) gives each parameter, after
    checking that the plan's own regions are the same."""
    result = []
    for rank in range(plan.world):
        total = 0
        for param in plan.params:
            placements = [torch_placement(split) for split in param.placements]
            reference = local_runs(
                param.shape, plan.mesh_shape(param), plan.coordinate(param, rank), placements
            )
            assert plan.runs(param, rank) == reference, (param.name, rank)
            numel = math.prod(sum(stop - start for start, stop in dim) for dim in reference)
            assert math.prod(plan.local_shape(param, rank)) == numel
            total += numel * param.itemsize
        result.append(total)
    return result


@pytest.mark.parametrize(
    ("entries", "world", "tp", "ep"),
    CASES,
    ids=[f"{len(c[0])}params-W{c[1]}-tp{c[2]}-ep{c[3]}" for c in CASES],
)
def test_closed_form_bytes_equal_the_sum_over_regions(
    entries: list[ParamEntry], world: int, tp: int, ep: int
) -> None:
    plan = plan_layout(entries, world, tp, ep, dtypes={"emb.weight": "bfloat16"})
    reference = _reference_bytes(plan)
    assert [plan.rank_bytes(rank) for rank in range(world)] == reference
    assert byte_summary(plan).ranks_by_bytes == dict(Counter(reference))


_NAMES = ["a.wq.weight", "a.w2.weight", "a.norm.weight", "a.gate.weight"]


@given(
    shapes=st.lists(
        st.lists(st.integers(0, 23), min_size=1, max_size=3).map(tuple), min_size=1, max_size=4
    ),
    dp=st.integers(1, 40),
    tp=st.sampled_from([1, 2, 3, 4]),
)
def test_closed_form_bytes_property(shapes: list[tuple[int, ...]], dp: int, tp: int) -> None:
    """Random shapes (empty dims included), worlds and TP: the summary from one rank per
    box equals the count over every rank's regions."""
    entries = [
        ParamEntry(f"{i}.{_NAMES[i % 4]}", shape, "linear") for i, shape in enumerate(shapes)
    ]
    try:
        plan = plan_layout(entries, dp * tp, tp)
    except ShardInitError:
        return  # TP larger than a split dim: the bad-input tests below
    reference = _reference_bytes(plan)
    assert byte_summary(plan).ranks_by_bytes == dict(Counter(reference))


def test_cases_cover_uneven_shards_and_empty_ranks() -> None:
    uneven = plan_layout(UNEVEN, 16)
    # 7 rows on 16 ranks: ranks 0..6 hold one row each, the others none at all
    assert [len(uneven.runs(uneven.params[0], r)[0]) for r in (6, 7)] == [1, 0]
    assert byte_summary(plan_layout(UNEVEN[:1], 16)).empty_ranks == 9
    # without the replicated scalar, data-parallel groups 7..9 of 10 hold nothing at all
    assert byte_summary(plan_layout(UNEVEN[:4], 40, 4)).empty_ranks == 3 * 4
    short = plan_layout(UNEVEN, 3)  # 10 rows on 3 ranks: 4, 4, 2
    assert [short.local_shape(short.params[1], r)[0] for r in range(3)] == [4, 4, 2]
    moe = plan_layout(param_table("tiny-moe"), 64, 4, 8)
    stack = next(p for p in moe.params if p.name.endswith("experts.w1_EFD"))
    assert [str(s) for s in stack.placements] == [
        "_StridedShard(dim=1, sf=4)",
        "Shard(dim=0)",
        "Shard(dim=1)",
    ]


def test_plan_at_16384_ranks_small_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["plan", "--model", "tiny", "--world", "16384", "--tp", "8"])
    out = capsys.readouterr().out
    assert code == 0
    plan = plan_layout(param_table("tiny"), 16384, 8)
    summary = byte_summary(plan)
    # Every element is held tp times where TP replicates it and once where it splits it.
    held = sum(
        p.nbytes
        * math.prod(
            size for size, s in zip(plan.mesh_shape(p), p.placements, strict=True) if s.dim is None
        )
        for p in plan.params
    )
    assert summary.total == held
    assert sum(summary.ranks_by_bytes.values()) == 16384
    assert summary.empty_ranks > 0  # 64-wide rows cannot reach 2048 data-parallel groups
    assert f"ranks holding no parameter bytes: {summary.empty_ranks}" in out
    for rank in (0, 8192, 16383):
        assert f"rank {rank:>4}: " in out
    assert "(16378 more ranks; --all-ranks lists them)" in out


def test_all_ranks_lists_every_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--model", "tiny", "--world", "24", "--all-ranks"]) == 0
    out = capsys.readouterr().out
    assert [f"rank {r:>4}: " in out for r in range(24)] == [True] * 24
    assert "more ranks" not in out
    assert "r23 [" in out


# ------------------------------------------------------------------------------ presets


def test_preset_sizes_match_the_published_totals() -> None:
    assert MODELS["llama-8b"].num_params() == 8_030_261_248  # Llama 3.1 8B
    assert MODELS["llama-70b"].num_params() == 70_553_706_496  # ~70.6B
    assert MODELS["llama-405b"].num_params() == 405_853_388_800  # ~405.9B
    total = MODELS["deepseek-v3"].num_params()
    assert round(total / 1e9) == 671  # DeepSeek-V3's 671B, without its MTP layer
    names = {entry.name for entry in param_table("deepseek-v3")}
    assert len(names) == len(param_table("deepseek-v3"))
    experts = [e for e in param_table("deepseek-v3") if e.kind == "experts"]
    assert len(experts) == 3 * (61 - 3)
    assert {e.shape for e in experts} == {(256, 2048, 7168), (256, 7168, 2048)}


def test_deepseek_v3_table_is_torchtitans_671b_model() -> None:
    from torchtitan.models.deepseek_v3 import model_registry

    with torch.device("meta"):
        model = model_registry("671B").model.build()
    assert [(e.name, e.shape) for e in param_table("deepseek-v3")] == [
        (name, tuple(p.shape)) for name, p in model.named_parameters()
    ]


@pytest.mark.parametrize("name", ["tiny", "small", "demo", "llama-1b"])
def test_param_table_is_the_built_model(name: str) -> None:
    model = build_model(name)
    assert [(e.name, e.shape) for e in param_table(name)] == [
        (key, tuple(p.shape)) for key, p in model.named_parameters()
    ]
    assert sum(math.prod(e.shape) for e in param_table(name)) == MODELS[name].num_params()


def test_mla_tp_styles() -> None:
    assert tp_style("layers.0.attention.wq_b.weight") == "colwise"
    assert tp_style("layers.0.attention.wkv_b.weight") == "colwise"
    assert tp_style("layers.0.attention.wq_a.weight") is None
    assert tp_style("layers.5.moe.router.gate.weight") is None
    assert tp_style("layers.5.moe.shared_experts.w2.weight") == "rowwise"


# ------------------------------------------------------------------- one rank, for real


def _region(full: torch.Tensor, runs: list[list[tuple[int, int]]]) -> torch.Tensor:
    for dim, dim_runs in enumerate(runs):
        index = [torch.arange(a, b) for a, b in dim_runs]
        full = full.index_select(
            dim, torch.cat(index) if index else torch.empty(0, dtype=torch.long)
        )
    return full


def test_generate_equals_materialize_slices_and_fingerprints_add_up() -> None:
    plan = plan_layout(param_table("tiny"), 6, 2)
    kinds = {e.name: e.kind for e in param_table("tiny")}
    model = shardinit.materialize(build_model("tiny"), seed=7)
    full = dict(model.named_parameters())
    totals: Counter[str] = Counter()
    for rank in range(plan.world):
        shards = generate_rank(plan, kinds, rank, seed=7)
        assert shards.nbytes == plan.rank_bytes(rank)
        for param in plan.params:
            expected = _region(full[param.name].detach(), plan.runs(param, rank))
            assert torch.equal(shards.tensors[param.name], expected), (param.name, rank)
            totals[param.name] += shards.terms[param.name]
    for param in plan.params:
        assert digest_of_total(getattr(torch, param.dtype), param.shape, totals[param.name]) == (
            shardinit.fingerprint(full[param.name])
        )


def test_generate_moe_equals_full_slices() -> None:
    entries = param_table("tiny-moe")
    plan = plan_layout(entries, 16, 2, 2)
    kinds = {e.name: e.kind for e in entries}
    shards = generate_rank(plan, kinds, 13, seed=3)
    checked = 0
    for param in plan.params:
        full = shardinit.full(param_spec(param, kinds[param.name], 3))
        expected = _region(full, plan.runs(param, 13))
        assert torch.equal(shards.tensors[param.name], expected), param.name
        checked += expected.numel()
    assert checked == shards.nbytes // 4 > 0


def test_generate_command_reports(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["plan", "--model", "tiny", "--world", "8", "--tp", "2", "--generate", "5"])
    out = capsys.readouterr().out
    assert code == 0
    plan = plan_layout(param_table("tiny"), 8, 2)
    shards = generate_rank(plan, {e.name: e.kind for e in param_table("tiny")}, 5, seed=0)
    assert "Generating rank 5 of 8 here, for real (seed 0," in out
    assert f"slice fingerprint {shards.slice_fingerprint} " in out
    match = re.search(r"21 local shards, (\S+ \S+) \(planned (\S+ \S+)\)", out)
    assert match and match.group(1) == match.group(2)


# ----------------------------------------------------------------------------- bad input

BAD = [
    (
        ["--model", "tiny", "--world", "6", "--tp", "4"],
        "--tp 4 must divide --world 6 (divisors of 6: 1, 2, 3, 6)",
    ),
    (
        ["--model", "tiny", "--world", "128", "--tp", "64"],
        "--tp 64 is larger than the dim tensor parallelism splits in "
        "layers.0.attention.wk.weight (shape (32, 64)); allowed: 1 <= --tp <= 32",
    ),
    (
        ["--model", "tiny", "--world", "4", "--generate", "4"],
        "--generate 4 is out of range: ranks are 0 .. 3 for --world 4",
    ),
    (
        ["--model", "tiny", "--world", "4", "--generate", "-1"],
        "argument --generate: a rank is >= 0, got -1",
    ),
    (
        ["--model", "tiny", "--world", "4", "--ep", "2"],
        "--ep 2: the model has no routed experts; allowed: --ep 1",
    ),
    (
        ["--model", "tiny-moe", "--world", "8", "--ep", "3"],
        "--ep 3 must divide --world / --tp = 8 (divisors of 8: 1, 2, 4, 8)",
    ),
    (
        ["--model", "tiny-moe", "--world", "32", "--ep", "16"],
        "--ep 16 must divide the 8 routed experts (divisors of 8: 1, 2, 4, 8)",
    ),
    (
        ["--model", "llama-405b", "--world", "0"],
        "argument --world: expected a positive integer, got 0",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_naming_the_argument_and_range(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["plan", *argv])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.strip().splitlines()[-1] == f"shardinit plan: error: {message}"
