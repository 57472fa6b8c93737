"""``shardinit plan``: layouts, bytes and estimated peak memory per rank, generating nothing.

Layouts are those FSDP2 produces: ``fully_shard`` gives every parameter ``Shard(0)`` over
the data-parallel mesh; with tensor parallelism (the demo's plan,
:data:`shardinit.cli.models.TP_PLAN`: column-wise and row-wise Linears by module name)
FSDP2 on top of TP gives ``(_StridedShard(0, split_factor=tp), Shard(0))`` and
``(Shard(0), Shard(1))``, and parameters that TP does not touch are
``(Shard(0), Replicate())``.

Peak-memory estimates count parameter bytes only (a process that imported torch adds its
own baseline) and follow the allocation order of each strategy:

* FSDP1, model built on CPU: every rank holds the whole model; each FSDP unit is then
  flattened (``torch.cat`` into a new FlatParameter: one more copy of the unit), sharded
  and the unsharded flat storage freed, units in post-order (blocks, then the root).
* FSDP1, meta + ``param_init_fn``: per unit, the unit's parameters are allocated whole and
  initialized, then flattened (a second copy) and sharded.
* FSDP2, meta + ``to_empty`` + ``reset_parameters``: only the local shards are allocated.
* FSDP1 + ``shardinit.fsdp1_param_init_fn``: as FSDP1 meta (FSDP1 itself allocates and
  flattens whole units); shardinit only fills the local flat shards.
* FSDP2 + shardinit: only the local shards are allocated, and filled in place.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._dtypes import DTYPE_SIZES, max_numel
from .._layout import MAX_NDIM, Run
from ..errors import ShardInitError
from ._args import (
    PLAN_MODELS_HELP,
    Parser,
    human_bytes,
    plan_model_choice,
    positive,
    say,
    seed,
)
from .layout import (
    ByteSummary,
    LayoutPlan,
    ParamLayout,
    byte_summary,
    placements_text,
    plan_layout,
)
from .models import ParamEntry, describe, param_table

__all__ = ["add_command", "load_shapes", "peak_estimates", "run_plan"]

_UNIT = re.compile(r"^(.*?\.?\d+)\.")
_MAX_SIZE = 2**64 - 1  # the core's sizes are u64


def load_shapes(path: str, dtype: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Reads a JSON shapes file: ``{"name": [d0, d1, ...]}`` or
    ``{"name": {"shape": [...], "dtype": "bfloat16"}}``; dtypes by name, ``dtype`` where
    an entry names none.

    Raises:
        ShardInitError: unreadable file, invalid JSON or invalid entries.
    """
    try:
        data = json.loads(Path(path).read_text())
    except OSError as error:
        raise ShardInitError(f"cannot read shapes file {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ShardInitError(f"shapes file {path} is not valid JSON: {error}") from None
    if not isinstance(data, dict) or not data:
        raise ShardInitError(f"shapes file {path} must hold a non-empty JSON object")
    result: dict[str, tuple[tuple[int, ...], str]] = {}
    for name, entry in data.items():
        entry_dtype = dtype
        shape = entry
        if isinstance(entry, dict):
            shape = entry.get("shape")
            if "dtype" in entry:
                if entry["dtype"] not in DTYPE_SIZES:
                    raise ShardInitError(
                        f"shapes file {path}: {name}: dtype must be one of "
                        f"{', '.join(DTYPE_SIZES)}, got {entry['dtype']!r}"
                    )
                entry_dtype = entry["dtype"]
        result[name] = (
            _checked_shape(f"shapes file {path}: {name}", shape, entry_dtype),
            entry_dtype,
        )
    return result


def _checked_shape(where: str, shape: object, dtype: str) -> tuple[int, ...]:
    """``shape`` (a shapes file's entry) as a tuple, if it is a shape a parameter of
    ``dtype`` can have: the core's limits, as :class:`shardinit.ParamSpec` checks them.

    Raises:
        ShardInitError: naming ``where``, the field and the allowed range.
    """
    if not (
        isinstance(shape, list)
        and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
    ):
        raise ShardInitError(f"{where}: shape must be a list of non-negative ints, got {shape!r}")
    if len(shape) > MAX_NDIM:
        raise ShardInitError(f"{where}: shape must have at most {MAX_NDIM} dims, got {len(shape)}")
    for dim, size in enumerate(shape):
        if size > _MAX_SIZE:
            raise ShardInitError(
                f"{where}: shape[{dim}] must be in [0, 2^64 - 1], got {size} (about "
                f"2^{size.bit_length() - 1})"
            )
    numel = math.prod(shape)
    if numel > max_numel(dtype):
        raise ShardInitError(
            f"{where}: shape {shape} has {numel} elements; stream format v1 addresses at "
            f"most {max_numel(dtype)} elements of {dtype}"
        )
    return tuple(shape)


def _units(plan: LayoutPlan) -> list[list[ParamLayout]]:
    """FSDP units as the demo and benchmark wrap them: one per numbered block
    (``layers.3.``), then the root with everything else."""
    blocks: dict[str, list[ParamLayout]] = {}
    root: list[ParamLayout] = []
    for param in plan.params:
        match = _UNIT.match(param.name)
        if match:
            blocks.setdefault(match.group(1), []).append(param)
        else:
            root.append(param)
    return [*blocks.values(), root] if root else list(blocks.values())


def peak_estimates(plan: LayoutPlan, summary: ByteSummary) -> dict[str, int | None]:
    """Estimated peak parameter bytes on the busiest rank, per strategy (None: not
    modeled, i.e. FSDP1 with tensor or expert parallelism)."""
    estimates: dict[str, int | None] = dict.fromkeys(("fsdp1_cpu", "fsdp1_meta", "shardinit_fsdp1"))
    if plan.tp == 1 and plan.ep == 1:
        unit_bytes = [sum(p.nbytes for p in unit) for unit in _units(plan)]
        itemsize = max((p.itemsize for p in plan.params), default=4)
        shard_bytes = [math.ceil(size / itemsize / plan.world) * itemsize for size in unit_bytes]
        current, peak = plan.total_bytes(), plan.total_bytes()
        for size, shard in zip(unit_bytes, shard_bytes, strict=True):
            peak = max(peak, current + size)  # flat copy next to the originals
            current += shard - size
        estimates["fsdp1_cpu"] = peak
        current, peak = 0, 0
        for size, shard in zip(unit_bytes, shard_bytes, strict=True):
            peak = max(peak, current + 2 * size)  # unit materialized + its flat copy
            current += shard
        estimates["fsdp1_meta"] = peak
        # FSDP1 still allocates and flattens whole units; shardinit only fills them.
        estimates["shardinit_fsdp1"] = peak
    estimates["fsdp2"] = summary.max
    estimates["shardinit"] = summary.max
    return estimates


def format_runs(runs: Sequence[Sequence[Run]], shape: Sequence[int]) -> str:
    """``[0:512, :]``-style text for a local region (``+`` joins several runs)."""
    parts = []
    for dim_runs, size in zip(runs, shape, strict=True):
        if list(dim_runs) == [(0, size)]:
            parts.append(":")
        elif not dim_runs:
            parts.append("empty")
        else:
            parts.append("+".join(f"{a}:{b}" for a, b in dim_runs))
    return "[" + ", ".join(parts) + "]"


# ------------------------------------------------------------------------------ command

_STRATEGY_LABELS = {
    "fsdp1_cpu": "FSDP1, model built on CPU on every rank",
    "fsdp1_meta": "FSDP1, meta + param_init_fn per unit",
    "fsdp2": "FSDP2, meta + to_empty + reset_parameters",
    "shardinit_fsdp1": "FSDP1 + shardinit.fsdp1_param_init_fn",
    "shardinit": "FSDP2 + shardinit.materialize",
}


def _shown_ranks(world: int) -> list[int]:
    """The ranks whose regions and bytes print without ``--all-ranks`` on more than 8
    ranks: the first three, the middle one and the last two."""
    return sorted({0, 1, 2, world // 2, world - 2, world - 1})


def _rank(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rank (an integer), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a rank is >= 0, got {value}")
    return value


def add_command(commands: argparse._SubParsersAction[Parser]) -> Parser:
    """Adds ``shardinit plan`` and its arguments to ``commands``."""
    plan = commands.add_parser(
        "plan",
        help="per-rank regions, bytes and estimated peak memory; generates nothing",
        description="Per-rank local regions under FSDP2 (+TP, +EP), bytes per rank and "
        "estimated peak parameter memory per rank for each initialization strategy. No "
        "weights are generated, unless --generate asks for one rank's.",
    )
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=plan_model_choice, help=PLAN_MODELS_HELP)
    source.add_argument(
        "--shapes",
        metavar="FILE",
        help='JSON file: {"name": [d0, d1, ...]} or {"name": {"shape": [...], "dtype": ...}}',
    )
    plan.add_argument("--world", type=positive, required=True, help="number of ranks")
    plan.add_argument("--tp", type=positive, default=1, help="tensor-parallel degree")
    plan.add_argument("--ep", type=positive, default=1, help="expert-parallel degree (MoE models)")
    plan.add_argument(
        "--dtype",
        choices=tuple(DTYPE_SIZES),
        default="float32",
        help="parameter dtype (default float32)",
    )
    plan.add_argument(
        "--all-ranks", action="store_true", help="list regions and bytes of every rank"
    )
    plan.add_argument(
        "--generate",
        type=_rank,
        metavar="RANK",
        help="generate RANK's shards for real here and report time, bytes and peak RSS",
    )
    plan.add_argument("--seed", type=seed, default=0, help="seed for --generate (default 0)")
    return plan


def _build(args: argparse.Namespace) -> tuple[str, LayoutPlan, dict[str, ParamEntry]]:
    """(title, plan, entries by name) from the arguments.

    Raises:
        ShardInitError: bad shapes file, degrees out of range, rank out of range.
    """
    dtype = args.dtype
    if args.model is not None:
        entries = param_table(args.model)
        dtypes: dict[str, str] = {}
        title = describe(args.model)
    else:
        shapes = load_shapes(args.shapes, dtype)
        entries = [ParamEntry(name, shape, "linear") for name, (shape, _) in shapes.items()]
        dtypes = {name: entry_dtype for name, (_, entry_dtype) in shapes.items()}
        title = f"{args.shapes}: {len(shapes)} parameters"
    plan = plan_layout(entries, args.world, args.tp, args.ep, dtype=dtype, dtypes=dtypes)
    if args.generate is not None:
        if args.model is None:
            raise ShardInitError("--generate needs --model: a shapes file names no initializers")
        if args.generate >= args.world:
            raise ShardInitError(
                f"--generate {args.generate} is out of range: ranks are 0 .. {args.world - 1} "
                f"for --world {args.world}"
            )
    return title, plan, {entry.name: entry for entry in entries}


def run_plan(args: argparse.Namespace, parser: Parser) -> int:
    """``shardinit plan``: prints the layout, bytes and peak estimates (and generates one
    rank with ``--generate``); exit status 0."""
    try:
        title, plan, entries = _build(args)
    except ShardInitError as error:
        parser.error(str(error))
    mesh = "x".join(map(str, (plan.world // plan.tp, plan.tp) if plan.tp > 1 else (plan.world,)))
    say(f"shardinit plan: {title}")
    layout = "FSDP2 fully_shard" + (f" + {plan.tp}-way TP (mesh dp x tp)" if plan.tp > 1 else "")
    if plan.ep > 1:
        experts = "x".join(map(str, plan.fine_mesh if plan.tp > 1 else plan.fine_mesh[:2]))
        layout += f" + {plan.ep}-way EP (routed experts on mesh dp/ep x ep x tp = {experts})"
    say(f"  {layout} on {plan.world} rank(s), mesh {mesh}\n")
    ranks: Sequence[int] = range(plan.world)
    if not args.all_ranks and plan.world > 8:
        ranks = _shown_ranks(plan.world)
    summary = byte_summary(plan)
    _print_regions(plan, ranks)
    _print_bytes(plan, ranks, summary)
    _print_estimates(plan, summary)
    if args.generate is not None:
        _print_generated(plan, entries, args.generate, args.seed)
    return 0


def _groups(plan: LayoutPlan) -> dict[tuple[str, tuple[int, ...], str], list[ParamLayout]]:
    """Parameters with the same shape and layout in numbered blocks (``layers.*``)."""
    groups: dict[tuple[str, tuple[int, ...], str], list[ParamLayout]] = {}
    for param in plan.params:
        generic = re.sub(r"\.\d+\.", ".*.", param.name)
        key = (generic, param.shape, placements_text(param.placements))
        groups.setdefault(key, []).append(param)
    return groups


def _region_rows(plan: LayoutPlan, param: ParamLayout, ranks: Sequence[int]) -> Iterator[str]:
    """Rows of four ``rN [region]`` entries, computed as they print (``--all-ranks``
    streams: nothing is kept per rank)."""
    row: list[str] = []
    for position, rank in enumerate(ranks):
        if len(ranks) < plan.world and position == 3:
            row.append("...")
        row.append(f"r{rank} {format_runs(plan.runs(param, rank), param.shape)}")
        if len(row) >= 4:
            yield "      " + "  ".join(row)
            row = []
    if row:
        yield "      " + "  ".join(row)


def _print_regions(plan: LayoutPlan, ranks: Sequence[int]) -> None:
    """Each parameter's local region on each of ``ranks``; parameters with the same
    shape and layout in numbered blocks (``layers.{0..31}``) print once."""
    say("Local region of each rank (global index ranges per dim; ':' = whole dim):")
    for (generic, shape, placements), members in _groups(plan).items():
        label = generic if len(members) > 1 else members[0].name
        count = f" x{len(members)}" if len(members) > 1 else ""
        say(f"  {label}{count}  {tuple(shape)}  {placements}")
        for row in _region_rows(plan, members[0], ranks):
            say(row)


def _print_bytes(plan: LayoutPlan, ranks: Sequence[int], summary: ByteSummary) -> None:
    say("\nBytes of parameters per rank:")
    for rank in ranks:
        say(f"  rank {rank:>4}: {human_bytes(plan.rank_bytes(rank))}")
    if len(ranks) < plan.world:
        say(f"  ({plan.world - len(ranks)} more ranks; --all-ranks lists them)")
    busiest = summary.ranks_by_bytes[summary.max]
    lightest = summary.ranks_by_bytes[summary.min]
    say(
        f"  all {plan.world} ranks: max {human_bytes(summary.max)} ({busiest} ranks), "
        f"min {human_bytes(summary.min)} ({lightest} ranks), mean "
        f"{human_bytes(summary.total / plan.world)}; {len(summary.ranks_by_bytes)} distinct sizes"
    )
    say(f"  ranks holding no parameter bytes: {summary.empty_ranks}")
    say(f"  whole model: {human_bytes(plan.total_bytes())}")


def _print_estimates(plan: LayoutPlan, summary: ByteSummary) -> None:
    say("\nEstimated peak parameter memory per rank during init (busiest rank; add the")
    say("process baseline of an imported torch, ~0.5 GiB on CPU):")
    for key, value in peak_estimates(plan, summary).items():
        text = human_bytes(value) if value is not None else "n/a (FSDP1 with TP/EP not modeled)"
        say(f"  {_STRATEGY_LABELS[key]:<44} {text}")
    say("  FSDP2's own values are not layout-independent: on a CPU mesh every rank draws the")
    say("  same numbers; on CUDA they depend on the layout (docs/how-fsdp-initializes.md).")


def _print_generated(
    plan: LayoutPlan, entries: dict[str, ParamEntry], rank: int, seed_value: int
) -> None:
    from .generate import generate_rank, threads_note

    kinds = {name: entry.kind for name, entry in entries.items()}
    say(
        f"\nGenerating rank {rank} of {plan.world} here, for real (seed {seed_value}, "
        f"{threads_note()}):"
    )
    shards = generate_rank(plan, kinds, rank, seed_value)
    rate = shards.nbytes / shards.seconds / 2**20 if shards.seconds > 0 else float("inf")
    say(
        f"  {len(shards.tensors)} local shards, {human_bytes(shards.nbytes)} "
        f"(planned {human_bytes(plan.rank_bytes(rank))}) in {shards.seconds:.3f} s "
        f"({shards.cpu_seconds:.3f} s CPU) "
        f"({rate:.0f} MiB/s)"
    )
    if shards.peak_rss is not None:
        added = shards.peak_rss - shards.rss_before
        extra = added - shards.nbytes
        sign = "+" if extra >= 0 else "-"
        say(
            f"  RSS {human_bytes(shards.rss_before)} before, peak {human_bytes(shards.peak_rss)}:"
            f" {human_bytes(added)} added = the shards' bytes {sign} {human_bytes(abs(extra))}"
        )
    say(f"  slice fingerprint {shards.slice_fingerprint} (fp1 terms of the rank's shards;")
    say("  added over all ranks, each parameter's terms give its shardinit.fingerprint)")
