"""shardinit against torch.nn.init (and numpy's Philox), measured in one run on one machine.

Prints a table of GB/s of float32 output and the ratio to the matching torch function for
a 64M-element tensor on all cores (median of several runs each), the time of
``init_shard`` for world 1, 2, 4, ..., 64, and the peak RSS of a process that generates
one shard. Ratios are what matter: on a shared machine absolute numbers move with the
load, ratios measured in the same run much less.

Usage: ``python benches/compare_torch.py [--numel N] [--repeats R] [--quick]``
(``make bench`` runs it with the defaults).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

import shardinit
from shardinit import init

SEED = 1234
NAME = "layers.0.mlp.w1.weight"


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: page faults, thread pools, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        model = fields.get("Model name", model).strip()
        flags = fields.get("Flags", "")
        simd = [f for f in ("avx512f", "avx2", "fma") if f in flags.split()]
        model += f" ({', '.join(simd) or 'no AVX'})"
    except (OSError, subprocess.CalledProcessError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{model}; {os.cpu_count()} logical CPUs; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); numpy {np.__version__}; "
        f"shardinit backend {shardinit._core.backend}, {shardinit.get_num_threads()} threads; "
        f"load average at start {load:.2f}"
    )


def throughput_table(numel: int, repeats: int) -> list[tuple[str, float, float]]:
    """Rows (name, GB/s, ratio to the reference named in the row)."""
    shape = (numel // 4096, 4096)
    bytes_f32 = numel * 4
    out = torch.empty(shape, dtype=torch.float32)
    out_bf16 = torch.empty(shape, dtype=torch.bfloat16)
    generator = np.random.Generator(np.random.Philox(SEED))
    flat_np = out.view(-1).numpy()

    def spec(initializer: object, dtype: torch.dtype = torch.float32) -> shardinit.ParamSpec:
        return shardinit.ParamSpec(NAME, shape, dtype, initializer, seed=SEED)

    def ours(initializer: object, target: torch.Tensor = out) -> Callable[[], object]:
        s = spec(initializer, target.dtype)
        return lambda: shardinit.init_shard(s, 0, 1, out=target)

    cases: list[tuple[str, Callable[[], object], str, Callable[[], object], int]] = [
        (
            "uniform_(-1, 1)",
            ours(init.uniform(-1.0, 1.0)),
            "torch.nn.init.uniform_",
            lambda: torch.nn.init.uniform_(out, -1.0, 1.0),
            bytes_f32,
        ),
        (
            "kaiming_uniform_(a=sqrt(5))",
            ours(init.kaiming_uniform(a=5**0.5)),
            "torch.nn.init.kaiming_uniform_",
            lambda: torch.nn.init.kaiming_uniform_(out, a=5**0.5),
            bytes_f32,
        ),
        (
            "normal_(0, 0.02)",
            ours(init.normal(0.0, 0.02)),
            "torch.nn.init.normal_",
            lambda: torch.nn.init.normal_(out, 0.0, 0.02),
            bytes_f32,
        ),
        (
            "trunc_normal_(0.02, +-2 std)",
            ours(init.trunc_normal(0.0, 0.02, -0.04, 0.04)),
            "torch.nn.init.trunc_normal_",
            lambda: torch.nn.init.trunc_normal_(out, 0.0, 0.02, -0.04, 0.04),
            bytes_f32,
        ),
        (
            "uniform_ (vs numpy Philox)",
            ours(init.uniform(0.0, 1.0)),
            "numpy Philox .random(float32)",
            lambda: generator.random(out=flat_np, dtype=np.float32),
            bytes_f32,
        ),
        (
            "normal_ (vs numpy Philox)",
            ours(init.normal(0.0, 1.0)),
            "numpy Philox .standard_normal(f32)",
            lambda: generator.standard_normal(out=flat_np, dtype=np.float32),
            bytes_f32,
        ),
        (
            "normal_ bfloat16 (per element)",
            ours(init.normal(0.0, 0.02), out_bf16),
            "shardinit normal_ float32",
            ours(init.normal(0.0, 0.02)),
            bytes_f32,  # elements/s shown as float32 bytes/s, so the ratio is per element
        ),
        (
            "uniform_ bfloat16 (per element)",
            ours(init.uniform(-1.0, 1.0), out_bf16),
            "shardinit uniform_ float32",
            ours(init.uniform(-1.0, 1.0)),
            bytes_f32,  # per element, as above
        ),
        (
            "constant_ (shardinit zeros)",
            ours(init.zeros()),
            "torch.Tensor.fill_ (write limit)",
            lambda: out.fill_(0.25),
            bytes_f32,
        ),
    ]
    rows = []
    for name, ours_fn, ref_name, ref_fn, nbytes in cases:
        # Interleave ours and the reference so both see the same load.
        t_ours, t_ref = [], []
        for _ in range(repeats):
            t_ours.append(median_seconds(ours_fn, 1))
            t_ref.append(median_seconds(ref_fn, 1))
        ours_gbs = nbytes / statistics.median(t_ours) / 1e9
        ref_gbs = nbytes / statistics.median(t_ref) / 1e9
        rows.append((f"shardinit {name}", ours_gbs, ours_gbs / ref_gbs))
        rows.append((f"  {ref_name}", ref_gbs, 1.0))
    return rows


def world_table(numel: int, repeats: int) -> list[tuple[int, float, float]]:
    """Rows (world, ms for rank 0's shard, full time / world in ms). The full tensor and
    the shard are timed alternately, so both medians see the same load."""
    shape = (numel // 4096, 4096)
    spec = shardinit.ParamSpec(NAME, shape, torch.float32, init.normal(0.0, 0.02), seed=SEED)
    full_buf = torch.empty(shape, dtype=torch.float32)
    rows = []
    for world in [1, 2, 4, 8, 16, 32, 64]:
        chunk = shardinit.box_of_shard(spec, 0, world)
        buf = torch.empty(tuple(b - a for a, b in chunk), dtype=torch.float32)
        t_full, t_shard = [], []
        for _ in range(repeats):
            t_full.append(median_seconds(lambda: shardinit.init_shard(spec, 0, 1, out=full_buf), 1))
            t_shard.append(
                median_seconds(lambda w=world, b=buf: shardinit.init_shard(spec, 0, w, out=b), 1)
            )
        full_ms = 1e3 * statistics.median(t_full)
        rows.append((world, 1e3 * statistics.median(t_shard), full_ms / world))
    return rows


RSS_CHILD = r"""
import resource, sys, torch, shardinit
from shardinit import init


def status_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


numel, world = int(sys.argv[1]), int(sys.argv[2])
shape = (numel // 4096, 4096)
spec = shardinit.ParamSpec("w", shape, torch.float32, init.normal(0.0, 0.02), seed=1)
shardinit.init_shard(spec, 0, 4096)  # warm up: thread pool, lazy imports
try:
    # Reset the peak-RSS counter (Linux >= 4.0), so the peak of `import torch` does
    # not hide the shard's.
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    before = status_kib("VmRSS")
    shard = shardinit.init_shard(spec, 0, world)
    peak = status_kib("VmHWM")
except OSError:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    shard = shardinit.init_shard(spec, 0, world)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(before * 1024, peak * 1024, shard.numel() * shard.element_size())
"""


def rss_table(numel: int) -> list[tuple[str, float, float, float]]:
    """Rows (what, shard MiB, peak RSS growth MiB, growth - shard MiB), each in a fresh
    process: peak RSS while generating the shard minus RSS just before."""
    rows = []
    for world in [1, 8, 64]:
        out = subprocess.run(
            [sys.executable, "-c", RSS_CHILD, str(numel), str(world)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        before, after, nbytes = (int(x) for x in out)
        grow = (after - before) / 2**20
        rows.append((f"init_shard(world={world})", nbytes / 2**20, grow, grow - nbytes / 2**20))
    return rows


def huge_virtual_tensor(repeats: int) -> list[tuple[str, int, float]]:
    """A shard of a 2^40-element (4 TiB float32) virtual tensor next to a shard of the
    same size of a 2^24-element tensor: (what, shard elements, ms)."""
    rows = []
    for what, shape, world in [
        ("shard 65535 of 65536 of a 2^40-element tensor", (1 << 24, 1 << 16), 1 << 16),
        ("the whole of a 2^24-element tensor", (1 << 8, 1 << 16), 1),
    ]:
        spec = shardinit.ParamSpec("huge", shape, torch.float32, init.normal(0.0, 0.02), seed=SEED)
        chunk = shardinit.box_of_shard(spec, world - 1, world)
        buf = torch.empty(tuple(b - a for a, b in chunk), dtype=torch.float32)
        ms = 1e3 * median_seconds(
            lambda s=spec, w=world, b=buf: shardinit.init_shard(s, w - 1, w, out=b), repeats
        )
        rows.append((what, buf.numel(), ms))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=64 * 2**20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="throughput table only")
    args = parser.parse_args()
    numel = args.numel - args.numel % 4096

    print(f"machine: {machine()}")
    print(
        f"tensor: {numel} float32 elements ({numel * 4 / 2**20:.0f} MiB), "
        f"median of {args.repeats} runs, shardinit and reference interleaved\n"
    )
    print(f"{'':46} {'GB/s':>8} {'ratio':>8}")
    for name, gbs, ratio in throughput_table(numel, args.repeats):
        ratio_text = f"{ratio:7.2f}x" if not name.startswith("  ") else ""
        print(f"{name:46} {gbs:8.3f} {ratio_text:>8}")
    if args.quick:
        return

    print("\ninit_shard(spec, rank=0, world), normal float32, same tensor (full timed alongside)")
    print(f"{'world':>6} {'ms':>10} {'full/world ms':>14} {'excess ms':>10}")
    for world, ms, ideal in world_table(numel, args.repeats):
        print(f"{world:6d} {ms:10.2f} {ideal:14.2f} {ms - ideal:10.2f}")

    print("\npeak RSS of a fresh process generating one shard (ru_maxrss)")
    print(f"{'':26} {'shard MiB':>10} {'RSS growth MiB':>15} {'extra MiB':>10}")
    for what, shard_mib, grow, extra in rss_table(numel):
        print(f"{what:26} {shard_mib:10.1f} {grow:15.1f} {extra:10.1f}")

    print("\nshard-proportional time for a huge virtual tensor (normal float32)")
    for what, elements, ms in huge_virtual_tensor(args.repeats):
        print(f"{what:48} {elements:10d} elements {ms:9.2f} ms")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"(benchmark process peak RSS {usage.ru_maxrss / 1024:.0f} MiB)")


if __name__ == "__main__":
    main()
