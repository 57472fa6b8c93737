"""``shardinit checkpoint``: a seed checkpoint of a transformers config or a built-in
model, written by ``--workers`` processes (:mod:`._checkpoint_worker`), each its share.

With ``--hf-config`` the model is ``AutoModelForCausalLM.from_config`` on the meta
device, initialized by its own ``init_weights`` (captured, as ``materialize`` does), in
the config's ``dtype`` (float32 if it names none); its config (and generation config)
is saved next to the weights as ``save_pretrained`` saves it, so ``from_pretrained(DIR)``
loads the checkpoint.

The directory is locked for the whole command (before the model is built: a second
run is refused at once); the writer processes inherit the lock. With one writer the
command's own process plans and writes. With ``--workers N`` the launcher builds no
model and imports no torch: it starts every writer at once; writer 0 builds the model
and plans the checkpoint (:func:`plan_checkpoint`) while the others import what writing
needs (torch and shardinit's writer, never transformers), then hands them the plan
(pickled, over the writers' gloo group), and each writes its share.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._args import MODELS_HELP, Parser, local_world, model_choice, say, seed

if TYPE_CHECKING:
    from .._integration.checkpoint import SeedPlan

__all__ = ["add_command", "build_model", "plan_checkpoint", "run_checkpoint", "write_checkpoint"]

#: Seconds between redraws of the workers' combined progress.
_POLL_S = 0.5
#: Seconds the writers may run: a seed checkpoint of a large model takes hours.
_WORKER_TIMEOUT_S = 7 * 24 * 3600.0


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
    ck.add_argument("--workers", type=local_world, default=1, help="writer processes (default 1)")
    ck.add_argument(
        "--max-shard-size",
        type=_shard_size,
        default=None,
        help="safetensors' largest file: bytes, or a size such as 5GB (default: "
        "save_pretrained's default in the installed transformers)",
    )
    ck.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show bytes, rate and ETA on stderr (default: when stderr is a terminal)",
    )
    return ck


def _shard_size(text: str) -> int:
    from .._integration.checkpoint_files import shard_size_bytes
    from ..errors import ShardInitError

    try:
        return shard_size_bytes(text)
    except ShardInitError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


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
        # Its reason whole, on one line (a validator's name is on the first line, the
        # reason on the next ones).
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ShardInitError(
            f"--hf-config {hf_config}: transformers cannot build it: {reason}"
        ) from None
    return built, built.init_weights


def run_checkpoint(args: argparse.Namespace, parser: Parser) -> int:
    """``shardinit checkpoint``: exit 0, or 1 with a one-line error."""
    del parser
    from .._integration.checkpoint_files import make_directory
    from .._integration.checkpoint_lock import directory_lock
    from ..errors import ShardInitError

    out = Path(args.out)
    created = not out.exists()
    try:
        make_directory(out)
        with directory_lock(out):  # held until every writer has ended
            if args.workers == 1:
                write_checkpoint(args, args.out, progress=args.progress)
            else:
                _from_workers(args)
    except ShardInitError as error:
        if created:
            _remove_if_empty(out)
        print(f"shardinit checkpoint: {error}", file=sys.stderr)
        return 1
    say(f"wrote {args.format} seed checkpoint to {args.out}")
    return 0


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: a resumable run's files
        directory.rmdir()


def plan_checkpoint(args: argparse.Namespace) -> SeedPlan:
    """Builds the model the arguments name and plans its seed checkpoint; the model is
    dropped on return (the plan holds none of it: the write needs no model)."""
    from .._integration.checkpoint import plan_seed_checkpoint

    model, init_fn = build_model(args.hf_config, args.model)
    return plan_seed_checkpoint(
        model,
        seed=args.seed,
        init_fn=init_fn,
        format=args.format,
        max_shard_size=args.max_shard_size,
    )


def write_checkpoint(args: argparse.Namespace, out: str, progress: Any) -> None:
    """The one writer's whole job (``--workers 1``, in the command's own process): plans
    the checkpoint, then writes it to ``out``."""
    from .._integration.checkpoint import write_seed_checkpoint

    write_seed_checkpoint(plan_checkpoint(args), out, progress=progress)


def _from_workers(args: argparse.Namespace) -> None:
    """Runs ``--workers`` writer processes (they inherit the directory's lock); draws
    their combined progress. A writer that dies leaves its partial files: they are
    removed here, where the lock is still held.

    Raises:
        ShardInitError: a worker's error (the same on every worker), or the first
            writer that failed, with its signal or exit status.
    """
    from .._integration.checkpoint_files import remove_unfinished
    from .._integration.checkpoint_lock import INHERITED_ENV, inheritable_lock_fd
    from ..errors import ShardInitError
    from ._launch import LaunchError, launch

    lock_fd, lock_env = inheritable_lock_fd(Path(args.out))
    env = {**os.environ, INHERITED_ENV: lock_env}
    with tempfile.TemporaryDirectory(prefix="shardinit-progress-") as progress_dir:
        forwarded = [
            *(["--hf-config", args.hf_config] if args.hf_config else ["--model", args.model]),
            *["--checkpoint-dir", args.out, "--format", args.format, "--seed", str(args.seed)],
            *(["--max-shard-size", str(args.max_shard_size)] if args.max_shard_size else []),
            *["--progress-dir", progress_dir],
        ]
        shown = sys.stderr.isatty() if args.progress is None else args.progress
        stop = threading.Event()
        drawer = threading.Thread(target=_draw, args=(Path(progress_dir), args.workers, stop))
        if shown:
            drawer.start()
        try:
            results = launch(
                "shardinit.cli._checkpoint_worker",
                args.workers,
                forwarded,
                env=env,
                pass_fds=(lock_fd,),
                timeout=_WORKER_TIMEOUT_S,
            )
        except LaunchError as error:
            remove_unfinished(Path(args.out), args.format)
            lines = str(error).splitlines()
            detail = next((line for line in reversed(lines[1:]) if line.strip()), "")
            cause = lines[0].replace("rank", "writer", 1)
            raise ShardInitError(
                f"{cause}" + (f" (its last words: {detail.strip()})" if detail else "")
            ) from None
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
