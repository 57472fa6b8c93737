"""The cost of capturing a model's own init code, per parameter, against the same init
code run eagerly by torch, in the same run.

A model of many small parameters is the worst case for capture (issue 28: a model of 50k
unfused expert tensors spends its time in Python, per tensor, before generating
anything): ``--layers`` ``Linear(64, 64)`` modules initialized by ``normal_`` + ``zeros_``
each. For each case this measures

* torch: the init code run eagerly on a CPU model (built beforehand, not timed);
* capture: ``shardinit.capture_init`` on the meta model (the init code on stand-ins);
* materialize: ``shardinit.materialize(model, init_fn=captured)`` (plan, allocate and
  fill every parameter from the capture);
* both: ``materialize(model, init_fn=init_code)``, what a user calls;

interleaved, best of ``--repeats``, with the garbage collector as the process has it.
The ratio to torch's time is what to read (absolute times move with the machine's load);
issue 28 asks for at most 10x per parameter for ``both``.

Usage: ``python benches/capture.py [--layers N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import nn

import shardinit

Case = tuple[str, Callable[[nn.Module], None]]


def _normal_zeros(model: nn.Module) -> None:
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)


def _methods(model: nn.Module) -> None:
    # The tensor-method spelling (torchtitan, many research codebases).
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.normal_(0.0, 0.02)
                layer.bias.zero_()


def _trunc_scaled(model: nn.Module) -> None:
    # A truncated normal then a depth scaling, through .data (GPT-2 style).
    for index, layer in enumerate(model.modules()):
        if isinstance(layer, nn.Linear):
            nn.init.trunc_normal_(layer.weight, std=0.02, a=-0.04, b=0.04)
            layer.weight.data.mul_(1.0 / (1 + index % 4))
            nn.init.constant_(layer.bias, 0.0)


def _reset(model: nn.Module) -> None:
    # Each module's own reset_parameters (kaiming_uniform_ and a bias bound from the
    # fan-in): what model.apply(model._init_weights) often comes to.
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            layer.reset_parameters()


CASES: list[Case] = [
    ("normal_ + zeros_", _normal_zeros),
    ("tensor methods", _methods),
    ("trunc_normal_ + mul_", _trunc_scaled),
    ("reset_parameters", _reset),
]


def _model(layers: int, device: str) -> nn.Module:
    with torch.device(device):
        return nn.Sequential(*[nn.Linear(64, 64) for _ in range(layers)])


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _measure(code: Callable[[nn.Module], None], layers: int) -> dict[str, float]:
    eager = _model(layers, "cpu")
    meta = [_model(layers, "meta") for _ in range(3)]
    captured: list[shardinit.CapturedInit] = []
    return {
        "torch": _timed(lambda: code(eager)),
        "capture": _timed(
            lambda: captured.append(shardinit.capture_init(meta[0], lambda: code(meta[0])))
        ),
        "materialize": _timed(lambda: shardinit.materialize(meta[1], seed=0, init_fn=captured[0])),
        "both": _timed(
            lambda: shardinit.materialize(meta[2], seed=0, init_fn=lambda: code(meta[2]))
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2500, help="Linear(64, 64) modules")
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    params = 2 * options.layers
    _measure(_normal_zeros, 8)  # warm up: imports, first-call caches
    print(f"{params} parameters (Linear(64, 64) weight + bias), best of {options.repeats}")
    print(f"{'case':24s} {'torch':>9s} {'capture':>16s} {'materialize':>16s} {'both':>16s}")
    for name, code in CASES:
        best: dict[str, float] = {}
        for _ in range(options.repeats):
            for key, seconds in _measure(code, options.layers).items():
                best[key] = min(best.get(key, seconds), seconds)
        per = {key: seconds / params * 1e6 for key, seconds in best.items()}
        cells = [
            f"{per[k]:6.1f} us {per[k] / per['torch']:5.1f}x"
            for k in ("capture", "materialize", "both")
        ]
        print(f"{name:24s} {per['torch']:6.1f} us " + " ".join(f"{c:>16s}" for c in cells))


if __name__ == "__main__":
    main()
