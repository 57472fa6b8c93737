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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.distributed.tensor.placement_types import Placement, Replicate, Shard

from .._integration.placements import Run, local_runs
from .._torch_compat import strided_shard
from ..errors import ShardInitError
from ._args import MODELS_HELP, Parser, human_bytes, model_choice, positive, say
from .models import describe, param_shapes, tp_style

__all__ = ["Plan", "add_command", "load_shapes", "make_plan", "run_plan"]

_UNIT = re.compile(r"^(.*?\.?\d+)\.")

_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True)
class ParamPlan:
    """One parameter: global shape, dtype, placements and every rank's local runs."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    placements: tuple[Placement, ...]
    runs: tuple[tuple[tuple[Run, ...], ...], ...]  # [rank][dim] -> runs

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def nbytes(self) -> int:
        """Bytes of the whole parameter."""
        return math.prod(self.shape) * self.itemsize

    def local_numel(self, rank: int) -> int:
        """Elements ``rank`` holds."""
        return math.prod(sum(b - a for a, b in dim) for dim in self.runs[rank])


@dataclass(frozen=True)
class Plan:
    """Layouts and memory of a model on ``world`` ranks (``tp``-way tensor parallel)."""

    world: int
    tp: int
    mesh_shape: tuple[int, ...]
    params: tuple[ParamPlan, ...]

    def rank_bytes(self, rank: int) -> int:
        """Parameter bytes ``rank`` holds."""
        return sum(p.local_numel(rank) * p.itemsize for p in self.params)

    def total_bytes(self) -> int:
        """Bytes of the whole model."""
        return sum(p.nbytes for p in self.params)

    def units(self) -> list[list[ParamPlan]]:
        """FSDP units as the demo and benchmark wrap them: one per numbered block
        (``layers.3.``), then the root with everything else."""
        blocks: dict[str, list[ParamPlan]] = {}
        root: list[ParamPlan] = []
        for param in self.params:
            match = _UNIT.match(param.name)
            if match:
                blocks.setdefault(match.group(1), []).append(param)
            else:
                root.append(param)
        return [*blocks.values(), root] if root else list(blocks.values())

    def peak_estimates(self) -> dict[str, int | None]:
        """Estimated peak parameter bytes on the busiest rank, per strategy (None: not
        modeled, i.e. FSDP1 with tensor parallelism)."""
        shard_peak = max(self.rank_bytes(r) for r in range(self.world))
        estimates: dict[str, int | None] = {}
        if self.tp == 1:
            unit_bytes = [sum(p.nbytes for p in unit) for unit in self.units()]
            itemsize = max((p.itemsize for p in self.params), default=4)
            shard_bytes = [
                math.ceil(size / itemsize / self.world) * itemsize for size in unit_bytes
            ]
            current, peak = self.total_bytes(), self.total_bytes()
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
        else:
            estimates["fsdp1_cpu"] = None
            estimates["fsdp1_meta"] = None
            estimates["shardinit_fsdp1"] = None
        estimates["fsdp2"] = shard_peak
        estimates["shardinit"] = shard_peak
        return estimates


def load_shapes(path: str, dtype: torch.dtype) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Reads a JSON shapes file: ``{"name": [d0, d1, ...]}`` or
    ``{"name": {"shape": [...], "dtype": "bfloat16"}}``.

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
    result: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for name, entry in data.items():
        entry_dtype = dtype
        shape = entry
        if isinstance(entry, dict):
            shape = entry.get("shape")
            if "dtype" in entry:
                if entry["dtype"] not in _DTYPES:
                    raise ShardInitError(
                        f"shapes file {path}: {name}: dtype must be one of "
                        f"{', '.join(_DTYPES)}, got {entry['dtype']!r}"
                    )
                entry_dtype = _DTYPES[entry["dtype"]]
        if not (
            isinstance(shape, list)
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
        ):
            raise ShardInitError(
                f"shapes file {path}: {name}: shape must be a list of non-negative ints, "
                f"got {shape!r}"
            )
        result[name] = (tuple(shape), entry_dtype)
    return result


def _placements(name: str, shape: Sequence[int], tp: int) -> tuple[Placement, ...]:
    if tp == 1:
        return (Shard(0),) if shape else (Replicate(),)
    if not shape:
        return (Replicate(), Replicate())
    style = tp_style(name) if len(shape) == 2 else None
    if style == "colwise":
        return (strided_shard(0, tp), Shard(0))
    if style == "rowwise":
        return (Shard(0), Shard(1))
    return (Shard(0), Replicate())


def make_plan(
    shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], world: int, tp: int = 1
) -> Plan:
    """The FSDP2 (+ TP) layout of ``shapes`` on ``world`` ranks.

    Args:
        shapes: name -> (global shape, dtype).
        world: number of ranks, >= 1.
        tp: tensor-parallel degree, dividing ``world``.

    Returns:
        The plan.

    Raises:
        ShardInitError: ``tp`` does not divide ``world``.
    """
    if world < 1 or tp < 1 or world % tp:
        raise ShardInitError(f"--tp {tp} must divide --world {world}")
    mesh_shape = (world,) if tp == 1 else (world // tp, tp)
    params = []
    for name, (shape, dtype) in shapes.items():
        placements = _placements(name, shape, tp)
        runs = []
        for rank in range(world):
            coordinate = (rank,) if tp == 1 else (rank // tp, rank % tp)
            per_dim = local_runs(shape, mesh_shape, coordinate, placements, name=name)
            runs.append(tuple(tuple(dim) for dim in per_dim))
        params.append(ParamPlan(name, tuple(shape), dtype, placements, tuple(runs)))
    return Plan(world, tp, mesh_shape, tuple(params))


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


def add_command(commands: argparse._SubParsersAction[Parser]) -> Parser:
    """Adds ``shardinit plan`` and its arguments to ``commands``."""
    plan = commands.add_parser(
        "plan",
        help="per-rank regions, bytes and estimated peak memory; generates nothing",
        description="Per-rank local regions under FSDP2 (+TP), bytes per rank and estimated "
        "peak parameter memory per rank for each initialization strategy. No weights are "
        "generated.",
    )
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=model_choice, help=MODELS_HELP)
    source.add_argument(
        "--shapes",
        metavar="FILE",
        help='JSON file: {"name": [d0, d1, ...]} or {"name": {"shape": [...], "dtype": ...}}',
    )
    plan.add_argument("--world", type=positive, required=True, help="number of ranks")
    plan.add_argument("--tp", type=positive, default=1, help="tensor-parallel degree")
    plan.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16", "float64"),
        default="float32",
        help="parameter dtype (default float32)",
    )
    plan.add_argument("--all-ranks", action="store_true", help="list regions of every rank")
    return plan


def run_plan(args: argparse.Namespace, parser: Parser) -> int:
    """``shardinit plan``: prints the layout, bytes and peak estimates; exit status 0."""
    dtype = _DTYPES[args.dtype]
    try:
        if args.model is not None:
            shapes = {name: (shape, dtype) for name, shape in param_shapes(args.model).items()}
            title = describe(args.model)
        else:
            shapes = load_shapes(args.shapes, dtype)
            title = f"{args.shapes}: {len(shapes)} parameters"
        plan = make_plan(shapes, args.world, args.tp)
    except ShardInitError as error:
        parser.error(str(error))
    mesh = "x".join(map(str, plan.mesh_shape))
    say(f"shardinit plan: {title}")
    layout = "FSDP2 fully_shard" + (f" + {plan.tp}-way TP (mesh dp x tp)" if plan.tp > 1 else "")
    say(f"  {layout} on {plan.world} rank(s), mesh {mesh}; nothing is generated\n")
    ranks = list(range(plan.world))
    if not args.all_ranks and plan.world > 8:
        ranks = [0, 1, 2, plan.world - 2, plan.world - 1]
    _print_regions(plan, ranks)
    _print_bytes(plan, ranks)
    _print_estimates(plan)
    return 0


def _print_regions(plan: Plan, ranks: list[int]) -> None:
    """Each parameter's local region on each of ``ranks``; parameters with the same
    shape and layout in numbered blocks (``layers.{0..31}``) print once."""
    groups: dict[tuple[str, tuple[int, ...], str], list[ParamPlan]] = {}
    for param in plan.params:
        generic = re.sub(r"\.\d+\.", ".*.", param.name)
        groups.setdefault((generic, param.shape, str(param.placements)), []).append(param)
    say("Local region of each rank (global index ranges per dim; ':' = whole dim):")
    for (generic, shape, placements), members in groups.items():
        label = generic if len(members) > 1 else members[0].name
        count = f" x{len(members)}" if len(members) > 1 else ""
        say(f"  {label}{count}  {tuple(shape)}  {placements}")
        regions = [f"r{r} {format_runs(members[0].runs[r], shape)}" for r in ranks]
        if len(ranks) < plan.world:
            regions.insert(3, "...")
        for start in range(0, len(regions), 4):
            say("      " + "  ".join(regions[start : start + 4]))


def _print_bytes(plan: Plan, ranks: list[int]) -> None:
    say("\nBytes of parameters per rank:")
    for rank in ranks:
        say(f"  rank {rank:>4}: {human_bytes(plan.rank_bytes(rank))}")
    if len(ranks) < plan.world:
        say(f"  ({plan.world - len(ranks)} more ranks; --all-ranks lists them)")
    say(f"  whole model: {human_bytes(plan.total_bytes())}")


def _print_estimates(plan: Plan) -> None:
    say("\nEstimated peak parameter memory per rank during init (busiest rank; add the")
    say("process baseline of an imported torch, ~0.5 GiB on CPU):")
    for key, value in plan.peak_estimates().items():
        text = human_bytes(value) if value is not None else "n/a (FSDP1 with TP not modeled)"
        say(f"  {_STRATEGY_LABELS[key]:<44} {text}")
    say("  FSDP2's own values are not layout-independent: on a CPU mesh every rank draws the")
    say("  same numbers; on CUDA they depend on the layout (docs/how-fsdp-initializes.md).")
