"""Where each rank's shards of a model lie under FSDP2 (+ TP, + EP), in closed form.

``shardinit plan`` answers questions about clusters of thousands of ranks, so nothing
here visits every rank: a rank's region and bytes follow from ``torch.chunk`` arithmetic
on its mesh coordinate (O(parameters)), and the byte summary over all ranks
(:func:`byte_summary`) evaluates one rank per *cell*: a box of mesh coordinates inside
which every parameter's chunk sizes are constant. The cells come from the few
coordinates where a ``torch.chunk`` changes from full chunks to the short one to empty
ones, so their number depends on the shapes, not on the world size.

The geometry is DTensor's, computed by the one torch-free region arithmetic
(:mod:`shardinit._layout`, whose :class:`~shardinit._layout.Split` materialize's
:func:`~shardinit._integration.placements.local_runs` converts torch placements to);
dtypes are named by their names (:data:`shardinit._dtypes.DTYPE_SIZES`), so that
planning imports no torch at all (seconds and hundreds of MiB), and tests/cli checks the
plan against ``local_runs`` rank by rank.

The mesh: ``world = dp * tp`` ranks, row-major over ``(dp // ep, ep, tp)`` (the *fine*
mesh). Dense parameters are laid out by FSDP2 over ``dp`` (the first two fine dims
together) and TP over ``tp``; routed-expert stacks are split over ``ep`` as well
(torchtitan's expert parallelism: EP borrows data-parallel ranks).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from .._dtypes import DTYPE_SIZES
from .._layout import Run, Split, chunk_bounds, layout_runs, split_length
from ..errors import ShardInitError
from .models import ParamEntry, tp_style

__all__ = [
    "ByteSummary",
    "LayoutPlan",
    "ParamLayout",
    "byte_summary",
    "placements_text",
    "plan_layout",
]


def placements_text(placements: Sequence[Split]) -> str:
    """``(Shard(dim=0),)``-style text, as torch prints a placements tuple."""
    inner = ", ".join(map(str, placements))
    return f"({inner},)" if len(placements) == 1 else f"({inner})"


@dataclass(frozen=True)
class ParamLayout:
    """One parameter: global shape, dtype, and its placements.

    Attributes:
        dtype: a dtype name, a key of :data:`shardinit._dtypes.DTYPE_SIZES`.
        mesh_dims: per placement, the fine mesh dims (consecutive) its mesh dim spans.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    mesh_dims: tuple[tuple[int, ...], ...]
    placements: tuple[Split, ...]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return DTYPE_SIZES[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes of the whole parameter."""
        return math.prod(self.shape) * self.itemsize

    @property
    def layout(self) -> ParamLayout:
        """This layout without the name: equal for every parameter laid out alike."""
        return ParamLayout("", self.shape, self.dtype, self.mesh_dims, self.placements)


@dataclass(frozen=True)
class LayoutPlan:
    """Layouts of a model's parameters on ``world`` ranks (``tp``-way tensor parallel,
    ``ep``-way expert parallel), computed per rank on demand."""

    world: int
    tp: int
    ep: int
    params: tuple[ParamLayout, ...]

    @property
    def fine_mesh(self) -> tuple[int, int, int]:
        """``(dp // ep, ep, tp)``: every parameter's mesh is made of these dims."""
        dp = self.world // self.tp
        return (dp // self.ep, self.ep, self.tp)

    def mesh_shape(self, param: ParamLayout) -> tuple[int, ...]:
        """The shape of ``param``'s device mesh."""
        fine = self.fine_mesh
        return tuple(math.prod(fine[d] for d in dims) for dims in param.mesh_dims)

    def coordinate(self, param: ParamLayout, rank: int) -> tuple[int, ...]:
        """``rank``'s coordinate in ``param``'s device mesh (row-major ranks)."""
        fine = _unravel(rank, self.fine_mesh)
        return tuple(
            _ravel([fine[d] for d in dims], self.fine_sizes(dims)) for dims in param.mesh_dims
        )

    def fine_sizes(self, dims: Sequence[int]) -> list[int]:
        """The sizes of fine mesh dims ``dims``."""
        fine = self.fine_mesh
        return [fine[d] for d in dims]

    def runs(self, param: ParamLayout, rank: int) -> list[list[Run]]:
        """Per tensor dim, the runs of global indices ``rank`` holds, in local order."""
        coordinate = self.coordinate(param, rank)
        return layout_runs(param.shape, self.mesh_shape(param), coordinate, param.placements)

    def local_shape(self, param: ParamLayout, rank: int) -> tuple[int, ...]:
        """The shape of ``rank``'s local shard of ``param``, by chunk arithmetic only."""
        lengths = list(param.shape)
        coordinate = self.coordinate(param, rank)
        for split, size, index in zip(
            param.placements, self.mesh_shape(param), coordinate, strict=True
        ):
            if split.dim is not None:
                lengths[split.dim] = split_length(lengths[split.dim], split, size, index)
        return tuple(lengths)

    @cached_property
    def distinct(self) -> Counter[ParamLayout]:
        """Parameters keyed by layout only (names dropped), with their multiplicity: a
        126-layer Llama has 12 distinct layouts."""
        return Counter(p.layout for p in self.params)

    def rank_bytes(self, rank: int) -> int:
        """Parameter bytes ``rank`` holds: chunk arithmetic per distinct layout."""
        return sum(
            count * math.prod(self.local_shape(p, rank)) * p.itemsize
            for p, count in self.distinct.items()
        )

    def counts_once(self, param: ParamLayout, rank: int) -> bool:
        """Whether ``rank`` holds the copy of its elements that a fingerprint counts:
        coordinate 0 on every mesh dim that replicates ``param``."""
        coordinate = self.coordinate(param, rank)
        return all(
            c == 0 for c, s in zip(coordinate, param.placements, strict=True) if s.dim is None
        )

    def total_bytes(self) -> int:
        """Bytes of the whole model."""
        return sum(p.nbytes for p in self.params)


def _unravel(rank: int, sizes: Sequence[int]) -> list[int]:
    coordinate = []
    for size in reversed(sizes):
        rank, index = divmod(rank, size)
        coordinate.append(index)
    return coordinate[::-1]


def _ravel(coordinate: Sequence[int], sizes: Sequence[int]) -> int:
    index = 0
    for c, size in zip(coordinate, sizes, strict=True):
        index = index * size + c
    return index


def _chunk_length(length: int, chunks: int, index: int) -> int:
    begin, end = chunk_bounds(length, chunks, index)
    return end - begin


# --------------------------------------------------------------------- all ranks at once


@dataclass(frozen=True)
class ByteSummary:
    """Parameter bytes per rank over all ranks of a plan.

    Attributes:
        ranks_by_bytes: bytes held -> number of ranks holding exactly that many.
    """

    ranks_by_bytes: dict[int, int]

    @property
    def min(self) -> int:
        """The fewest bytes any rank holds."""
        return min(self.ranks_by_bytes)

    @property
    def max(self) -> int:
        """The most bytes any rank holds (the busiest rank)."""
        return max(self.ranks_by_bytes)

    @property
    def empty_ranks(self) -> int:
        """Ranks that hold no parameter bytes at all."""
        return self.ranks_by_bytes.get(0, 0)

    @property
    def total(self) -> int:
        """Bytes summed over every rank (replicated copies counted on each rank)."""
        return sum(nbytes * count for nbytes, count in self.ranks_by_bytes.items())


def _breakpoints(length: int, chunks: int) -> set[int]:
    """Chunk indices where ``torch.chunk(length items, chunks)`` changes chunk size:
    full chunks before, the short one (if any) at, empty ones after."""
    if length == 0:
        return set()
    full = length // -(-length // chunks)
    return {c for c in (full, full + 1) if 0 < c < chunks}


def _param_breakpoints(plan: LayoutPlan, param: ParamLayout) -> list[set[int]]:
    """Per fine mesh dim, the coordinates where ``param``'s local shape may change.

    Along each of its mesh dims, a parameter's chunk sizes are constant between the
    breakpoints of every length the split can see there (the lengths earlier mesh dims
    leave, a handful). A breakpoint ``b`` on a mesh dim made of several fine dims becomes,
    unravelled to ``(x0, .., xk)``: ``x0, x0 + 1`` on the first fine dim, and so on, ``xk``
    on the last; the boxes these cut are on one side of ``b`` each.
    """
    fine: list[set[int]] = [set() for _ in plan.fine_mesh]
    lengths: list[set[int]] = [{size} for size in param.shape]
    for split, dims in zip(param.placements, param.mesh_dims, strict=True):
        if split.dim is None:
            continue
        sizes = plan.fine_sizes(dims)
        chunks = math.prod(sizes)
        seen: set[int] = set()
        for length in lengths[split.dim]:
            points: set[int] = set()
            for j in range(split.split_factor):
                points |= _breakpoints(_chunk_length(length, split.split_factor, j), chunks)
            for index in points | {0}:
                seen.add(split_length(length, split, chunks, index))
            for point in points:
                coordinate = _unravel(point, sizes)
                for position, (dim, x) in enumerate(zip(dims, coordinate, strict=True)):
                    last = position == len(dims) - 1
                    fine[dim] |= {x} if last else {x, x + 1}
        lengths[split.dim] = seen
    return fine


def byte_summary(plan: LayoutPlan) -> ByteSummary:
    """Bytes per rank over all ``plan.world`` ranks without visiting each rank.

    The fine mesh is cut at every parameter's breakpoints into boxes of coordinates in
    which every chunk size is constant; one rank per box is evaluated and counts for the
    whole box. The cost grows with the number of distinct shapes, not with the world.
    """
    cuts: list[set[int]] = [{0} for _ in plan.fine_mesh]
    for param in plan.distinct:
        for dim, points in enumerate(_param_breakpoints(plan, param)):
            cuts[dim] |= {p for p in points if 0 < p < plan.fine_mesh[dim]}
    intervals = []
    for dim, size in enumerate(plan.fine_mesh):
        starts = sorted(cuts[dim])
        intervals.append(list(zip(starts, [*starts[1:], size], strict=True)))
    ranks_by_bytes: Counter[int] = Counter()
    for box in itertools.product(*intervals):
        rank = _ravel([start for start, _ in box], plan.fine_mesh)
        ranks_by_bytes[plan.rank_bytes(rank)] += math.prod(stop - start for start, stop in box)
    return ByteSummary(dict(ranks_by_bytes))


# ---------------------------------------------------------------------------- placements


def _tp_dim(entry: ParamEntry) -> int | None:
    """The tensor dim TP splits: a Linear's rows (column-wise) or columns (row-wise);
    an expert stack's hidden dim (dim 1 of ``w1_EFD``/``w3_EFD``, dim 2 of ``w2_EDF``)."""
    if entry.kind == "experts":
        return 2 if entry.name.rpartition(".")[2].startswith("w2") else 1
    style = tp_style(entry.name) if len(entry.shape) == 2 else None
    return None if style is None else (0 if style == "colwise" else 1)


def _layout(entry: ParamEntry, dtype: str, tp: int, ep: int, dp: int) -> ParamLayout:
    """FSDP2 over ``dp`` outermost, then EP (expert stacks), then TP, as torchtitan nests
    them. FSDP2 shards dim 0, or dim 1 of an expert stack when EP is on and the dp ranks
    outnumber the experts (torchtitan's rule); when an inner split shards the same dim,
    FSDP2's placement is ``_StridedShard`` with the inner splits' sizes as factor."""
    if not entry.shape:
        replicated = ((0, 1),) if tp == 1 else ((0, 1), (2,))
        return ParamLayout(entry.name, (), dtype, replicated, (Split(),) * len(replicated))
    experts = entry.kind == "experts" and ep > 1
    inner: list[tuple[tuple[int, ...], int, int | None]] = []  # (fine dims, size, dim)
    if experts:
        inner.append(((1,), ep, 0))
    if tp > 1:
        inner.append(((2,), tp, _tp_dim(entry)))
    fsdp_dim = 1 if experts and dp > entry.shape[0] else 0
    factor = math.prod(size for _, size, dim in inner if dim == fsdp_dim)
    fsdp = ((0,) if experts else (0, 1), Split(fsdp_dim, factor))
    splits = [fsdp, *((dims, Split(dim)) for dims, _, dim in inner)]
    return ParamLayout(
        entry.name,
        entry.shape,
        dtype,
        tuple(dims for dims, _ in splits),
        tuple(split for _, split in splits),
    )


def _divisors(number: int) -> str:
    found = [d for d in range(1, math.isqrt(number) + 1) if number % d == 0]
    every = sorted({*found, *(number // d for d in found)})
    shown = ", ".join(map(str, every[:12]))
    return shown + (f", ... ({len(every)} in all)" if len(every) > 12 else "")


def _check_mesh(entries: Sequence[ParamEntry], world: int, tp: int, ep: int) -> None:
    if world % tp:
        raise ShardInitError(
            f"--tp {tp} must divide --world {world} (divisors of {world}: {_divisors(world)})"
        )
    dp = world // tp
    stacks = [e for e in entries if e.kind == "experts"]
    if ep > 1 and not stacks:
        raise ShardInitError(f"--ep {ep}: the model has no routed experts; allowed: --ep 1")
    if dp % ep:
        raise ShardInitError(
            f"--ep {ep} must divide --world / --tp = {dp} (divisors of {dp}: {_divisors(dp)})"
        )
    if stacks and stacks[0].shape[0] % ep:
        experts = stacks[0].shape[0]
        raise ShardInitError(
            f"--ep {ep} must divide the {experts} routed experts "
            f"(divisors of {experts}: {_divisors(experts)})"
        )
    split = [(e, e.shape[d]) for e in entries if (d := _tp_dim(e)) is not None]
    if tp > 1 and split:
        entry, smallest = min(split, key=lambda pair: pair[1])
        if tp > smallest:
            raise ShardInitError(
                f"--tp {tp} is larger than the dim tensor parallelism splits in "
                f"{entry.name} (shape {entry.shape}); allowed: 1 <= --tp <= {smallest}"
            )


def plan_layout(
    entries: Sequence[ParamEntry],
    world: int,
    tp: int = 1,
    ep: int = 1,
    *,
    dtype: str = "float32",
    dtypes: Mapping[str, str] | None = None,
) -> LayoutPlan:
    """The FSDP2 (+ TP, + EP) layout of ``entries`` on ``world`` ranks.

    Args:
        entries: the parameters (:func:`shardinit.cli.models.param_table`).
        world: number of ranks, >= 1.
        tp: tensor-parallel degree, dividing ``world`` and at most every dim TP splits.
        ep: expert-parallel degree (models with routed experts), dividing
            ``world // tp`` and the number of experts.
        dtype: the parameters' dtype, by name (a key of
            :data:`shardinit._dtypes.DTYPE_SIZES`).
        dtypes: per-name exceptions to ``dtype`` (a shapes file's entries), by name.

    Returns:
        The plan (per-rank regions and bytes are computed on demand).

    Raises:
        ShardInitError: a degree out of range, naming the argument and what is allowed.
    """
    if world < 1 or tp < 1 or ep < 1:
        raise ShardInitError(f"--world {world}, --tp {tp} and --ep {ep} must be >= 1")
    _check_mesh(entries, world, tp, ep)
    dp = world // tp
    dtypes = dtypes or {}
    params = tuple(_layout(e, dtypes.get(e.name, dtype), tp, ep, dp) for e in entries)
    return LayoutPlan(world, tp, ep, params)
