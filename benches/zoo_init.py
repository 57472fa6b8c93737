"""How do Megatron-core and DeepSpeed ZeRO-3 initialize one large layer, and shardinit?

Measured on CPU with gloo, one process per rank (127.0.0.1 only). Per rank: the wall
time of building and initializing the layer, the peak RSS above the RSS just before it
(``getrusage`` peak minus ``/proc/self/statm`` current), the bytes broadcast, and a
fingerprint of the whole layer (layout-independent, ``shardinit.fingerprint``; the
partitions are gathered for it after the peak was recorded). Prints a markdown table
(the one in docs/megatron-deepspeed.md).

Usage:
    .venv/bin/python benches/zoo_init.py [--out-features 8192] [--in-features 4096] [--worlds 1,2]
        [--strategies megatron_cpu,megatron_shardinit,zero3_stock,zero3_shardinit]

Strategies (``torch.manual_seed(0)`` on every rank first):

* ``megatron_cpu``: ``ColumnParallelLinear`` with ``use_cpu_initialization=True``,
  ``perform_initialization=True`` (Megatron's CPU path: a full fp32 master per rank);
* ``megatron_shardinit``: the same inside ``shardinit.megatron.deferred_init()``, then
  ``shardinit.megatron.materialize``;
* ``zero3_stock``: ``nn.Linear`` under ``deepspeed.zero.Init`` (full init on every
  rank, broadcast from rank 0, partition);
* ``zero3_shardinit``: under ``shardinit.deepspeed.Init``, then ``shardinit.materialize``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path
from typing import Any

STRATEGIES = ["megatron_cpu", "megatron_shardinit", "zero3_stock", "zero3_shardinit"]
LABELS = {
    "megatron_cpu": "Megatron-core CPU init (use_cpu_initialization)",
    "megatron_shardinit": "Megatron-core + shardinit.megatron",
    "zero3_stock": "DeepSpeed zero.Init",
    "zero3_shardinit": "DeepSpeed shardinit.deepspeed.Init + materialize",
}


def _rss_now() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _megatron(strategy: str, out_features: int, in_features: int) -> Any:
    from megatron.core import tensor_parallel
    from megatron.core.transformer.transformer_config import TransformerConfig

    import shardinit.megatron

    world = int(os.environ["WORLD_SIZE"])
    config = TransformerConfig(
        num_layers=1,
        hidden_size=in_features,
        num_attention_heads=8,
        use_cpu_initialization=True,
        perform_initialization=True,
        tensor_model_parallel_size=world,
    )

    def build() -> Any:
        return tensor_parallel.ColumnParallelLinear(
            in_features,
            out_features,
            config=config,
            init_method=config.init_method,
            bias=False,
            gather_output=False,
        )

    if strategy == "megatron_cpu":
        return build()
    with shardinit.megatron.deferred_init():
        layer = build()
    shardinit.megatron.materialize(layer, seed=0, config=config)
    return layer


def _zero3(strategy: str, out_features: int, in_features: int) -> Any:
    import deepspeed
    import torch

    import shardinit
    import shardinit.deepspeed

    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    if strategy == "zero3_stock":
        with deepspeed.zero.Init(config_dict_or_path=config, remote_device="cpu"):
            return torch.nn.Linear(in_features, out_features, bias=False)
    with shardinit.deepspeed.Init(config_dict_or_path=config, remote_device="cpu"):
        layer = torch.nn.Linear(in_features, out_features, bias=False)
    shardinit.materialize(layer, seed=0)
    return layer


def _setup(strategy: str) -> None:
    if strategy.startswith("megatron"):
        from megatron.core import parallel_state

        parallel_state.initialize_model_parallel(int(os.environ["WORLD_SIZE"]), 1)
    else:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")


def _fingerprint(strategy: str, layer: Any) -> str:
    import torch
    import torch.distributed as dist

    import shardinit

    world = dist.get_world_size()
    if strategy.startswith("zero3"):
        return shardinit.fingerprint(layer.weight)  # reads the ZeRO-3 partitions in place
    pieces = [torch.empty_like(layer.weight) for _ in range(world)]
    dist.all_gather(pieces, layer.weight.detach())
    return shardinit.fingerprint(torch.cat(pieces))


def worker(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    for option in ("--strategy", "--out-features", "--in-features", "--out"):
        parser.add_argument(option, required=True)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    import torch
    import torch.distributed as dist

    from shardinit.cli._launch import exit_worker

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    # Imported before the measurement; only the one the strategy needs, so that a venv
    # with megatron-core alone (the Python 3.12 lane, docs/megatron-deepspeed.md) runs.
    if args.strategy.startswith("zero3"):
        import deepspeed  # noqa: F401
    else:
        import megatron.core.tensor_parallel  # noqa: F401

    broadcast_bytes = [0]
    original = dist.broadcast

    def counting(tensor: Any, *rest: Any, **kwargs: Any) -> Any:
        broadcast_bytes[0] += tensor.numel() * tensor.element_size()
        return original(tensor, *rest, **kwargs)

    dist.broadcast = counting
    torch.manual_seed(0)
    build = _megatron if args.strategy.startswith("megatron") else _zero3
    _setup(args.strategy)  # process groups: not part of the measurement
    before = _rss_now()
    start = time.perf_counter()
    layer = build(args.strategy, int(args.out_features), int(args.in_features))
    seconds = time.perf_counter() - start
    peak_above = max(0, _peak() - before)
    dist.broadcast = original
    digest = _fingerprint(args.strategy, layer)
    result = {
        "seconds": seconds,
        "peak_above": peak_above,
        "broadcast": broadcast_bytes[0],
        "digest": digest,
    }
    Path(args.out, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    exit_worker(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-features", type=int, default=8192)
    parser.add_argument("--in-features", type=int, default=4096)
    parser.add_argument("--worlds", default="1,2")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from shardinit.cli._launch import launch

    worlds = [int(w) for w in args.worlds.split(",")]
    mib = args.out_features * args.in_features * 4 / 2**20
    print(
        f"one {args.out_features} x {args.in_features} float32 layer ({mib:.0f} MiB); "
        "time / peak RSS above the RSS before / broadcast, maximum over ranks"
    )
    header = " | ".join(f"world {w}" for w in worlds)
    print(f"\n| strategy | {header} | same weights at every world size |")
    print("|---|" + "---|" * len(worlds) + "---|")
    for strategy in args.strategies.split(","):
        cells, digests = [], set()
        for world in worlds:
            ranks = launch(
                str(Path(__file__).resolve()),
                world,
                [
                    "--worker",
                    "--strategy",
                    strategy,
                    "--out-features",
                    str(args.out_features),
                    "--in-features",
                    str(args.in_features),
                ],
            )
            seconds = max(r["seconds"] for r in ranks)
            peak = max(r["peak_above"] for r in ranks) / 2**20
            sent = max(r["broadcast"] for r in ranks) / 2**20
            digests |= {r["digest"] for r in ranks}
            cells.append(f"{seconds:.2f} s / {peak:,.0f} MiB / {sent:,.0f} MiB")
        same = "yes" if len(digests) == 1 else f"no ({len(digests)} different)"
        print(f"| {LABELS[strategy]} | {' | '.join(cells)} | {same} |")
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker([arg for arg in sys.argv[1:] if arg != "--worker"])
    else:
        sys.exit(main())
