"""One writer of ``shardinit checkpoint --workers N`` (run by
:func:`shardinit.cli._launch.launch`; not a public API).

Joins the gloo group, builds the model on the meta device, and writes its share with
:func:`shardinit.save_seed_checkpoint` (which also saves a transformers config). The
directory's lock is its launcher's, inherited. Writes
``rank<r>.json`` into ``--out``: ``{"error": message}`` on a checkpoint error (the same
on every rank), else ``{"error": null}``; its progress (``done total`` bytes) goes to
``--progress-dir/rank<r>``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path

import torch.distributed as dist

from ..errors import ShardInitError
from ._launch import exit_worker, join_worker_group
from .checkpoint import write_checkpoint


def _progress_file(path: Path) -> Callable[[int, int], None]:
    """A hook that writes ``done total`` to ``path`` (replaced whole: the reader never
    sees half a line)."""

    def report(done: int, total: int) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(f"{done} {total}")
        os.replace(partial, path)

    return report


def main(argv: list[str] | None = None) -> int:
    """Runs one writer; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m shardinit.cli._checkpoint_worker")
    parser.add_argument("--hf-config")
    parser.add_argument("--model")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--format", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-shard-size", type=int)
    parser.add_argument("--progress-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    rank, _ = join_worker_group()
    error: str | None = None
    try:
        progress = _progress_file(Path(args.progress_dir, f"rank{rank}"))
        write_checkpoint(args, args.checkpoint_dir, progress=progress)
    except ShardInitError as failure:
        error = str(failure)
    finally:
        Path(args.out, f"rank{rank}.json").write_text(json.dumps({"error": error}))
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_worker(main())
