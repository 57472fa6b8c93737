"""The GPU check of shardinit's device kernel (docs/gpu.md), prepared for the few minutes
a GPU machine is available: one run, under 6 minutes, that

1. prints the GPU, its compute capability, driver, clocks, and the torch / Triton versions;
2. checks bits: the kernel against the host path for every dtype x initializer, random
   boxes and flat ranges and one tensor of 2^28 elements; the committed golden SHA-256
   digests (rust/core/tests/golden_digests.rs) computed on the GPU; the PTX rules on the
   kernels compiled there; the bad-input matrix with ``device="cuda"``; CPU offload
   (FSDP2 ``CPUOffloadPolicy`` pinned and not on a CUDA mesh, FSDP1 ``CPUOffload``:
   shards on the CPU, the whole model's bits, a forward and backward);
3. measures speed on 2^28-element tensors with CUDA events (median of 10 after warm-up)
   against ``fill_`` and torch's own generators in the same run, and writes the table
   (markdown and JSON) to ``--out`` (default ``$OUT``) for docs/performance.md.

The machine may have no network and its own torch and Triton: install the built abi3
wheel without dependencies next to them (``--wheel`` does ``pip install --no-deps
--target``, puts the directory first on ``sys.path`` and runs the check in a child).

Usage:
    python tools/gpu_check.py --wheel target/wheels/shardinit-*.whl [--out DIR]
    python tools/gpu_check.py --dry-run     # no GPU: parse, plan, host golden digests
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GOLDEN_FILE = REPO / "rust" / "core" / "tests" / "golden_digests.rs"
BIG = 2**28
REPEATS = 10
CHILD_FLAG = "SHARDINIT_GPU_CHECK_CHILD"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="the built abi3 wheel to install (no deps)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("OUT", "gpu_check_out")),
        help="folder for the results (default: $OUT)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="no GPU: parse inputs and print the plan"
    )
    parser.add_argument(
        "--elements", type=int, default=BIG, help="elements of the big tensors (2^28)"
    )
    return parser.parse_args(argv)


def install_wheel_and_rerun(wheel: Path) -> int:
    """``pip install --no-deps --target`` the wheel and run this script again with the
    target directory first on PYTHONPATH (the machine's torch and Triton stay)."""
    target = Path(tempfile.mkdtemp(prefix="shardinit-wheel-"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
    )
    env = {**os.environ, CHILD_FLAG: "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
    argv, rest = [], iter(sys.argv[1:])
    for arg in rest:
        if arg == "--wheel":
            next(rest, None)  # and its value
        elif not arg.startswith("--wheel="):
            argv.append(arg)
    return subprocess.run([sys.executable, __file__, *argv], env=env, check=False).returncode


# --- golden digests ------------------------------------------------------------------


def golden_table(path: Path = GOLDEN_FILE) -> dict[tuple[int, str], str]:
    """(case index, dtype) -> first 16 hex digits, parsed from the Rust test's GOLDEN."""
    text = path.read_text()
    body = text[text.index("const GOLDEN") :]
    body = body[: body.index("];")]
    rows = re.findall(r'\((\d+),\s*"(\w+)",\s*"([0-9a-f]{16})"\)', body)
    return {(int(i), dtype): digest for i, dtype, digest in rows}


def golden_cases() -> list[tuple[str, tuple[int, ...], Any]]:
    """The cases of rust/core/tests/golden_digests.rs (seed 1234), restated; the host
    digests are checked against the committed table first, so a drift here shows."""
    from shardinit import init

    return [
        ("layers.0.attention.wq.weight", (257, 389), init.uniform(-0.0625, 0.0625)),
        ("layers.0.mlp.w1.weight", (311, 331), init.normal(0.0, 0.02)),
        ("tok_embeddings.weight", (100_003,), init.trunc_normal(0.0, 0.02, -0.04, 0.04)),
        ("tail.weight", (4099,), init.trunc_normal(0.0, 1.0, 5.0, 9.0)),
        ("norm.weight", (1000,), init.constant(1.0)),
    ]


DTYPE_NAMES = {"f32": "float32", "f64": "float64", "bf16": "bfloat16", "f16": "float16"}


def digest_of(tensor: Any) -> str:
    """First 16 hex digits of the SHA-256 of the tensor's little-endian bytes."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    as_bytes = flat.view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(as_bytes).hexdigest()[:16]


def golden_digests(device: str) -> list[str]:
    """The golden cases filled on ``device``; the mismatches with the committed table."""
    import torch

    import shardinit

    table = golden_table()
    problems = []
    for index, (name, shape, initializer) in enumerate(golden_cases()):
        for short, dtype_name in DTYPE_NAMES.items():
            dtype = getattr(torch, dtype_name)
            spec = shardinit.ParamSpec(name, shape, dtype, initializer, seed=1234)
            got = digest_of(shardinit.full(spec, device=device))
            if got != table[(index, short)]:
                problems.append(f"golden {device} case {index} {short}: {got}")
    return problems


# --- bits ----------------------------------------------------------------------------


def bits_equal(a: Any, b: Any) -> bool:
    import torch

    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.cpu().view(view), b.cpu().view(view)))


def initializer_matrix() -> list[tuple[str, Any]]:
    from shardinit import init

    return [
        ("uniform", init.uniform(-3.0, 5.0)),
        ("normal", init.normal(0.25, 2.0)),
        ("trunc_normal", init.trunc_normal(std=0.02)),
        ("trunc_normal_far", init.trunc_normal(0.0, 1.0, 30.0, 31.0)),
        ("trunc_normal_r5", init.trunc_normal(0.0, 1.0, 7.0, 9.0)),
        ("kaiming_uniform", init.kaiming_uniform(a=5**0.5)),
        ("constant", init.constant(0.1)),
    ]


def check_bits(elements: int) -> list[str]:
    """Kernel vs host path: every dtype x initializer (flat, shards, random boxes) and one
    big tensor. Returns the mismatches."""
    import torch

    import shardinit

    problems = []
    rng = random.Random(0)
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for label, initializer in initializer_matrix():
            spec = shardinit.ParamSpec(f"check.{label}", (1001, 4099), dtype, initializer, seed=5)
            start = rng.randrange(spec.numel // 2)
            stop = start + rng.randrange(1, 300_000)
            if not bits_equal(
                shardinit.init_flat(spec, start, stop, device="cuda"),
                shardinit.init_flat(spec, start, stop),
            ):
                problems.append(f"flat {dtype} {label} [{start}, {stop})")
            for _ in range(3):
                box = []
                for size in spec.shape:
                    a = rng.randrange(size)
                    box.append((a, rng.randint(a + 1, size)))
                if not bits_equal(
                    shardinit.init_box(spec, box, device="cuda"), shardinit.init_box(spec, box)
                ):
                    problems.append(f"box {dtype} {label} {box}")
            for rank in range(3):
                if not bits_equal(
                    shardinit.init_shard(spec, rank, 3, dim=1, device="cuda"),
                    shardinit.init_shard(spec, rank, 3, dim=1),
                ):
                    problems.append(f"shard dim 1 {dtype} {label} rank {rank}")
    spec = shardinit.ParamSpec("check.big", (elements,), torch.float32, seed=9)
    if not bits_equal(shardinit.full(spec, device="cuda"), shardinit.full(spec)):
        problems.append(f"big tensor of {elements} float32 normal")
    carry = shardinit.ParamSpec("check.carry", (2**20, 2**20), torch.float32, seed=2**64 - 1)
    if not bits_equal(
        shardinit.init_flat(carry, 2**34 - 1000, 2**34 + 1000, device="cuda"),
        shardinit.init_flat(carry, 2**34 - 1000, 2**34 + 1000),
    ):
        problems.append("flat range across the 2^32-block carry")
    return problems


def compiled_kernels() -> list[Any]:
    """The kernels Triton compiled in this process (its JIT caches, across versions)."""
    from shardinit._cuda import kernel

    found = []
    for fn in (kernel.fill_flat_kernel, kernel.fill_rows_kernel):
        caches = getattr(fn, "device_caches", None) or {}
        for entry in caches.values():
            table = entry[0] if isinstance(entry, tuple) else entry
            found.extend(table.values())
        found.extend(getattr(fn, "cache", {}).get(0, {}).values())
    return found


def check_compiled_ptx() -> list[str]:
    sys.path.insert(0, str(REPO / "tests" / "helpers"))  # the PTX rules ship with the tests
    import kernel_ptx as ptx

    kernels = compiled_kernels()
    problems = [] if kernels else ["no compiled kernels found in Triton's JIT caches"]
    for compiled in kernels:
        problems += [f"ptx: {p}" for p in ptx.ptx_violations(compiled.asm["ptx"])]
    print(f"PTX rules checked on {len(kernels)} kernels compiled on this GPU")
    return problems


def check_bad_input() -> list[str]:
    """docs/errors.md's rows with ``device="cuda"``: today's errors whatever the backend."""
    import torch

    import shardinit

    spec = shardinit.ParamSpec("w", (4, 3), seed=0)
    calls: list[Callable[[], Any]] = [
        lambda: shardinit.init_box(spec, [(0, 5), (0, 3)], device="cuda"),
        lambda: shardinit.init_flat(spec, 5, 3, device="cuda"),
        lambda: shardinit.init_shard(spec, 3, 3, device="cuda"),
        lambda: shardinit.init_flat(spec, 0, 4, out=torch.empty(5, device="cuda")),
        lambda: shardinit.init_flat(
            spec, 0, 4, out=torch.empty(4, dtype=torch.float64, device="cuda")
        ),
        lambda: shardinit.init_box(
            spec, [(0, 3), (0, 3)], out=torch.empty(3, 6, device="cuda")[:, ::2]
        ),
        lambda: shardinit.init_flat(spec, 0, 4, device="cpu", out=torch.empty(4, device="cuda")),
    ]

    def outcome(call: Callable[[], Any]) -> str:
        try:
            call()
        except (TypeError, ValueError) as error:
            return f"{type(error).__name__}: {error}"
        return "no error"

    problems = []
    outcomes = {}
    for backend in ("host", "triton", "auto"):
        shardinit.set_cuda_backend(backend)
        outcomes[backend] = [outcome(call) for call in calls]
    shardinit.set_cuda_backend(None)
    if "no error" in outcomes["host"]:
        problems.append(f"bad input accepted: {outcomes['host']}")
    for backend in ("triton", "auto"):
        if outcomes[backend] != outcomes["host"]:
            problems.append(f"bad input under {backend!r}: {outcomes[backend]}")
    out = torch.full((4,), 7.0, device="cuda")
    shardinit.set_cuda_backend("triton")
    with contextlib.suppress(ValueError):
        shardinit.init_flat(spec, 0, 5, out=out)
    shardinit.set_cuda_backend(None)
    if not bool((out == 7.0).all()):
        problems.append("a refused fill wrote to out")
    return problems


# --- CPU offload (docs/how-fsdp-initializes.md, "CPU offload") -------------------------


def offload_lm() -> Any:
    """A tiny LM on meta with torchtitan-style init code (``trunc_normal_``, the output
    layer's with a 3-std cutoff); torch imported here, so that --dry-run needs none."""
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok_embeddings = nn.Embedding(37, 12)
            self.layers = nn.ModuleList(nn.Linear(12, 12) for _ in range(2))
            self.output = nn.Linear(12, 37, bias=False)

        def forward(self, tokens: Any) -> Any:
            x = self.tok_embeddings(tokens)
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return self.output(x)

        def init_weights(self) -> None:
            for layer in self.layers:
                nn.init.trunc_normal_(layer.weight, std=0.02, a=-0.04, b=0.04)
            std = 12**-0.5
            nn.init.trunc_normal_(self.output.weight, std=std, a=-3 * std, b=3 * std)

    with torch.device("meta"):
        return Tiny()


def _offload_problems(name: str, model: Any, whole: dict[str, Any], pinned: bool) -> list[str]:
    """Shards on the CPU (pinned if ``pinned``), gathered = the whole model, a forward."""
    import torch

    problems = []
    for pname, param in model.named_parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        if local.device.type != "cpu" or (pinned and not local.is_pinned()):
            problems.append(f"{name}: {pname} on {local.device}, pinned {local.is_pinned()}")
        full = param.full_tensor() if hasattr(param, "full_tensor") else param.detach()
        if not torch.equal(full.cpu(), whole[pname]):
            problems.append(f"{name}: {pname} differs from the whole model")
    model(torch.arange(8, device="cuda").reshape(2, 4)).float().mean().backward()
    return problems


def check_offload() -> list[str]:
    """FSDP2 with CPUOffloadPolicy (pinned and not) on a CUDA mesh, and FSDP1 with
    CPUOffload(offload_params=True), one process: shards on the CPU, the whole model's
    bits, a forward and backward (what torch 2.15 refuses on a CPU-only machine)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffload, CPUOffloadPolicy, fully_shard
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    import shardinit

    if not dist.is_initialized():
        store = dist.HashStore()
        dist.init_process_group("cpu:gloo,cuda:nccl", store=store, rank=0, world_size=1)
    whole_model = offload_lm()
    shardinit.materialize(whole_model, seed=4511, init_fn=whole_model.init_weights)
    whole = {n: p.detach() for n, p in whole_model.named_parameters()}
    problems = []
    mesh = init_device_mesh("cuda", (1,))
    for pinned in (True, False):
        model = offload_lm()
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, offload_policy=CPUOffloadPolicy(pin_memory=pinned))
        fully_shard(model, mesh=mesh, offload_policy=CPUOffloadPolicy(pin_memory=pinned))
        shardinit.materialize(model, seed=4511, init_fn=model.init_weights)
        problems += _offload_problems(f"FSDP2 pin_memory={pinned}", model, whole, pinned)
    meta = offload_lm()
    captured = shardinit.capture_init(meta, meta.init_weights)
    fsdp1 = FSDP(
        meta,
        device_id=torch.device("cuda", torch.cuda.current_device()),
        param_init_fn=shardinit.fsdp1_param_init_fn,
        cpu_offload=CPUOffload(offload_params=True),
        use_orig_params=True,
    )
    shardinit.materialize(fsdp1, seed=4511, init_fn=captured)
    with FSDP.summon_full_params(fsdp1):
        for raw, param in fsdp1.named_parameters():
            if not torch.equal(param.detach().cpu(), whole[shardinit.canonical_name(raw)]):
                problems.append(f"FSDP1 offload: {raw} differs from the whole model")
    fsdp1(torch.arange(8, device="cuda").reshape(2, 4)).float().mean().backward()
    dist.destroy_process_group()
    return problems


# --- speed ---------------------------------------------------------------------------


def time_ms(run: Callable[[], Any]) -> float:
    """Median milliseconds of ``REPEATS`` runs after two warm-up runs (CUDA events)."""
    import torch

    for _ in range(2):
        run()
    times = []
    for _ in range(REPEATS):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def speed_table(elements: int) -> list[dict[str, Any]]:
    import torch

    import shardinit
    from shardinit import init

    rows: list[dict[str, Any]] = []

    def add(case: str, dtype: Any, n: int, run: Callable[[], Any]) -> None:
        ms = time_ms(run)
        size = torch.empty((), dtype=dtype).element_size()
        rows.append(
            {
                "case": case,
                "dtype": str(dtype).removeprefix("torch."),
                "elements": n,
                "ms": round(ms, 3),
                "G elem/s": round(n / ms / 1e6, 2),
                "GB/s": round(n * size / ms / 1e6, 1),
            }
        )
        print(rows[-1])

    for dtype in (torch.float32, torch.bfloat16):
        buffer = torch.empty(elements, dtype=dtype, device="cuda")
        add("fill_", dtype, elements, lambda b=buffer: b.fill_(1.0))
        add("torch uniform_", dtype, elements, lambda b=buffer: b.uniform_())
        add("torch normal_", dtype, elements, lambda b=buffer: b.normal_())
        add(
            "torch trunc_normal_",
            dtype,
            elements,
            lambda b=buffer: torch.nn.init.trunc_normal_(b, std=0.02),
        )
        for label, initializer in (
            ("uniform", init.uniform(-1.0, 1.0)),
            ("normal", init.normal(0.0, 0.02)),
            ("trunc_normal", init.trunc_normal(std=0.02)),
        ):
            spec = shardinit.ParamSpec(f"speed.{label}", (elements,), dtype, initializer, seed=1)
            add(
                f"shardinit {label}",
                dtype,
                elements,
                lambda s=spec, b=buffer: shardinit.init_flat(s, 0, s.numel, out=b),
            )
        del buffer
    buffer64 = torch.empty(elements, dtype=torch.float64, device="cuda")
    spec64 = shardinit.ParamSpec("speed.normal64", (elements,), torch.float64, seed=1)
    add(
        "shardinit normal",
        torch.float64,
        elements,
        lambda b=buffer64: shardinit.init_flat(spec64, 0, elements, out=b),
    )
    del buffer64
    small = elements // 16
    host_buffer = torch.empty(small, dtype=torch.bfloat16, device="cuda")
    host_spec = shardinit.ParamSpec("speed.host", (small,), torch.bfloat16, seed=1)
    shardinit.set_cuda_backend("host")
    add(
        "host path normal",
        torch.bfloat16,
        small,
        lambda: shardinit.init_flat(host_spec, 0, small, out=host_buffer),
    )
    shardinit.set_cuda_backend(None)
    return rows


def ratios(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The ratios the targets are stated in (docs/gpu.md)."""
    rate = {(r["case"], r["dtype"]): r["G elem/s"] for r in rows}
    out = {}
    for dtype in ("float32", "bfloat16"):
        fill = rate[("fill_", dtype)]
        out[f"uniform {dtype} / torch uniform_"] = (
            rate[("shardinit uniform", dtype)] / rate[("torch uniform_", dtype)]
        )
        out[f"uniform {dtype} / fill_"] = rate[("shardinit uniform", dtype)] / fill
        for kind in ("normal", "trunc_normal"):
            out[f"{kind} {dtype} / torch normal_"] = (
                rate[(f"shardinit {kind}", dtype)] / rate[("torch normal_", dtype)]
            )
            out[f"{kind} {dtype} / host path"] = (
                rate[(f"shardinit {kind}", dtype)] / rate[("host path normal", "bfloat16")]
            )
    out["normal bfloat16 / normal float32"] = (
        rate[("shardinit normal", "bfloat16")] / rate[("shardinit normal", "float32")]
    )
    return {k: round(v, 3) for k, v in out.items()}


def write_results(out_dir: Path, report: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "gpu_check.json").write_text(json.dumps(report, indent=2))
    columns = ["case", "dtype", "elements", "ms", "G elem/s", "GB/s"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in report.get("speed", []):
        lines.append("| " + " | ".join(str(row[c]) for c in columns) + " |")
    (out_dir / "gpu_check.md").write_text("\n".join(lines) + "\n")


# --- main ----------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError as error:
        info["triton"] = f"not importable: {error}"
    import shardinit

    info["shardinit"] = shardinit.__version__
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu"] = props.name
        info["compute capability"] = f"{props.major}.{props.minor}"
        info["cuda runtime"] = torch.version.cuda
        query = "driver_version,clocks.sm,clocks.max.sm,clocks.mem"
        smi = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        info["driver, sm clock, max sm clock, mem clock"] = smi.stdout.strip() or smi.stderr.strip()
    return info


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.wheel and not os.environ.get(CHILD_FLAG):
        return install_wheel_and_rerun(args.wheel)
    started = time.monotonic()
    report: dict[str, Any] = {"environment": environment()}
    print(json.dumps(report["environment"], indent=2))
    problems = golden_digests("cpu")
    if args.dry_run:
        print(f"golden table: {len(golden_table())} digests; host digests: {problems or 'ok'}")
        print(
            "plan: bits (flat, boxes, shards, 2^28, carry), golden on cuda, PTX, bad input, "
            "CPU offload (FSDP2 pinned and not, FSDP1), speed"
        )
        return 1 if problems else 0
    import shardinit

    shardinit.set_cuda_backend("triton")  # the check is of the kernel: no silent fallback
    for name, check in (
        ("golden on cuda", lambda: golden_digests("cuda")),
        ("bits", lambda: check_bits(args.elements)),
        ("compiled PTX", check_compiled_ptx),
        ("bad input", check_bad_input),
        ("CPU offload", check_offload),
    ):
        found = check()
        print(f"{name}: {found or 'ok'}  ({time.monotonic() - started:.0f} s)")
        problems += found
    shardinit.set_cuda_backend("triton")
    report["speed"] = speed_table(args.elements)
    report["ratios"] = ratios(report["speed"])
    report["problems"] = problems
    report["seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report["ratios"], indent=2))
    write_results(args.out, report)
    print(f"{'FAILED' if problems else 'OK'} in {report['seconds']} s; results in {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
