"""Multi-process harness for the materialize tests (gloo on CPU, real torch.distributed).

``run_group(world, scenario_fn)`` starts ``world`` processes with the CLI's launcher
(:func:`shardinit.cli._launch.launch`, the project's one launcher); each runs this file
as a script, joins a gloo group, runs every check of ``scenario_fn`` (which returns
``{check name: error or None}``), and writes its results to a JSON file. The parent
merges the ranks' results, so one group serves many test functions (starting processes
costs seconds on a 2-core machine).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import inspect
import json
import math
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import shardinit
from shardinit import init
from shardinit.cli._launch import exit_worker, launch

Checks = dict[str, str | None]


def run_group(world: int, scenario: Callable[[int, int], Checks]) -> dict[str, list[str]]:
    """Runs ``scenario(rank, world)`` (a module-level function of a test module) on
    ``world`` ranks; returns, per check, the errors of all ranks (an empty list when
    every rank passed)."""
    # The ranks import the scenario's module from its file, with this process's
    # sys.path (as torch.multiprocessing's spawn would give them).
    where = ["--scenario-file", inspect.getfile(scenario), "--scenario", scenario.__qualname__]
    results = launch(
        str(Path(__file__).resolve()),
        world,
        [*where, "--module-name", scenario.__module__],
        env={"PYTHONPATH": os.pathsep.join(path for path in sys.path if path)},
    )
    merged: dict[str, list[str]] = {}
    for rank, checks in enumerate(results):
        for name, error in checks.items():
            merged.setdefault(name, [])
            if error is not None:
                merged[name].append(f"rank {rank}: {error}")
    return merged


def _load_scenario(path: str, module_name: str, qualname: str) -> Callable[[int, int], Checks]:
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    scenario: Callable[[int, int], Checks] = getattr(module, qualname)
    return scenario


def _rank_main(argv: list[str]) -> None:
    """One rank of :func:`run_group` (``RANK``/``WORLD_SIZE``/``MASTER_PORT`` from the
    launcher)."""
    parser = argparse.ArgumentParser()
    for option in ("--scenario-file", "--module-name", "--scenario", "--out"):
        parser.add_argument(option, required=True)
    args = parser.parse_args(argv)
    faulthandler.enable()  # a native abort prints every thread's Python stack
    torch.set_num_threads(1)
    shardinit.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        try:
            scenario = _load_scenario(args.scenario_file, args.module_name, args.scenario)
            checks = scenario(rank, world)
        except Exception:
            checks = {"<scenario>": traceback.format_exc()}
        Path(args.out, f"rank{rank}.json").write_text(json.dumps(checks))
    finally:
        dist.destroy_process_group()
    exit_worker(0)


def assert_check_passed(outcome: dict[str, list[str]], name: str) -> None:
    """Fails unless the scenario ran to its end and check ``name`` passed on every rank
    (``outcome`` as :func:`run_group` returns it)."""
    assert "<scenario>" not in outcome, outcome["<scenario>"]
    assert name in outcome, f"check {name} did not run: {sorted(outcome)}"
    assert outcome[name] == [], "\n".join(outcome[name])


def check(checks: Checks, name: str, fn: Callable[[], None]) -> None:
    """Runs ``fn``; records its assertion error (or any exception) under ``name``.

    Every rank must run the same collectives in the same order, so a failing check must
    not skip later ones: each check is self-contained.
    """
    try:
        fn()
        checks[name] = None
    except Exception:
        checks[name] = traceback.format_exc(limit=6)


def expect_equal(name: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype, f"{name}: dtype {actual.dtype} != {expected.dtype}"
    assert tuple(actual.shape) == tuple(expected.shape), f"{name}: shape differs"
    if not torch.equal(actual, expected):
        differ = (actual != expected).nonzero()
        raise AssertionError(f"{name}: {len(differ)} elements differ, first at {differ[:3]}")


# --------------------------------------------------------------------------- models


class Attention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(torch.tanh(self.wq(x)))


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim)
        self.ffn_norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, hidden)  # bias of `hidden` elements
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.w2(torch.relu(self.w1(self.ffn_norm(x))))


class TinyLM(nn.Module):
    """Uneven shapes on purpose: vocab 37, dim 12, hidden 3 (a bias smaller than the
    world), a tied output head."""

    def __init__(self, vocab: int = 37, dim: int = 12, hidden: int = 3, layers: int = 2) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim, padding_idx=5)
        self.layers = nn.ModuleList(Block(dim, hidden) for _ in range(layers))
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def kaiming_a5(shape: tuple[int, ...]) -> init.Initializer:
    """Linear/Conv default weight bound, by torch's own formula (torch.nn.init)."""
    fan_in = shape[1] * math.prod(shape[2:])
    gain = math.sqrt(2.0 / (1 + 5))
    bound = math.sqrt(3.0) * (gain / math.sqrt(fan_in))
    return init.uniform(-bound, bound)


def bias_default(fan_in: int) -> init.Initializer:
    bound = 1 / math.sqrt(fan_in)
    return init.uniform(-bound, bound)


def block_expected_defaults(prefix: str, dim: int, hidden: int) -> dict[str, init.Initializer]:
    """Expected torch.nn defaults of one ``Block`` whose names start with ``prefix``,
    written out independently of shardinit."""
    return {
        prefix + "attention_norm.weight": init.ones(),
        prefix + "attention.wq.weight": kaiming_a5((dim, dim)),
        prefix + "attention.wo.weight": kaiming_a5((dim, dim)),
        prefix + "ffn_norm.weight": init.ones(),
        prefix + "ffn_norm.bias": init.zeros(),
        prefix + "w1.weight": kaiming_a5((hidden, dim)),
        prefix + "w1.bias": bias_default(dim),
        prefix + "w2.weight": kaiming_a5((dim, hidden)),
        prefix + "w2.bias": bias_default(hidden),
    }


def tinylm_expected_defaults(model: TinyLM, dtype: torch.dtype) -> dict[str, init.Initializer]:
    """Expected torch.nn defaults of TinyLM, written out independently of shardinit."""
    dim = model.norm.normalized_shape[0]
    hidden = model.layers[0].w1.out_features
    expected: dict[str, init.Initializer] = {"tok_embeddings.weight": init.normal(0.0, 1.0)}
    for i in range(len(model.layers)):
        expected.update(block_expected_defaults(f"layers.{i}.", dim, hidden))
    expected["norm.weight"] = init.ones()
    return expected


def expected_full(
    name: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    initializer: init.Initializer,
    seed: int,
    zero_rows: tuple[int, ...] = (),
) -> torch.Tensor:
    full = shardinit.full(shardinit.ParamSpec(name, shape, dtype, initializer, seed=seed))
    for row in zero_rows:
        full[row] = 0
    return full


if __name__ == "__main__":
    _rank_main(sys.argv[1:])
