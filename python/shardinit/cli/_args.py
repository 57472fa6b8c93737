"""What every ``shardinit`` subcommand shares: the parser class, argument types, output.

Bad arguments end in one line ``shardinit <command>: error: ...`` after the usage, with
exit status 2 and no traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import NoReturn

from ._launch import RANK_BYTES, max_local_ranks, physical_memory
from .models import BUILDABLE_MODELS, MODELS

_MAX_U64 = 2**64 - 1
_MAX_SEED = _MAX_U64

#: ``--model`` help text of the commands that build the model.
MODELS_HELP = f"built-in Llama-style config: {', '.join(BUILDABLE_MODELS)}"

#: ``--model`` help text of ``plan``, which knows every built-in model.
PLAN_MODELS_HELP = f"built-in config: {', '.join(MODELS)}"


def rss_bytes(field: str = "VmRSS") -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"/proc/self/status has no {field}")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error, the usage, and exit status 2 (no traceback)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        first_line = message.strip().splitlines()[0] if message.strip() else "invalid usage"
        self.exit(2, f"{self.prog}: error: {first_line}\n")


def seed(text: str) -> int:
    """``--seed``: an integer in [0, 2^64), decimal or with a base prefix (``0x``)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seed must be an integer, got {text!r}") from None
    if not 0 <= value <= _MAX_SEED:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2^64), got {value}")
    return value


def _at_least_1(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive(text: str) -> int:
    """An integer in [1, 2^64 - 1] (``--world``, ``--tp``, ``--timeout``): the core counts
    ranks and chunks in 64 bits."""
    value = _at_least_1(text)
    if value > _MAX_U64:
        raise argparse.ArgumentTypeError(
            f"expected an integer in [1, 2^64 - 1] (the core counts in 64 bits), got {value}"
        )
    return value


def local_world(text: str) -> int:
    """A number of local ranks (``demo --worlds``, ``fingerprint --world``): a positive
    integer no larger than :func:`max_local_ranks`, so that no command starts more
    processes than this machine can hold."""
    value = _at_least_1(text)
    bound = max_local_ranks()
    if value > bound:
        raise argparse.ArgumentTypeError(
            f"expected at most {bound} local ranks, got {value}: each rank is a process "
            f"with torch (about {human_bytes(RANK_BYTES)}) and this machine has "
            f"{human_bytes(physical_memory())} of memory"
        )
    return value


def choice_of(registry: Mapping[str, object]) -> Callable[[str], str]:
    """The ``--model`` argument type for the configs of ``registry`` (a table of
    :mod:`shardinit.cli.models`): a key of it, or a usage error listing them."""

    def choice(text: str) -> str:
        if text not in registry:
            raise argparse.ArgumentTypeError(
                f"unknown model {text!r} (choose from {', '.join(registry)})"
            )
        return text

    return choice


#: ``--model`` of the commands that build the model: a key of
#: :data:`shardinit.cli.models.BUILDABLE_MODELS`.
model_choice = choice_of(BUILDABLE_MODELS)

#: ``--model`` of ``plan``: a key of :data:`shardinit.cli.models.MODELS`.
plan_model_choice = choice_of(MODELS)


def human_bytes(nbytes: float) -> str:
    """``1.50 MiB``-style text (binary units, two decimals; whole bytes below 1 KiB)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} B"


def say(text: str = "", *, end: str = "\n") -> None:
    """Prints one line of a report to stdout now (progress must show while workers run)."""
    print(text, end=end, flush=True)
