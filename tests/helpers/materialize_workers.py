"""Multi-process harness for the materialize tests (gloo on CPU, real torch.distributed).

``run_group(world, scenario_fn)`` spawns ``world`` processes; each joins a gloo group,
runs every check of ``scenario_fn`` (which returns ``{check name: error or None}``), and
writes its results to a JSON file. The parent merges the ranks' results, so one spawned
group serves many test functions (spawning costs seconds on a 2-core machine).
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import socket
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import shardinit
from shardinit import init
from shardinit._launch import exit_worker

Checks = dict[str, str | None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _entry(
    rank: int, world: int, port: int, out_dir: str, scenario: Callable[..., Checks], args: Any
) -> None:
    faulthandler.enable()  # a native abort prints every thread's Python stack
    torch.set_num_threads(1)
    shardinit.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        try:
            checks = scenario(rank, world, *args)
        except Exception:
            checks = {"<scenario>": traceback.format_exc()}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
            json.dump(checks, handle)
    finally:
        dist.destroy_process_group()
    exit_worker(0)


def run_group(world: int, scenario: Callable[..., Checks], *args: Any) -> dict[str, list[str]]:
    """Runs ``scenario`` on ``world`` ranks; returns, per check, the errors of all ranks
    (an empty list when every rank passed)."""
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(
            _entry,
            args=(world, free_port(), out_dir, scenario, args),
            nprocs=world,
            join=True,
        )
        merged: dict[str, list[str]] = {}
        for rank in range(world):
            with open(os.path.join(out_dir, f"rank{rank}.json")) as handle:
                for name, error in json.load(handle).items():
                    merged.setdefault(name, [])
                    if error is not None:
                        merged[name].append(f"rank {rank}: {error}")
        return merged


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
