"""The compiled device kernel executes exactly the IEEE operations the interpreter
checked: every variant (initializer kind x dtype x entry point) is compiled for NVIDIA
targets on this CPU-only machine (Triton bundles LLVM and ptxas) and its PTX checked
by ``kernel_ptx.ptx_violations`` (tests/helpers); a compile with fusion on is the negative
control, and the SASS of two variants is counted."""

from __future__ import annotations

import itertools
from unittest import mock

import pytest
import torch

pytest.importorskip("triton")

import kernel_ptx as ptx

from shardinit import ParamSpec, init
from shardinit._cuda import launch

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
SM90_VARIANTS = list(itertools.product(ptx.KINDS, DTYPES, ptx.ENTRY_POINTS))
OTHER_ARCH_VARIANTS = list(
    itertools.product([80, 100], ["normal", "trunc_normal"], DTYPES, ptx.ENTRY_POINTS)
)


def words_per_thread(entry: str) -> int:
    """Stream words one thread of a program covers (one Philox block per thread)."""
    blocks = launch.FLAT_BLOCKS if entry == "flat" else launch.ROW_BLOCKS
    return 4 * blocks // (32 * launch.warps_for(blocks))


def check_compiled(kind: str, dtype: torch.dtype, entry: str, arch: int) -> None:
    text = ptx.compile_variant(kind, dtype, entry, arch).asm["ptx"]
    assert ptx.ptx_violations(text) == []
    # Philox once per block: 20 mul.hi per block (the compiler may fold some), so about
    # 4-5 per word; about 20 per word would mean Philox recomputed per lane.
    per_word = ptx.mul_hi_count(text) / words_per_thread(entry)
    assert 3 <= per_word <= 6, per_word
    has_div = "div.rn.f64" in text
    assert has_div == (kind != "uniform"), "PhiInv's divisions, and only there"


@pytest.mark.parametrize(("kind", "dtype", "entry"), SM90_VARIANTS, ids=str)
def test_every_variant_compiles_to_exact_ieee_operations_for_sm90(
    kind: str, dtype: torch.dtype, entry: str
) -> None:
    check_compiled(kind, dtype, entry, 90)


@pytest.mark.slow
@pytest.mark.parametrize(("arch", "kind", "dtype", "entry"), OTHER_ARCH_VARIANTS, ids=str)
def test_normal_kinds_compile_to_exact_ieee_operations_for_sm80_and_sm100(
    arch: int, kind: str, dtype: torch.dtype, entry: str
) -> None:
    check_compiled(kind, dtype, entry, arch)


def test_fusion_on_is_caught() -> None:
    """The negative control: the same source compiled with fusion on has fma.rn.f64, and
    the check reports it."""
    text = ptx.compile_variant("normal", torch.float32, "flat", fusion=True).asm["ptx"]
    assert "fma.rn.f64" in text
    assert any("fma.rn.f64" in problem for problem in ptx.ptx_violations(text))


def test_ptx_rules_reject_each_forbidden_form() -> None:
    clean = "\tadd.rn.f64 \t%fd3, %fd1, %fd2;\n\tdiv.rn.f64 \t%fd4, %fd3, %fd1;\n"
    assert ptx.ptx_violations(clean) == []
    for line in (
        "fma.rn.f32 %f1, %f2, %f3, %f4;",
        "add.f64 %fd1, %fd2, %fd3;",
        "div.full.f32 %f1, %f2, %f3;",
        "sqrt.approx.f32 %f1, %f2;",
        "rcp.rn.f64 %fd1, %fd2;",
        "lg2.approx.ftz.f32 %f1, %f2;",
        "cvt.rn.bf16.f32 %rs1, %f1;",
        "mul.rn.f32 %f1, %f2, %f3;",
    ):
        assert ptx.ptx_violations(clean + f"\t{line}\n"), line


@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_sass_has_no_fused_arithmetic_beyond_division_and_sqrt(kind: str) -> None:
    """A uniform kernel has no DFMA at all; in normal's, every DFMA comes from the
    div.rn.f64 / sqrt.rn.f64 expansions (under 10 each), not from contracted
    arithmetic (fusion adds about 200)."""
    compiled = ptx.compile_variant(kind, torch.float32, "flat")
    counts = ptx.sass_counts(compiled.asm["cubin"])
    text = compiled.asm["ptx"]
    expansions = text.count("div.rn.f64") + text.count("sqrt.rn.f64")
    assert counts["DADD"] > 0, counts
    if kind == "uniform":
        assert counts["DFMA"] == 0 and counts["FFMA"] == 0, counts
    else:
        assert 0 < counts["DFMA"] <= 10 * expansions, (counts, expansions)


def test_every_launch_passes_fusion_off() -> None:
    """The launcher's options: each kernel launch gets enable_fp_fusion=False (Triton
    3.9's default is on)."""
    launches: list[dict[str, object]] = []

    class Recorder:
        def __getitem__(self, grid: tuple[int]) -> object:
            return lambda *args, **kwargs: launches.append(kwargs)

    spec = ParamSpec("w", (6, 10), torch.bfloat16, init.normal(), seed=0)
    with (
        mock.patch.object(launch.kernel, "fill_flat_kernel", Recorder()),
        mock.patch.object(launch.kernel, "fill_rows_kernel", Recorder()),
    ):
        launch.fill_flat(spec, 3, torch.empty(40, dtype=torch.bfloat16))
        launch.fill_box(spec, [(1, 5), (2, 9)], torch.empty(4, 7, dtype=torch.bfloat16))
    assert len(launches) == 2
    assert all(kwargs["enable_fp_fusion"] is False for kwargs in launches), launches
