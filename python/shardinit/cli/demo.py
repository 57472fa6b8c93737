"""``shardinit demo``: the same model at several world sizes, shardinit vs torch's own init.

Each world size runs as FSDP2 worker processes on gloo (:mod:`shardinit.cli._worker`).
The report leads with the verdict (how many parameters are identical at every world size,
and on how many torch's own path differs), then the time and memory per world; the
per-parameter fingerprint table only with ``--verbose`` or when shardinit's fingerprints
differ.
"""

from __future__ import annotations

import argparse
import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._args import (
    MODELS_HELP,
    Parser,
    human_bytes,
    local_world,
    model_choice,
    positive,
    say,
    seed,
)
from .models import DEFAULT_MODEL, describe

__all__ = ["add_command", "run_demo"]

#: What one world size's workers returned: one dict per rank (see ``_worker``).
RankResults = list[dict[str, Any]]


def _worlds(text: str) -> list[int]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"expected world sizes like 1,2,4, got {text!r}")
    worlds = [local_world(part) for part in parts]
    if len(set(worlds)) != len(worlds):
        raise argparse.ArgumentTypeError(f"world sizes repeat in {text!r}")
    return worlds


def add_command(commands: argparse._SubParsersAction[Parser]) -> Parser:
    """Adds ``shardinit demo`` and its arguments to ``commands``."""
    demo = commands.add_parser(
        "demo",
        help="FSDP2 on CPU processes at several world sizes: shardinit vs torch's own init",
        description="Materializes a built-in model with FSDP2 (gloo, CPU) at each world size "
        "with shardinit, compares fingerprints across world sizes, then shows torch's own "
        "path (reset_parameters on the shards) on the same model. Exit 0 only if shardinit's "
        "fingerprints agree.",
    )
    demo.add_argument("--model", type=model_choice, default=DEFAULT_MODEL, help=MODELS_HELP)
    demo.add_argument(
        "--worlds", type=_worlds, default=None, help="world sizes, default 1,2,4 (tp: tp,2*tp)"
    )
    demo.add_argument("--seed", type=seed, default=0, help="seed in [0, 2^64), default 0")
    demo.add_argument("--tp", type=positive, default=1, help="tensor-parallel degree")
    demo.add_argument("--no-torch", action="store_true", help="skip torch's own path")
    demo.add_argument(
        "--offload",
        action="store_true",
        help="FSDP2 with CPU offload (CPUOffloadPolicy; pinned only where an accelerator is)",
    )
    demo.add_argument("--timeout", type=positive, default=600, help="seconds per world size")
    demo.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print every parameter's fingerprint per world size and the workers' progress",
    )
    return demo


def run_demo(args: argparse.Namespace, parser: Parser) -> int:
    """``shardinit demo``: exit 0 if shardinit's fingerprints agree at every world size,
    1 if they differ or a worker failed."""
    tp: int = args.tp
    worlds: list[int] = args.worlds or ([1, 2, 4] if tp == 1 else [tp, 2 * tp])
    bad = [w for w in worlds if w % tp]
    if bad:
        parser.error(f"--tp {tp} must divide every world size, not {bad[0]}")
    if args.worlds is None:  # the default worlds follow --tp: as bounded as --worlds
        try:
            [local_world(str(world)) for world in worlds]
        except argparse.ArgumentTypeError as error:
            parser.error(f"argument --tp: {tp} gives the default worlds {worlds}: {error}")
    started = time.perf_counter()
    _print_intro(args.model, args.seed, tp, worlds, offload=args.offload)
    per_world: dict[int, RankResults] = {}
    for step, world in enumerate(worlds, 1):
        results = _run_world(args, world, f"[{step}/{len(worlds)}]")
        if results is None:
            return 1
        per_world[world] = results
    outcome = _Outcome.compare(per_world, torch_path=not args.no_torch)
    say(f"\n{outcome.verdict()}\n")
    _print_resources(outcome)
    if args.verbose or outcome.differing:
        _print_fingerprints(outcome)
    if outcome.torch_path:
        _print_torch_path(outcome)
    say(f"\ntotal {time.perf_counter() - started:.1f} s")
    return 0 if outcome.agree else 1


# ------------------------------------------------------------------------------ running


def _print_intro(model: str, seed_value: int, tp: int, worlds: list[int], *, offload: bool) -> None:
    layout = "FSDP2 fully_shard" + (f" on top of {tp}-way tensor parallelism" if tp > 1 else "")
    layout += " with CPU offload (CPUOffloadPolicy)" if offload else ""
    say(f"shardinit demo: {describe(model)}")
    say(f"  seed {seed_value}; {layout}; gloo process groups on CPU; {_worlds_text(worlds)}")
    say("  every rank builds the model on the meta device and fills only its own shards\n")


