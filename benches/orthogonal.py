"""``init.orthogonal`` against ``torch.nn.init.orthogonal_`` on the same matrix sizes.

Each measurement runs in a fresh process, so that its peak memory is its own: the time
of one fill of a whole ``n x n`` float32 parameter (``shardinit.full``, which computes the
whole binary64 matrix, as every rank does) and the growth of the process's peak RSS
during that fill, for shardinit and for torch (LAPACK QR through ``torch.linalg.qr``),
both on the same threads (shardinit's default: ``torch.get_num_threads()``).

Usage: ``python benches/orthogonal.py [SIZES ...] [--repeats R]`` (default sizes 1024 and
4096, one repeat; the best of R is printed). Each side first runs once on 64 x 64 (library
loading, thread pools). On a shared machine absolute times move with the load; the ratio of
the two, measured back to back, much less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

import torch

import shardinit
from shardinit import init


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(which: str, n: int, repeats: int) -> dict[str, float]:
    """Times ``repeats`` fills (after allocating the output) and the peak RSS growth."""
    if which == "shardinit":
        spec = shardinit.ParamSpec("w", (n, n), torch.float32, init.orthogonal(), seed=0)
        out = torch.empty(n, n)

        def fill() -> None:
            shardinit.init_box(spec, ((0, n), (0, n)), out=out)

    else:
        out = torch.empty(n, n)

        def fill() -> None:
            torch.nn.init.orthogonal_(out)

    out.zero_()  # touch the output pages before the baseline
    if which == "torch":
        torch.nn.init.orthogonal_(torch.empty(64, 64))  # warm-up: loads LAPACK's code
    else:
        small = shardinit.ParamSpec("w", (64, 64), torch.float32, init.orthogonal(), seed=0)
        shardinit.full(small)  # warm-up: the core's thread pool
    before = _peak_rss_mib()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fill()
        times.append(time.perf_counter() - start)
    return {"seconds": min(times), "peak_growth_mib": _peak_rss_mib() - before}


def run_child(which: str, n: int, repeats: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", which, str(n), "--repeats", str(repeats)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("sizes", nargs="*", type=int, default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "N"))
    args = parser.parse_args()
    if args.child:
        which, n = args.child[0], int(args.child[1])
        print(json.dumps(measure_one(which, n, args.repeats)))
        return
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"shardinit backend {shardinit._core.backend}")  # fmt: skip
    print("| n x n | shardinit s | torch s | time ratio | shardinit peak +MiB | torch peak +MiB |")
    print("|---|---|---|---|---|---|")
    for n in args.sizes:
        ours = run_child("shardinit", n, args.repeats)
        theirs = run_child("torch", n, args.repeats)
        print(
            f"| {n} | {ours['seconds']:.2f} | {theirs['seconds']:.2f} | "
            f"{ours['seconds'] / theirs['seconds']:.1f}x | {ours['peak_growth_mib']:.0f} | "
            f"{theirs['peak_growth_mib']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
