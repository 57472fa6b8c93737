"""``shardinit checkpoint``: a seed checkpoint of a transformers config or a built-in
model, written by ``--workers`` processes (:mod:`._checkpoint_worker`), each its share.

With ``--hf-config`` the model is ``AutoModelForCausalLM.from_config`` on the meta
device, initialized by its own ``init_weights`` (captured, as ``materialize`` does), in
the config's ``dtype`` (float32 if it names none); the config is saved next to the
weights, so ``from_pretrained(DIR)`` loads the checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._args import MODELS_HELP, Parser, model_choice, positive, say, seed

__all__ = ["add_command", "build_model", "run_checkpoint"]

#: Seconds between redraws of the workers' combined progress.
_POLL_S = 0.5


def add_command(commands: argparse._SubParsersAction[Parser]) -> Parser:
    """Adds ``shardinit checkpoint`` and its arguments to ``commands``."""
    ck = commands.add_parser(
        "checkpoint",
        help="write a seed checkpoint (safetensors or dcp) from several processes",
        description="Writes the shardinit initialization of a model as a checkpoint that "
        "training frameworks load (transformers' from_pretrained, torchtitan's initial "
        "load, dcp.load), from --workers processes; the safetensors files are the same "
        "bytes for any number of workers. Run it again to resume a killed run.",
    )
    source = ck.add_mutually_exclusive_group(required=True)
    source.add_argument("--hf-config", metavar="PATH", help="a transformers config.json")
    source.add_argument("--model", type=model_choice, help=MODELS_HELP)
    ck.add_argument("--out", required=True, metavar="DIR", help="the checkpoint directory")
    ck.add_argument("--format", choices=("safetensors", "dcp"), default="safetensors")
    ck.add_argument("--seed", type=seed, default=0, help="seed in [0, 2^64), default 0")
    ck.add_argument("--workers", type=positive, default=1, help="writer processes (default 1)")
    ck.add_argument(
        "--max-shard-size", default="5GB", help="safetensors' largest file (default 5GB)"
    )
    ck.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show bytes, rate and ETA on stderr (default: when stderr is a terminal)",
    )
    return ck


def build_model(
    hf_config: str | None, model: str | None
) -> tuple[Any, Callable[[], object] | None]:
    """The meta-device model and its init code: ``from_config`` of ``hf_config`` with
    ``init_fn=model.init_weights``, or the built-in ``model`` (torch.nn defaults).

    Raises:
        ShardInitError: a config transformers cannot read or build.
    """
    import torch

    from ..errors import ShardInitError

    if hf_config is None:
        from .transformer import build_model as build_builtin

        assert model is not None
        return build_builtin(model), None
    try:
        import transformers

        config = transformers.AutoConfig.from_pretrained(hf_config)
        dtype = config.dtype if isinstance(config.dtype, torch.dtype) else torch.float32
        with torch.device("meta"):
            built = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                config, dtype=dtype
            )
    except Exception as error:  # transformers raises many types for a bad config
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ShardInitError(
            f"--hf-config {hf_config}: transformers cannot build it: {first}"
        ) from None
    return built, built.init_weights


def run_checkpoint(args: argparse.Namespace, parser: Parser) -> int:
    """``shardinit checkpoint``: exit 0, or 1 with a one-line error."""
    del parser
    from ..errors import ShardInitError

    try:
        if args.workers == 1:
            _in_process(args)
        else:
            _from_workers(args)
    except ShardInitError as error:
        print(f"shardinit checkpoint: {error}", file=sys.stderr)
        return 1
    say(f"wrote {args.format} seed checkpoint to {args.out}")
    return 0


def _in_process(args: argparse.Namespace) -> None:
    write_checkpoint(args, args.out, progress=args.progress, with_config=True)


def write_checkpoint(args: argparse.Namespace, out: str, progress: Any, with_config: bool) -> None:
    """Builds the model the arguments name and writes this process's part of its seed
    checkpoint to ``out`` (the one call of both the in-process path and each worker);
    ``with_config``: also its transformers config (one writer does it)."""
    from .. import save_seed_checkpoint

    model, init_fn = build_model(args.hf_config, args.model)
    save_seed_checkpoint(
        model,
        out,
        seed=args.seed,
        init_fn=init_fn,
        format=args.format,
        max_shard_size=args.max_shard_size,
        progress=progress,
    )
    if with_config:
        save_config(model, out)


def save_config(model: Any, out: str) -> None:
    """A transformers model's config, next to its weights (what from_pretrained reads)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "save_pretrained"):
        config.save_pretrained(out)


def _from_workers(args: argparse.Namespace) -> None:
    """Runs ``--workers`` writer processes; draws their combined progress.

    Raises:
        ShardInitError: a worker's error (the same on every worker), or a failed worker.
    """
    from ..errors import ShardInitError
    from ._launch import LaunchError, launch

    build_model(args.hf_config, args.model)  # a bad config: one line here, before any worker
    with tempfile.TemporaryDirectory(prefix="shardinit-progress-") as progress_dir:
        forwarded = [
            *(["--hf-config", args.hf_config] if args.hf_config else ["--model", args.model]),
            *["--checkpoint-dir", args.out, "--format", args.format, "--seed", str(args.seed)],
            *["--max-shard-size", args.max_shard_size, "--progress-dir", progress_dir],
        ]
        shown = sys.stderr.isatty() if args.progress is None else args.progress
        stop = threading.Event()
        drawer = threading.Thread(target=_draw, args=(Path(progress_dir), args.workers, stop))
        if shown:
            drawer.start()
        try:
            results = launch("shardinit.cli._checkpoint_worker", args.workers, forwarded)
        except LaunchError as error:
            raise ShardInitError(f"a writer failed: {str(error).splitlines()[0]}") from None
        finally:
            stop.set()
            if shown:
                drawer.join()
    errors = [result["error"] for result in results if result.get("error")]
    if errors:
        raise ShardInitError(errors[0])


def _draw(progress_dir: Path, workers: int, stop: threading.Event) -> None:
    """The workers' combined bar: each writes ``rank<r>`` as ``done total``."""
    from .._integration.progress import ProgressBar

    bar: ProgressBar | None = None
    while True:
        stopped = stop.wait(_POLL_S)  # one last redraw after the workers ended
        pairs = [_read_pair(progress_dir / f"rank{rank}") for rank in range(workers)]
        known = [pair for pair in pairs if pair is not None]
        if len(known) == workers:
            if bar is None:
                bar = ProgressBar(f"seed checkpoint ({workers} writers)", sum(t for _, t in known))
            bar.update(sum(done for done, _ in known))
        if stopped:
            break
    if bar is not None:
        bar.close()


def _read_pair(path: Path) -> tuple[int, int] | None:
    try:
        done, total = path.read_text().split()
        return int(done), int(total)
    except (OSError, ValueError):
        return None