def _run_world(args: argparse.Namespace, world: int, step: str) -> RankResults | None:
    """Runs one world size's workers, printing progress; None (after printing why) if a
    worker failed."""
    from ._launch import launch

    worker_args = ["--model", args.model, "--seed", str(args.seed), "--tp", str(args.tp)]
    if not args.no_torch:
        worker_args.append("--torch-path")
    if args.offload:
        worker_args.append("--offload")
    processes = f"{world} process" + ("es" if world > 1 else "")
    verbose: bool = args.verbose
    say(f"{step} world {world}: {processes} ...", end="\n" if verbose else "")
    started = time.perf_counter()
    try:
        results = launch(
            "shardinit.cli._worker",
            world,
            worker_args,
            timeout=args.timeout,
            on_line=(lambda line: say(f"      rank 0: {line}")) if verbose else None,
        )
    except Exception as error:  # a worker failed: report it, do not crash
        say(f"{'      ' if verbose else ' '}FAILED: {error}")
        return None
    seconds = time.perf_counter() - started
    say(f"      done in {seconds:.1f} s" if verbose else f" {seconds:.1f} s")
    return results


# ------------------------------------------------------------------------------ outcome


@dataclass(frozen=True)
class _Outcome:
    """Every world size's results and what comparing them found."""

    per_world: dict[int, RankResults]
    torch_path: bool
    names: list[str]  # parameters, in the model's order
    differing: list[str]  # parameters whose shardinit fingerprints differ across worlds
    digests: list[str]  # shardinit's model digest per world
    torch_differing: list[str]  # parameters whose torch-path fingerprints differ

    @classmethod
    def compare(cls, per_world: dict[int, RankResults], *, torch_path: bool) -> _Outcome:
        """Compares rank 0's fingerprints (combined over all ranks) across worlds."""
        from .. import model_digest  # imports torch: only when the demo runs

        first = next(iter(per_world.values()))[0]
        names = list(first["fingerprints"])
        differing = [n for n in names if len(_row(per_world, "fingerprints", n)) != 1]
        digests = [model_digest(r[0]["fingerprints"]) for r in per_world.values()]
        torch_differing = []
        if torch_path:
            torch_differing = [
                n for n in names if len(_row(per_world, "torch_fingerprints", n)) != 1
            ]
        return cls(per_world, torch_path, names, differing, digests, torch_differing)

    @property
    def worlds(self) -> list[int]:
        """The world sizes, in the order they ran."""
        return list(self.per_world)

    @property
    def agree(self) -> bool:
        """True when shardinit's weights do not depend on the world size."""
        return not self.differing and len(set(self.digests)) == 1

    def verdict(self) -> str:
        """``PASS: 75 of 75 parameters identical across worlds 1, 2 and 4; torch's path
        differs on 58 of 75``."""
        total = len(self.names)
        text = (
            f"{'PASS' if self.agree else 'FAIL'}: {total - len(self.differing)} of {total} "
            f"parameters identical across {_worlds_text(self.worlds)}"
        )
        if self.torch_path:
            text += f"; torch's path differs on {len(self.torch_differing)} of {total}"
        return text


def _row(per_world: dict[int, RankResults], key: str, name: str) -> set[str]:
    """The distinct fingerprints of parameter ``name`` across worlds (``missing`` for a
    world that lacks it)."""
    return {results[0][key].get(name, "missing") for results in per_world.values()}


def _worlds_text(worlds: Sequence[int]) -> str:
    """``world 1``, ``worlds 1 and 2``, ``worlds 1, 2 and 4``."""
    if len(worlds) == 1:
        return f"world {worlds[0]}"
    return f"worlds {', '.join(map(str, worlds[:-1]))} and {worlds[-1]}"


# ------------------------------------------------------------------------------ report


