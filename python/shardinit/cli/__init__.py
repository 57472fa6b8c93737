"""The ``shardinit`` command line: ``demo``, ``plan``, ``fingerprint``, ``checkpoint``.

One module per subcommand (:mod:`.demo`, :mod:`.plan`, :mod:`.fingerprint`,
:mod:`.checkpoint`), each adding
its own arguments; their scaffolding is private to the CLI: the built-in Llama model
(:mod:`.models`), the multi-process launcher (:mod:`._launch`) and the FSDP2 worker it
runs (:mod:`._worker`).

Exit status: 0 success; 1 the check failed (fingerprints differ, a worker failed, an
``--expect`` mismatch); 2 bad arguments (one-line error and usage on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from . import checkpoint, demo, fingerprint, plan
from ._args import Parser

__all__ = ["main", "run"]

_Handler = Callable[[argparse.Namespace, Parser], int]


def _build_parser() -> tuple[Parser, dict[str, tuple[Parser, _Handler]]]:
    parser = Parser(
        prog="shardinit",
        description="Deterministic, shard-local initialization of sharded torch models.",
    )
    commands = parser.add_subparsers(
        dest="command", metavar="{demo,plan,fingerprint,checkpoint}", parser_class=Parser
    )
    commands.required = True
    return parser, {
        "demo": (demo.add_command(commands), demo.run_demo),
        "plan": (plan.add_command(commands), plan.run_plan),
        "fingerprint": (fingerprint.add_command(commands), fingerprint.run_fingerprint),
        "checkpoint": (checkpoint.add_command(commands), checkpoint.run_checkpoint),
    }


def run(argv: Sequence[str]) -> int:
    """Runs the command line ``argv`` (without the program name).

    Args:
        argv: e.g. ``["demo", "--worlds", "1,2"]``.

    Returns:
        The exit status: 0 success, 1 a failed check, 2 bad arguments.
    """
    parser, commands = _build_parser()
    try:
        args = parser.parse_args(list(argv))
        subparser, handler = commands[args.command]
        return handler(args, subparser)
    except SystemExit as exit_:  # argparse's --help (0) and errors (2)
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except KeyboardInterrupt:
        print("shardinit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly (the Python docs' recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m shardinit`` and the ``shardinit`` console script.

    Args:
        argv: the arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit status (see :func:`run`).
    """
    return run(sys.argv[1:] if argv is None else argv)
