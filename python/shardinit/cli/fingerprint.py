"""``shardinit fingerprint``: a built-in model's fingerprints and model digest.

With ``--world 1`` the model is materialized in this process; with more ranks FSDP2
workers (:mod:`shardinit.cli._worker`) materialize their shards and the fingerprints are
combined across ranks without gathering any weights.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from ._args import MODELS_HELP, Parser, local_world, model_choice, positive, say, seed
from .models import describe

__all__ = ["add_command", "run_fingerprint"]


def _digest(text: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{16}", text):
        raise argparse.ArgumentTypeError(f"expected 16 lowercase hex digits, got {text!r}")
    return text


def add_command(commands: argparse._SubParsersAction[Parser]) -> Parser:
    """Adds ``shardinit fingerprint`` and its arguments to ``commands``."""
    fp = commands.add_parser(
        "fingerprint",
        help="fingerprints of a built-in model's shardinit initialization",
        description="Materializes a built-in model with shardinit (FSDP2 on --world CPU "
        "processes, or in this process for --world 1) and prints each parameter's "
        "layout-independent fingerprint and the model digest, combined across ranks "
        "without gathering.",
    )
    fp.add_argument("--model", type=model_choice, default="tiny", help=MODELS_HELP)
    fp.add_argument("--seed", type=seed, default=0, help="seed in [0, 2^64), default 0")
    fp.add_argument(
        "--world", type=local_world, default=1, help="number of local ranks (default 1)"
    )
    fp.add_argument("--tp", type=positive, default=1, help="tensor-parallel degree")
    fp.add_argument("--json", action="store_true", help="print JSON")
    fp.add_argument(
        "--expect", type=_digest, help="exit 1 unless the model digest equals this value"
    )
    return fp


def _in_process(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, list[int]]]:
    """(fingerprint, global shape) per parameter, materialized whole in this process."""
    from .. import fingerprint_model, materialize  # torch: only when the command runs
    from .transformer import build_model

    model = materialize(build_model(args.model), seed=args.seed)
    shapes = {name: list(p.shape) for name, p in model.named_parameters()}
    return fingerprint_model(model), shapes


def _from_workers(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, list[int]]]:
    """(fingerprint, global shape) per parameter from ``--world`` FSDP2 workers.

    Raises:
        LaunchError: a worker failed.
    """
    from ._launch import launch

    results = launch(
        "shardinit.cli._worker",
        args.world,
        ["--model", args.model, "--seed", str(args.seed), "--tp", str(args.tp)],
    )
    return results[0]["fingerprints"], results[0]["shapes"]


def _print_json(args: argparse.Namespace, fingerprints: dict[str, str], digest: str) -> None:
    from .._integration.fingerprint import FINGERPRINT_FORMAT  # torch: the command runs

    document: dict[str, Any] = {
        "model": args.model,
        "seed": args.seed,
        "world": args.world,
        "tp": args.tp,
        "format": FINGERPRINT_FORMAT,
        "model_digest": digest,
        "fingerprints": fingerprints,
    }
    say(json.dumps(document, indent=2))


def _print_table(
    args: argparse.Namespace,
    fingerprints: dict[str, str],
    shapes: dict[str, list[int]],
    digest: str,
) -> None:
    width = max(len(name) for name in fingerprints)
    say(f"# {describe(args.model)}; seed {args.seed}; world {args.world}, tp {args.tp}")
    for name, value in fingerprints.items():
        shape = "x".join(map(str, shapes[name]))
        say(f"{name:<{width}}  {value}  {shape}")
    say(f"{'model digest':<{width}}  {digest}")


def run_fingerprint(args: argparse.Namespace, parser: Parser) -> int:
    """``shardinit fingerprint``: exit 0, or 1 if a worker failed or ``--expect``
    differs from the model digest."""
    if args.world % args.tp:
        parser.error(f"--tp {args.tp} must divide --world {args.world}")
    if args.world == 1:
        fingerprints, shapes = _in_process(args)
    else:
        try:
            fingerprints, shapes = _from_workers(args)
        except Exception as error:  # a worker failed: report it, do not crash
            print(f"shardinit fingerprint: {error}", file=sys.stderr)
            return 1
    from .. import model_digest

    digest = model_digest(fingerprints)
    if args.json:
        _print_json(args, fingerprints, digest)
    else:
        _print_table(args, fingerprints, shapes, digest)
    if args.expect is not None and args.expect != digest:
        print(
            f"shardinit fingerprint: model digest {digest} != expected {args.expect}",
            file=sys.stderr,
        )
        return 1
    return 0
