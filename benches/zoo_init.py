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
    .venv-py312/bin/python benches/zoo_init.py --model gpt [--layouts tp1,tp2,pp2]
        [--hidden 1024] [--vocab 8192] [--layers 2]

``--model gpt`` builds a whole Megatron-core ``GPTModel`` (the local layer spec, untied
embeddings, learned positions) with the two Megatron strategies at each TP/PP layout
(world = TP x PP), and compares the gathered weights by canonical name
(``shardinit.megatron.partition_names``): each tensor-parallel weight is all-gathered over
its TP group and put back in Megatron's stride order, and every full tensor is
fingerprinted, so the table says which strategy gives the same model at every layout.

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
#: The Megatron layouts of ``--model gpt``: name -> (TP, PP); world = TP x PP.
LAYOUTS = {"tp1": (1, 1), "tp2": (2, 1), "pp2": (1, 2), "tp2pp2": (2, 2)}
SEQUENCE = 64


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


def _gpt(strategy: str, tp: int, pp: int, dims: dict[str, int]) -> Any:
    """A GPTModel of this rank's stage, built (and filled) by the strategy."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    import shardinit.megatron

    config = TransformerConfig(
        num_layers=dims["layers"],
        hidden_size=dims["hidden"],
        num_attention_heads=8,
        use_cpu_initialization=True,
        perform_initialization=True,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        pipeline_dtype=torch.float32,
    )

    def build() -> Any:
        # Untied: with tied embeddings and PP > 1 the constructor copies the embedding to
        # the last stage with `weight.data.cuda()` and an all-reduce (no CPU path).
        return GPTModel(
            config,
            get_gpt_layer_local_spec(),
            vocab_size=dims["vocab"],
            max_sequence_length=SEQUENCE,
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=False,
        )

    if strategy == "megatron_cpu":
        return build()
    with shardinit.megatron.deferred_init():
        model = build()
    shardinit.megatron.materialize(model, seed=0, config=config)
    return model


def full_weights(model: Any) -> dict[str, Any]:
    """This rank's parameters in full, by canonical name: a tensor-parallel one is
    all-gathered over the TP group and put back in Megatron's stride order (its CPU
    path splits the master into ``world * stride`` pieces; rank r keeps ``r::world``)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    import shardinit.megatron

    group = parallel_state.get_tensor_model_parallel_group()
    world = dist.get_world_size(group)
    names = shardinit.megatron.partition_names(model)
    weights = {}
    for raw, param in model.named_parameters():
        full = param.detach()
        if getattr(param, "tensor_model_parallel", False) and world > 1:
            locals_ = [torch.empty_like(full) for _ in range(world)]
            dist.all_gather(locals_, full.contiguous(), group=group)
            dim, stride = param.partition_dim, getattr(param, "partition_stride", 1)
            chunks = [local.chunk(stride, dim) for local in locals_]
            full = torch.cat([chunks[r][j] for j in range(stride) for r in range(world)], dim)
        weights[names[raw]] = full
    return weights


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


def _setup(strategy: str, tp: int, pp: int) -> None:
    if strategy.startswith("megatron"):
        from megatron.core import parallel_state

        parallel_state.initialize_model_parallel(tp, pp)
    else:
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")


def _fingerprints(args: argparse.Namespace, built: Any) -> dict[str, str]:
    """Fingerprints of the whole tensors: one (``weight``) for a layer, every canonical
    name this rank holds for a model."""
    import torch
    import torch.distributed as dist

    import shardinit

    if args.model == "gpt":
        return {name: shardinit.fingerprint(t) for name, t in full_weights(built).items()}
    if args.strategy.startswith("zero3"):
        return {"weight": shardinit.fingerprint(built.weight)}  # the ZeRO-3 partitions
    pieces = [torch.empty_like(built.weight) for _ in range(dist.get_world_size())]
    dist.all_gather(pieces, built.weight.detach())
    return {"weight": shardinit.fingerprint(torch.cat(pieces))}