def _table(header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """Lines of a table; ``align`` has one letter per column, ``l`` or ``r``."""
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = []
    for line in [header, *rows]:
        cells = [
            cell.ljust(width) if side == "l" else cell.rjust(width)
            for cell, width, side in zip(line, widths, align, strict=True)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _paragraph(text: str) -> None:
    """Prints ``text`` wrapped to 88 columns, indented by two spaces."""
    say(textwrap.fill(text, width=88, initial_indent="  ", subsequent_indent="  "))


def _print_resources(outcome: _Outcome) -> None:
    """Time and memory per world: the slowest rank's time, the largest rank's memory."""
    header = ["world", "shardinit init"]
    header += ["torch's init"] if outcome.torch_path else []
    header += ["generated/rank", "peak RSS/rank", "RSS added by init"]
    rows = []
    for world, results in outcome.per_world.items():
        row = [str(world), f"{max(r['seconds'] for r in results):.2f} s"]
        if outcome.torch_path:
            row.append(f"{max(r['torch_seconds'] for r in results):.2f} s")
        row += [
            human_bytes(max(r["bytes"] for r in results)),
            human_bytes(max(r["peak_rss"] for r in results)),
            human_bytes(max(r["peak_rss"] - r["rss_before"] for r in results)),
        ]
        rows.append(row)
    say("Per world (time: slowest rank; memory: largest rank):")
    for line in _table(header, rows, "r" * len(header)):
        say(line)
    if outcome.torch_path:
        _paragraph(
            "Both times start from the same sharded model on meta, after both paths ran "
            "once on the tiny model, and include allocating and filling the local shards: "
            "shardinit's is materialize; torch's is to_empty + manual_seed + "
            "reset_parameters."
        )
        _print_slower(outcome)
    if len(set(outcome.digests)) == 1:
        say(f"shardinit's model digest at every world size: {outcome.digests[0]}")
    else:
        say(f"shardinit's model digests: {_per_world(outcome.worlds, outcome.digests)}")


def _print_slower(outcome: _Outcome) -> None:
    """Why shardinit's time is above torch's at the world sizes where it is."""
    import os

    cores = os.cpu_count() or 1
    for world, results in outcome.per_world.items():
        ours = max(r["seconds"] for r in results)
        theirs = max(r["torch_seconds"] for r in results)
        if ours <= theirs:
            continue
        threads = max(r.get("threads", 1) for r in results)
        share = human_bytes(max(r["bytes"] for r in results))
        why = (
            f"shardinit is slower at world {world} ({ours:.2f} s vs {theirs:.2f} s): its "
            f"time includes a cost per rank that does not shrink with the world size "
            f"(planning and checking all {len(outcome.names)} parameters, and starting its "
            f"fill threads), against a share of {share} per rank to fill"
        )
        if world * threads > cores:
            why += (
                f"; and {world} ranks x {threads} fill threads share {cores} cores, where "
                "torch's generator runs one thread per rank"
            )
        load = os.getloadavg()[0]
        if load > cores:
            why += (
                f"; and the machine is busy (load average {load:.1f} on {cores} cores), "
                "so these times vary from run to run: rerun on a quiet machine"
            )
        _paragraph(why + ".")


def _per_world(worlds: Sequence[int], values: Sequence[str]) -> str:
    return ", ".join(f"world {w} {v}" for w, v in zip(worlds, values, strict=True))


def _print_fingerprints(outcome: _Outcome) -> None:
    """The per-parameter table of shardinit's fingerprints, one column per world."""
    say("\nshardinit fingerprints (fp1: sum over elements of a hash of (global index, bits)):")
    shapes = next(iter(outcome.per_world.values()))[0]["shapes"]
    header = ["parameter", "shape", *(f"world {w}" for w in outcome.worlds), ""]
    rows = []
    for name in outcome.names:
        row = [r[0]["fingerprints"].get(name, "missing") for r in outcome.per_world.values()]
        marker = "<- differs" if name in outcome.differing else ""
        rows.append([name, "x".join(map(str, shapes[name])), *row, marker])
    rows.append(["model digest", "", *outcome.digests, ""])
    for line in _table(header, rows, "lr" + "l" * (len(header) - 2)):
        say(line)


def _print_torch_path(outcome: _Outcome) -> None:
    """torch's own path: its digests per world, and whether rank shards are copies."""
    from .. import model_digest

    say("\ntorch's own path on the same model:")
    _paragraph(
        "to_empty(device='cpu'), torch.manual_seed(seed) on every rank, then "
        "reset_parameters() on the shards"
    )
    digests = [model_digest(r[0]["torch_fingerprints"]) for r in outcome.per_world.values()]
    say(f"  model digests: {_per_world(outcome.worlds, digests)}")
    agreeing = len(outcome.names) - len(outcome.torch_differing)
    if outcome.torch_differing and agreeing:
        total = len(outcome.names)
        say(f"  the parameters that agree ({agreeing} of {total}) are constants such as norms")
    # Constants (norm weights) are trivially equal on every rank: count random ones.
    random_names = outcome.torch_differing or outcome.names
    for world, results in outcome.per_world.items():
        if world > 1:
            identical, comparable = _copies(results, random_names)
            say(
                f"  world {world}: rank shards are exact copies of each other for {identical} "
                f"of {comparable} randomly initialized parameters"
            )
    if any(w > 1 for w in outcome.worlds):
        _paragraph(
            "On a CPU mesh DTensor has no offset-based RNG: each rank runs the ordinary CPU "
            "generator on its local shard, so every rank writes the same values and the "
            "gathered weights repeat the first shard."
        )


def _copies(results: RankResults, names: list[str]) -> tuple[int, int]:
    """(params of ``names`` whose shards are identical on all ranks, params of ``names``
    with equal-shaped non-empty shards)."""
    comparable = identical = 0
    for name in names:
        entries = [r["torch_local"][name] for r in results]
        shapes = {tuple(e[0]) for e in entries}
        if len(shapes) != 1 or 0 in next(iter(shapes)):
            continue
        comparable += 1
        identical += len({e[1] for e in entries}) == 1
    return identical, comparable
