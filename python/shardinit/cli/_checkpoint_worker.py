"""One writer of ``shardinit checkpoint --workers N`` (run by
:func:`shardinit.cli._launch.launch`; not a public API).

Joins the gloo group; writer 0 builds the model on the meta device and plans the
checkpoint (:func:`.checkpoint.plan_checkpoint`), then broadcasts the plan, pickled,
to the others, which meanwhile only imported what writing needs (torch, shardinit's
writer: never transformers, never the model); each writes its share with
:func:`shardinit._integration.checkpoint.write_seed_checkpoint` (which also saves a
transformers config). The directory's lock is its launcher's, inherited. Writes
``rank<r>.json`` into ``--out``: ``{"error": message}`` on a checkpoint error (the same
on every rank), else ``{"error": null}``; its progress (``done total`` bytes) goes to
``--progress-dir/rank<r>``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from ..errors import ShardInitError
from ._launch import exit_worker, join_worker_group
from .checkpoint import plan_checkpoint

if TYPE_CHECKING:
    from .._integration.checkpoint import SeedPlan


def _progress_file(path: Path) -> Callable[[int, int], None]:
    """A hook that writes ``done total`` to ``path`` (replaced whole: the reader never
    sees half a line)."""

    def report(done: int, total: int) -> None:
        partial = path.with_name(path.name + ".partial")
        partial.write_text(f"{done} {total}")
        os.replace(partial, path)

    return report


def _shared_plan(args: argparse.Namespace, rank: int) -> SeedPlan:
    """The checkpoint's plan, made once by writer 0 and broadcast to every writer.

    Raises:
        ShardInitError: writer 0's planning failed (the same error on every writer),
            or its plan does not pickle.
    """
    handed: list[bytes | str | None] = [None]
    if rank == 0:
        try:
            plan = plan_checkpoint(args)
            try:
                handed[0] = pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as failure:  # a value the plan holds that pickle refuses
                handed[0] = (
                    "save_seed_checkpoint: the plan cannot be handed to the other writers "
                    f"(pickle: {type(failure).__name__}: {failure}); run with --workers 1"
                )
        except ShardInitError as failure:
            handed[0] = str(failure)
    dist.broadcast_object_list(handed, src=0)
    if isinstance(handed[0], str):
        raise ShardInitError(handed[0])
    assert isinstance(handed[0], bytes)
    shared: SeedPlan = pickle.loads(handed[0])
    return shared


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
        plan = _shared_plan(args, rank)
        progress = _progress_file(Path(args.progress_dir, f"rank{rank}"))
        from .._integration.checkpoint import write_seed_checkpoint

        write_seed_checkpoint(plan, args.checkpoint_dir, progress=progress)
    except ShardInitError as failure:
        error = str(failure)
    finally:
        Path(args.out, f"rank{rank}.json").write_text(json.dumps({"error": error}))
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_worker(main())
