"""The static check of the compiled kernel: what its PTX may and must contain so that
the GPU executes exactly the IEEE operations the interpreter checked (docs/gpu.md).

:func:`compile_variant` compiles a kernel variant for an NVIDIA target without a GPU
(Triton bundles LLVM and ptxas); :func:`ptx_violations` lists what is wrong with a PTX
text. ``tests/cuda`` runs both in CI; ``tools/gpu_check.py`` runs the second on the
kernels a GPU machine actually compiled. A tool of the tests and the GPU check, so it
lives here, not in the wheel.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "ENTRY_POINTS",
    "KINDS",
    "compile_variant",
    "mul_hi_count",
    "ptx_violations",
    "sass_counts",
]

#: The kernel entry points and initializer kinds (every variant: kind x dtype x entry).
ENTRY_POINTS = ("flat", "rows")
KINDS = ("uniform", "normal", "trunc_normal")

# One PTX instruction per line: the opcode with its modifiers, e.g. "add.rn.f64".
_OPCODE = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.]*)", re.MULTILINE)
_FORBIDDEN_MODIFIERS = (".approx", ".ftz")
_FORBIDDEN_OPCODES = ("rcp", "rsqrt", "lg2", "ex2", "fma", "mad")


def _opcodes(ptx: str) -> list[str]:
    """The opcodes of the instructions in ``ptx`` (directives and labels left out)."""
    return [m.group(1) for m in _OPCODE.finditer(ptx) if not m.group(1).startswith(".")]


def ptx_violations(ptx: str) -> list[str]:
    """What in ``ptx`` could make device bits differ from the core's, one line each
    (empty: none). The rules:

    * no ``fma``/``mad`` on floats and nothing ``.approx`` or ``.ftz``; no ``rcp``,
      ``rsqrt``, ``lg2`` or ``ex2``;
    * every float64 ``add``/``sub``/``mul`` carries ``.rn`` (ptxas never fuses those);
    * divisions are only ``div.rn.f64`` and square roots only ``sqrt.rn.f64``;
    * no float conversion to bfloat16 or float16 (the kernel rounds with integers).
    """
    problems: list[str] = []
    for opcode in sorted(set(_opcodes(ptx))):
        parts = opcode.split(".")
        base, modifiers = parts[0], parts[1:]
        is_float = any(m in ("f32", "f64", "f16", "bf16", "f16x2", "bf16x2") for m in modifiers)
        if any(f".{m}" in _FORBIDDEN_MODIFIERS for m in modifiers):
            problems.append(f"{opcode}: approximate or flush-to-zero arithmetic")
        if base in _FORBIDDEN_OPCODES and (is_float or base != "mad"):
            problems.append(f"{opcode}: fused or approximate operation")
        if base in ("add", "sub", "mul") and "f64" in modifiers and "rn" not in modifiers:
            problems.append(f"{opcode}: float64 arithmetic without .rn (ptxas may fuse it)")
        if base in ("add", "sub", "mul") and "f32" in modifiers:
            problems.append(f"{opcode}: float32 arithmetic (the kernel computes in float64)")
        if base == "div" and is_float and opcode != "div.rn.f64":
            problems.append(f"{opcode}: a division other than div.rn.f64")
        if base == "sqrt" and opcode != "sqrt.rn.f64":
            problems.append(f"{opcode}: a square root other than sqrt.rn.f64")
        if base == "cvt" and any(m in ("f16", "bf16", "f16x2", "bf16x2") for m in modifiers):
            problems.append(f"{opcode}: a float conversion to a 16-bit type")
    return problems


def mul_hi_count(ptx: str) -> int:
    """Number of ``mul.hi.u32`` in ``ptx``: Philox's 20 per block (fewer per word where
    the compiler shares them; about 20 per word means Philox is recomputed per lane)."""
    return sum(1 for opcode in _opcodes(ptx) if opcode == "mul.hi.u32")


def compile_variant(
    kind: str,
    dtype: torch.dtype,
    entry: str,
    arch: int = 90,
    *,
    fusion: bool = False,
    blocks: int | None = None,
) -> Any:
    """Compiles one kernel variant for NVIDIA ``sm_<arch>`` on this machine (no GPU
    needed) with the launch's options (``fusion=True``: the negative control). Returns
    Triton's compiled kernel (``.asm["ptx"]``, ``.asm["cubin"]``)."""
    import triton  # type: ignore[import-untyped]
    from triton.backends.compiler import GPUTarget  # type: ignore[import-untyped]
    from triton.compiler import ASTSource  # type: ignore[import-untyped]

    from shardinit._cuda import kernel, launch

    floats = dict.fromkeys(launch.SAMPLER_ARGS, "fp64")
    out_type = {
        torch.float32: "*fp32",
        torch.float64: "*fp64",
        torch.bfloat16: "*i16",
        torch.float16: "*i16",
    }[dtype]
    if entry == "flat":
        fn = kernel.fill_flat_kernel
        signature = {"out_ptr": out_type, "key": "u64", "start": "u64", "count": "u64"}
        default_blocks = launch.FLAT_BLOCKS
    else:
        fn = kernel.fill_rows_kernel
        signature = {
            "out_ptr": out_type,
            "row_starts_ptr": "*i64",
            "key": "u64",
            "columns": "i64",
            "row_stride": "i64",
            "tiles_per_row": "i64",
        }
        default_blocks = launch.ROW_BLOCKS
    constexprs = {
        "KIND": launch.KIND_CODES[kind],
        "DTYPE": launch.DTYPE_CODES[dtype],
        "BLOCKS": blocks or default_blocks,
    }
    types = {**signature, **floats, **dict.fromkeys(constexprs, "constexpr")}
    signature = {name: types[name] for name in fn.arg_names}
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    options = {**launch.COMPILE_OPTIONS, "num_warps": launch.warps_for(constexprs["BLOCKS"])}
    if fusion:
        options["enable_fp_fusion"] = True
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def sass_counts(cubin: bytes) -> Counter[str]:
    """Counts of the floating-point SASS opcodes (``DFMA``, ``DADD``, ``FFMA``, ``MUFU.*``,
    ...) in ``cubin``, disassembled with the ``cuobjdump`` Triton bundles."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "kernel.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run(
            [str(tool), "-sass", str(path)], capture_output=True, text=True, check=True
        ).stdout
    return Counter(re.findall(r"\b(D(?:FMA|ADD|MUL)|F(?:FMA|ADD|MUL)|MUFU\.\w+)\b", sass))
