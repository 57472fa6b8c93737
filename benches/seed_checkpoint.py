"""How fast is a seed checkpoint written, against the disk and against torchtitan's recipe?

In one run, on the same disk (``--dir``), for a Llama-shaped model of ``--size-gb`` GB
of float32 (an embedding, then blocks of four attention and three MLP projections and
two norms, sized to the flag):

* ``disk zeros``: the same number of bytes of zeros written in 64 MiB blocks, then
  fsync (what the disk itself does);
* ``torchtitan recipe``: one process builds the model on the CPU with torch's init
  (torchtitan's ``--checkpoint.create_seed_checkpoint`` recipe) and ``dcp.save`` s it;
* ``shardinit safetensors`` / ``shardinit dcp``: ``shardinit.save_seed_checkpoint`` of
  the meta model with ``--workers`` writer processes (1: in this process), including
  each tensor's fingerprint for the manifest.

Each row: seconds, GB/s of checkpoint written, and the ratios of the shardinit rows to
the disk's and to the recipe's rate, measured in this run. ``--json PATH`` also writes
the numbers.

Usage:
    .venv/bin/python benches/seed_checkpoint.py [--size-gb 2] [--workers 1,2] [--dir DIR]
        [--json benches/results/seed_checkpoint.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

DIM = 2048
BLOCK = 64 * 2**20


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(DIM, 4 * DIM, bias=False), nn.Linear(DIM, 4 * DIM, bias=False)
        self.w2 = nn.Linear(4 * DIM, DIM, bias=False)
        self.attention_norm, self.ffn_norm = nn.LayerNorm(DIM), nn.LayerNorm(DIM)


class Model(nn.Module):
    """An embedding of 32k rows and as many blocks as ``size_gb`` allows (at least one)."""

    def __init__(self, size_gb: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(32768, DIM)
        block_bytes = 16 * DIM * DIM * 4
        count = max(1, round((size_gb * 1e9 - 32768 * DIM * 4) / block_bytes))
        self.layers = nn.ModuleList(Block() for _ in range(count))


def _nbytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def _disk_zeros(path: Path, nbytes: int) -> float:
    block = bytes(BLOCK)
    start = time.perf_counter()
    with path.open("wb") as stream:
        for offset in range(0, nbytes, BLOCK):
            stream.write(block[: min(BLOCK, nbytes - offset)])
        stream.flush()
        os.fsync(stream.fileno())
    return time.perf_counter() - start


def _torchtitan_recipe(path: Path, size_gb: float) -> float:
    import torch.distributed.checkpoint as dcp

    start = time.perf_counter()
    torch.manual_seed(0)
    model = Model(size_gb)  # torch's init, on the CPU, in one process
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        dcp.save(model.state_dict(), checkpoint_id=str(path))
    return time.perf_counter() - start


def _shardinit(path: Path, size_gb: float, format: str, workers: int, seed: int) -> float:
    start = time.perf_counter()
    if workers == 1:
        import shardinit

        with torch.device("meta"):
            model = Model(size_gb)
        shardinit.save_seed_checkpoint(model, path, seed=seed, format=format, progress=False)
    else:
        from shardinit.cli._launch import launch

        args = ["--worker", str(path), "--size-gb", str(size_gb), "--format", format]
        launch(__file__, workers, [*args, "--seed", str(seed)], timeout=3600)
    return time.perf_counter() - start


def _worker(args: argparse.Namespace) -> None:
    """One writer of a ``--workers N`` run (started by the launcher)."""
    import torch.distributed as dist

    import shardinit
    from shardinit.cli._launch import exit_worker

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    with torch.device("meta"):
        model = Model(args.size_gb)
    shardinit.save_seed_checkpoint(
        model, args.worker, seed=args.seed, format=args.format, progress=False
    )
    Path(args.out, f"rank{rank}.json").write_text("{}")
    dist.destroy_process_group()
    exit_worker(0)


def _measure(args: argparse.Namespace, root: Path, nbytes: int) -> list[dict[str, Any]]:
    rows = []

    def row(label: str, seconds: float) -> None:
        rows.append({"label": label, "seconds": seconds, "gb_per_s": nbytes / seconds / 1e9})
        print(f"  {label}: {seconds:.2f} s", file=sys.stderr, flush=True)
        for child in root.iterdir():  # each run starts on an empty disk directory
            shutil.rmtree(child) if child.is_dir() else child.unlink()

    row("disk zeros", _disk_zeros(root / "zeros", nbytes))
    row(
        "torchtitan recipe (torch init + dcp.save)",
        _torchtitan_recipe(root / "titan", args.size_gb),
    )
    for workers in args.workers:
        for format in ("safetensors", "dcp"):
            seconds = _shardinit(root / format, args.size_gb, format, workers, args.seed)
            row(f"shardinit {format}, {workers} writer(s)", seconds)
    return rows


def _print(rows: list[dict[str, Any]], nbytes: int, args: argparse.Namespace) -> None:
    disk, titan = rows[0]["gb_per_s"], rows[1]["gb_per_s"]
    print(
        f"seed checkpoint of {nbytes / 1e9:.2f} GB (float32), {os.cpu_count()} CPUs, "
        f"seed {args.seed}"
    )
    print("| run | s | GB/s | vs disk zeros | vs torchtitan recipe |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        rate = row["gb_per_s"]
        print(
            f"| {row['label']} | {row['seconds']:.2f} | {rate:.3f} | "
            f"{rate / disk:.2f}x | {rate / titan:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--workers", default="1", help="comma-separated writer counts")
    parser.add_argument("--dir", help="where to write (default: a temporary directory)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the numbers here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--format", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args)
    args.workers = [int(w) for w in args.workers.split(",")]
    with torch.device("meta"):
        nbytes = _nbytes(Model(args.size_gb))
    with tempfile.TemporaryDirectory(prefix="seed-bench-", dir=args.dir) as tmp:
        rows = _measure(args, Path(tmp), nbytes)
    _print(rows, nbytes, args)
    if args.json:
        document = {"size_bytes": nbytes, "cpus": os.cpu_count(), "rows": rows}
        Path(args.json).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
