"""shardinit.fingerprint: an independent reference, single-element sensitivity, and
layout independence (partial sums over regions, and real DTensor layouts on 4 ranks, in
the shared gloo group of tests/helpers/gloo_groups.py).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch
from materialize_workers import gloo_scenario, rank_results

import shardinit
from shardinit import fingerprint, fingerprint_model, model_digest
from shardinit._integration import fingerprint as fp_module

MASK = (1 << 64) - 1


def _mix64_ref(z: int) -> int:
    # SplitMix64 finalizer (Steele, Lea, Flood 2014), in Python integers.
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def _bits_ref(tensor: torch.Tensor) -> list[int]:
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    size = tensor.element_size()
    raw = tensor.contiguous().reshape(-1).view(view[size]).tolist()
    return [value & ((1 << (8 * size)) - 1) for value in raw]


def reference_fingerprint(tensor: torch.Tensor) -> str:
    """The fp1 format written out element by element, independently of the module."""
    total = 0
    for index, bits in enumerate(_bits_ref(tensor)):
        word = ((index * 0x9E3779B97F4A7C15 + 0x5348415244494E49) & MASK) ^ bits
        total = (total + _mix64_ref(word)) & MASK
    header = f"shardinit-fp1\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode()
    return hashlib.sha256(header + total.to_bytes(8, "little")).hexdigest()[:16]


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((37, 53), torch.float32),
        ((3, 4, 5), torch.bfloat16),
        ((17,), torch.float64),
        ((6, 7), torch.float16),
        ((), torch.float32),
        ((0, 4), torch.float32),
    ],
)
def test_matches_reference(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    tensor = (torch.randn(shape, generator=torch.Generator().manual_seed(7)) * 3).to(dtype)
    assert fingerprint(tensor) == reference_fingerprint(tensor)


def test_known_value() -> None:
    # Pins format fp1: any change of the hash, the header or the digest length fails here.
    tensor = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert fingerprint(tensor) == reference_fingerprint(tensor)
    assert fingerprint(tensor) == "ae3ed16ceea00847"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_single_element_change_changes_digest(dtype: torch.dtype) -> None:
    base = torch.randn(64, 33, generator=torch.Generator().manual_seed(1)).to(dtype)
    digest = fingerprint(base)
    seen = {digest}
    for flat_index in (0, 1, 1000, base.numel() - 1):
        changed = base.clone()
        bits = changed.view(-1).view(
            {2: torch.int16, 4: torch.int32, 8: torch.int64}[changed.element_size()]
        )
        bits[flat_index] ^= 1  # flip the lowest mantissa bit
        seen.add(fingerprint(changed))
    assert len(seen) == 5
    zero = torch.zeros(4, dtype=dtype)
    negative_zero = zero.clone()
    negative_zero[2] = -0.0
    assert fingerprint(zero) != fingerprint(negative_zero)


def test_swapping_elements_changes_digest() -> None:
    base = torch.arange(12, dtype=torch.float32)
    swapped = base.clone()
    swapped[[3, 8]] = swapped[[8, 3]]
    assert fingerprint(base) != fingerprint(swapped)


def test_depends_on_global_shape_and_dtype() -> None:
    base = torch.randn(4, 6, generator=torch.Generator().manual_seed(2))
    assert fingerprint(base) != fingerprint(base.reshape(6, 4))
    assert fingerprint(base) != fingerprint(base.view(torch.int32))
    assert fingerprint(base) == fingerprint(base.clone())


def test_non_contiguous_input_is_read_by_logical_index() -> None:
    base = torch.randn(5, 8, generator=torch.Generator().manual_seed(3))
    assert fingerprint(base.t()) == fingerprint(base.t().contiguous())


def test_chunking_does_not_change_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(4))
    expected = reference_fingerprint(tensor)
    for chunk in (1, 3, 7, 20, 1000):
        monkeypatch.setattr(fp_module, "_CHUNK", chunk)
        assert fingerprint(tensor) == expected, chunk


def _region_sum(full: torch.Tensor, index_lists: list[list[int]]) -> int:
    local = full[torch.meshgrid(*[torch.tensor(ix) for ix in index_lists], indexing="ij")]
    return fp_module._partial_sum(
        local, full.shape, [torch.tensor(ix, dtype=torch.int64) for ix in index_lists]
    )


@pytest.mark.parametrize(
    "layout",
    [
        # rows split 3 ways as torch.chunk does
        [[[0, 1, 2], list(range(6))], [[3, 4, 5], list(range(6))], [[6], list(range(6))]],
        # a 2x2 grid of boxes
        [
            [[0, 1, 2, 3], [0, 1, 2]],
            [[0, 1, 2, 3], [3, 4, 5]],
            [[4, 5, 6], [0, 1, 2]],
            [[4, 5, 6], [3, 4, 5]],
        ],
        # strided (non-contiguous) row sets, as _StridedShard can give
        [[[0, 2, 4, 6], list(range(6))], [[1, 3, 5], list(range(6))]],
    ],
)
def test_partial_sums_over_any_partition_give_full_digest(layout: list[list[list[int]]]) -> None:
    full = torch.randn(7, 6, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    total = sum(_region_sum(full, region) for region in layout) & MASK
    assert fp_module._digest(full.dtype, full.shape, total) == fingerprint(full)


def test_fingerprint_model_plain_and_digest() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    shardinit.materialize(model, seed=11)
    summary = fingerprint_model(model)
    assert list(summary) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert summary["0.weight"] == fingerprint(model[0].weight)
    assert summary["1.weight"] == fingerprint(torch.ones(3))
    assert model_digest(summary) == model_digest(list(summary.items()))
    changed = dict(summary, **{"1.bias": summary["1.weight"]})
    assert model_digest(changed) != model_digest(summary)


# ------------------------------------------------------------------ distributed (4 ranks)


@gloo_scenario(4)
def layouts_scenario(rank: int, world: int) -> dict[str, Any]:
    """Each case: a full tensor, identical on every rank, turned into a DTensor with a given
    mesh and placements; the DTensor's fingerprint must equal the full tensor's."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.placement_types import Replicate, Shard, _StridedShard

    from shardinit._integration.placements import local_runs
    from shardinit.cli.transformer import build_model

    mesh1 = init_device_mesh("cpu", (4,))
    mesh2 = init_device_mesh("cpu", (2, 2))
    cases: list[tuple[str, Any, tuple[Any, ...], tuple[int, ...], torch.dtype]] = [
        ("1d-shard0-uneven", mesh1, (Shard(0),), (7, 5), torch.float32),
        ("1d-shard1", mesh1, (Shard(1),), (3, 9), torch.bfloat16),
        ("1d-replicate", mesh1, (Replicate(),), (4, 4), torch.float32),
        ("1d-more-ranks-than-rows", mesh1, (Shard(0),), (2, 3), torch.float64),
        ("2d-shard0-shard1", mesh2, (Shard(0), Shard(1)), (5, 7), torch.float32),
        ("2d-replicate-shard0", mesh2, (Replicate(), Shard(0)), (6, 2), torch.float32),
        ("2d-strided", mesh2, (_StridedShard(0, split_factor=2), Shard(0)), (10, 3), torch.float32),
        ("2d-shard1-twice", mesh2, (Shard(1), Shard(1)), (2, 9), torch.float16),
    ]
    results: dict[str, Any] = {}
    for name, mesh, placements, shape, dtype in cases:
        full = torch.randn(shape, generator=torch.Generator().manual_seed(len(name))).to(dtype)
        runs = local_runs(shape, tuple(mesh.shape), tuple(mesh.get_coordinate()), placements)
        index = [
            torch.tensor([i for a, b in dim for i in range(a, b)], dtype=torch.long) for dim in runs
        ]
        local = full[torch.meshgrid(*index, indexing="ij")].contiguous()
        dtensor = DTensor.from_local(
            local, mesh, placements, run_check=False, shape=full.shape, stride=full.stride()
        )
        assert torch.equal(dtensor.full_tensor(), full), name
        sharded = fingerprint(dtensor)
        if local.numel() and rank == 3:
            local.view(-1)[0] += 1  # one element on one rank
        changed = fingerprint(dtensor)
        results[name] = {
            "sharded": sharded,
            "full": fingerprint(full),
            "changed": changed,
            "rank3_holds": bool(local.numel()),
        }
    # An FSDP2 model materialized by shardinit vs the same model materialized whole.
    model = build_model("tiny")
    for block in model.layers:
        fully_shard(block, mesh=mesh1)
    fully_shard(model, mesh=mesh1)
    shardinit.materialize(model, seed=5)
    plain = shardinit.materialize(build_model("tiny"), seed=5)
    results["model"] = {"sharded": fingerprint_model(model), "plain": fingerprint_model(plain)}
    return results


@pytest.mark.distributed
def test_dtensor_layouts_on_four_ranks() -> None:
    results = rank_results(4, layouts_scenario)
    failed = [rank["<scenario>"] for rank in results if "<scenario>" in rank]
    assert not failed, failed[0]
    for name, case in results[0].items():
        if name == "model":
            continue
        assert case["sharded"] == case["full"], name
        # every rank reports the same (all-reduced) value
        assert all(r[name]["sharded"] == case["sharded"] for r in results), name
        holds = results[3][name]["rank3_holds"]
        replicated_on_rank3 = name in ("1d-replicate", "2d-replicate-shard0")
        if holds and not replicated_on_rank3:
            assert case["changed"] != case["full"], name
        else:
            # rank 3's copy is not the counted one (or it holds nothing)
            assert case["changed"] == case["full"], name
    model = results[0]["model"]
    assert model["sharded"] == model["plain"]
    assert len(model["sharded"]) == 21
