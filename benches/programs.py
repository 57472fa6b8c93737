"""Captured init programs replayed by shardinit against the same init code run by torch.

Each case is a model's own init code: captured once on a meta module
(``shardinit.capture_init``), then written on the whole parameter (``Writer.full``,
world 1: what all ranks together compute) and, for torch, run eagerly on a real CPU
module of the same shape. Both sides run on the same threads (shardinit's default:
``torch.get_num_threads()``), interleaved, best of ``--repeats``; the ratio
shardinit / torch is what to read (absolute times move with the machine's load).

torch computes in float32 with its own vectorized libm; shardinit in binary64 with the
core's deterministic functions, rounded once (docs/stream-format.md §7): it pays for
bits that are the same on every CPU, thread count and layout, and for computing any
slice of the parameter alone.

Usage: ``python benches/programs.py [--repeats R]``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import torch
from torch import nn

import shardinit
from shardinit.shard import writer


def _fill_then_scale(w: torch.Tensor) -> None:
    # Mamba's out_proj: kaiming_uniform_, then divided by sqrt(layers) in place.
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    with torch.no_grad():
        w /= math.sqrt(48)


def _a_log(w: torch.Tensor) -> None:
    # Mamba's A_log: log(1..N) broadcast over the inner dim.
    n = w.shape[1]
    a = torch.arange(1, n + 1, dtype=torch.float32)[None, :].expand(w.shape[0], -1)
    with torch.no_grad():
        w.copy_(torch.log(a))


def _uniform_log(w: torch.Tensor) -> None:
    # Qwen3-Next's A_log, on a large tensor: uniform_(0.01, 16).log_().
    with torch.no_grad():
        w.uniform_(0.01, 16.0).log_()


def _sinusoids(w: torch.Tensor) -> None:
    # Whisper's positional table.
    length, channels = w.shape
    increment = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2))
    scaled = torch.arange(length).view(-1, 1) * inv.view(1, -1)
    with torch.no_grad():
        w.copy_(torch.cat([scaled.sin(), scaled.cos()], dim=1))


CASES: list[tuple[str, tuple[int, int], Callable[[torch.Tensor], None]]] = [
    ("fill, then / sqrt(48)", (4096, 4096), _fill_then_scale),
    ("log(arange) table", (8192, 128), _a_log),
    ("uniform_().log_()", (4096, 4096), _uniform_log),
    ("sinusoids (sin, cos, cat)", (16384, 1024), _sinusoids),
]


def _module(shape: tuple[int, int], device: str) -> nn.Module:
    module = nn.Module()
    module.w = nn.Parameter(torch.empty(shape, device=device))
    return module


def _best(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"threads: {torch.get_num_threads()}, best of {args.repeats}")
    print(f"{'init code':28s} {'shape':>13s} {'shardinit':>10s} {'torch':>10s} {'ratio':>6s}")
    for label, shape, init_fn in CASES:
        meta = _module(shape, "meta")
        record = shardinit.capture_init(meta, lambda m=meta, f=init_fn: f(m.w))["w"]
        real = _module(shape, "cpu")
        ours = _best(lambda r=record: writer().full(r, 0), 1)  # warm-up
        theirs = _best(lambda m=real, f=init_fn: f(m.w), 1)
        ours = _best(lambda r=record: writer().full(r, 0), args.repeats)
        theirs = _best(lambda m=real, f=init_fn: f(m.w), args.repeats)
        print(
            f"{label:28s} {shape!s:>13s} {ours * 1e3:8.1f}ms {theirs * 1e3:8.1f}ms "
            f"{ours / theirs:6.2f}"
        )


if __name__ == "__main__":
    main()