def _worker_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for option in ("--strategy", "--out"):
        parser.add_argument(option, required=True)
    parser.add_argument("--model", default="linear", choices=["linear", "gpt"])
    for option in ("--out-features", "--in-features", "--hidden", "--vocab", "--layers"):
        parser.add_argument(option, type=int, default=0)
    parser.add_argument("--tp", type=int, default=0)  # 0: the world size (layers)
    parser.add_argument("--pp", type=int, default=1)
    return parser.parse_args(argv)


def _build(args: argparse.Namespace) -> Any:
    if args.model == "gpt":
        dims = {"hidden": args.hidden, "vocab": args.vocab, "layers": args.layers}
        return _gpt(args.strategy, args.tp, args.pp, dims)
    build = _megatron if args.strategy.startswith("megatron") else _zero3
    return build(args.strategy, args.out_features, args.in_features)


def worker(argv: list[str]) -> None:
    args = _worker_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    import torch
    import torch.distributed as dist

    from shardinit.cli._launch import exit_worker

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    args.tp = args.tp or dist.get_world_size()
    # Imported before the measurement; only the one the strategy needs, so that a venv
    # with megatron-core alone (the Python 3.12 lane, docs/megatron-deepspeed.md) runs.
    if args.strategy.startswith("zero3"):
        import deepspeed  # noqa: F401
    else:
        import megatron.core.models.gpt
        import megatron.core.tensor_parallel  # noqa: F401

    broadcast_bytes = [0]
    original = dist.broadcast

    def counting(tensor: Any, *rest: Any, **kwargs: Any) -> Any:
        broadcast_bytes[0] += tensor.numel() * tensor.element_size()
        return original(tensor, *rest, **kwargs)

    dist.broadcast = counting
    torch.manual_seed(0)  # every rank alike, as Megatron's CPU path needs (see the docs)
    _setup(args.strategy, args.tp, args.pp)  # process groups: not part of the measurement
    before = _rss_now()
    start = time.perf_counter()
    built = _build(args)
    seconds = time.perf_counter() - start
    peak_above = max(0, _peak() - before)
    dist.broadcast = original
    result = {
        "seconds": seconds,
        "peak_above": peak_above,
        "broadcast": broadcast_bytes[0],
        "digests": _fingerprints(args, built),
    }
    Path(args.out, f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    exit_worker(0)


def _merged(ranks: list[dict[str, Any]]) -> dict[str, str]:
    """The ranks' fingerprints by name; the ranks of one TP group must agree."""
    merged: dict[str, str] = {}
    for rank, result in enumerate(ranks):
        for name, digest in result["digests"].items():
            if merged.setdefault(name, digest) != digest:
                raise SystemExit(f"rank {rank} gathered another {name} than a rank before it")
    return merged


def _differences(per_layout: list[dict[str, str]]) -> list[str]:
    """The names whose tensor is not the same at every layout (or not held at one)."""
    names = set().union(*per_layout)
    return sorted(n for n in names if len({layout.get(n) for layout in per_layout}) > 1)


def _run(script: str, world: int, strategy: str, extra: list[str]) -> list[dict[str, Any]]:
    from shardinit.cli._launch import launch

    return launch(script, world, ["--worker", "--strategy", strategy, *extra], timeout=1800)


def _layer_table(args: argparse.Namespace, script: str) -> None:
    worlds = [int(w) for w in args.worlds.split(",")]
    mib = args.out_features * args.in_features * 4 / 2**20
    print(
        f"one {args.out_features} x {args.in_features} float32 layer ({mib:.0f} MiB); "
        "time / peak RSS above the RSS before / broadcast, maximum over ranks"
    )
    header = " | ".join(f"world {w}" for w in worlds)
    print(f"\n| strategy | {header} | same weights at every world size |")
    print("|---|" + "---|" * len(worlds) + "---|")
    shape = ["--out-features", str(args.out_features), "--in-features", str(args.in_features)]
    for strategy in args.strategies.split(","):
        cells, digests = [], []
        for world in worlds:
            ranks = _run(script, world, strategy, shape)
            seconds = max(r["seconds"] for r in ranks)
            peak = max(r["peak_above"] for r in ranks) / 2**20
            sent = max(r["broadcast"] for r in ranks) / 2**20
            digests.append(_merged(ranks))
            cells.append(f"{seconds:.2f} s / {peak:,.0f} MiB / {sent:,.0f} MiB")
        same = "yes" if not _differences(digests) else "no"
        print(f"| {LABELS[strategy]} | {' | '.join(cells)} | {same} |")


def _against_first(layouts: list[str], digests: list[dict[str, str]]) -> tuple[str, list[str]]:
    """Per later layout, whether every tensor equals the first layout's; the names that
    differ."""
    cells, differ = [], []
    for layout, held in zip(layouts[1:], digests[1:], strict=True):
        names = _differences([digests[0], held])
        total = len(set(digests[0]) | set(held))
        cells.append(f"{layout.upper()} {'yes' if not names else f'no ({len(names)} of {total})'}")
        differ += [f"{layout.upper()} {name}" for name in names]
    return ", ".join(cells), differ


def _gpt_table(args: argparse.Namespace, script: str) -> None:
    layouts = args.layouts.split(",")
    dims = ["--model", "gpt", "--hidden", str(args.hidden), "--vocab", str(args.vocab)]
    dims += ["--layers", str(args.layers)]
    print(
        f"GPTModel, {args.layers} layers, hidden {args.hidden}, vocab {args.vocab}, float32; "
        "per rank (rank 0, 1, ...): time s / peak RSS above the RSS before, MiB"
    )
    header = " | ".join(layout.upper() for layout in layouts)
    print(f"\n| strategy | {header} | same tensors as at {layouts[0].upper()} |")
    print("|---|" + "---|" * len(layouts) + "---|")
    notes = []
    for strategy in args.strategies.split(","):
        cells, digests = [], []
        for layout in layouts:
            tp, pp = LAYOUTS[layout]
            ranks = _run(script, tp * pp, strategy, [*dims, "--tp", str(tp), "--pp", str(pp)])
            if any(r["broadcast"] for r in ranks):
                notes.append(f"{strategy} at {layout} broadcast {ranks[0]['broadcast']} bytes")
            digests.append(_merged(ranks))
            seconds = ", ".join(f"{r['seconds']:.2f}" for r in ranks)
            peaks = ", ".join(f"{r['peak_above'] / 2**20:,.0f}" for r in ranks)
            cells.append(f"{seconds} s / {peaks} MiB")
        same, differ = _against_first(layouts, digests)
        print(f"| {LABELS[strategy]} | {' | '.join(cells)} | {same} |")
        if differ:
            notes.append(f"{LABELS[strategy]}, not as at {layouts[0].upper()}: {', '.join(differ)}")
    if not any("broadcast" in note for note in notes):
        notes.append("nothing was broadcast")
    print("\n".join(["", *notes]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="linear", choices=["linear", "gpt"])
    parser.add_argument("--out-features", type=int, default=8192)
    parser.add_argument("--in-features", type=int, default=4096)
    parser.add_argument("--worlds", default="1,2")
    parser.add_argument("--layouts", default="tp1,tp2,pp2", help=f"of {', '.join(LAYOUTS)}")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--strategies", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    script = str(Path(__file__).resolve())
    if args.model == "gpt":
        args.strategies = args.strategies or "megatron_cpu,megatron_shardinit"
        _gpt_table(args, script)
    else:
        args.strategies = args.strategies or ",".join(STRATEGIES)
        _layer_table(args, script)
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker([arg for arg in sys.argv[1:] if arg != "--worker"])
    else:
        sys.exit(main())
