"""Region arithmetic: boxes of a tensor, the box a view covers, and how the elements of
one view land in another when values are copied.

A region is a *box*: one half-open ``(start, stop)`` per dim of the base tensor. Copies
(``copy_``, ``cat``, ``stack``, ``clone``) are followed in *flat runs*: the elements of a
view, in the view's own row-major order, as runs of flat positions of its base.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import torch

from .._caches import BoundedMap, cached
from .._layout import Box
from .._torch_compat import stored_contiguous, stored_strides, torch_function_disabled
from .cannot import Cannot

__all__ = [
    "Box",
    "box_runs",
    "contains",
    "cut_by",
    "flat_range_boxes",
    "intersect",
    "map_runs",
    "map_runs_from",
    "moved_rows",
    "row_shift",
    "view_region",
    "view_runs",
    "view_span",
    "whole",
    "whole_region",
]

#: A run of flat (row-major) positions ``[start, stop)``.
FlatRun = tuple[int, int]


def whole(shape: Sequence[int]) -> Box:
    """The box of all of a tensor of ``shape``."""
    return _whole(tuple(shape))  # (asked at most writes, of a model's few shapes: kept)


@cached
def _whole(shape: tuple[int, ...]) -> Box:
    return tuple(zip(itertools.repeat(0), map(int, shape)))


def intersect(a: Box, b: Box) -> Box | None:
    """The common box of ``a`` and ``b``, or None when they do not meet."""
    box = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))
    if any(start >= stop for start, stop in box):
        return None
    return box


def contains(outer: Box, inner: Box) -> bool:
    """Whether ``inner`` lies inside ``outer``."""
    for (o0, o1), (i0, i1) in zip(outer, inner, strict=True):  # noqa: SIM110 (no generator: asked often)
        if i0 < o0 or o1 < i1:
            return False
    return True


def cut_by(box: Box, regions: Sequence[Box], max_parts: int = 1 << 10) -> list[Box] | None:
    """``box`` cut along every boundary of ``regions`` inside it: parts that each lie
    wholly inside or wholly outside every region (row-major order). None past
    ``max_parts`` parts."""
    cuts: list[list[int]] = []
    for dim, (start, stop) in enumerate(box):
        inner = {b for region in regions for b in region[dim] if start < b < stop}
        cuts.append([start, *sorted(inner), stop])
    if math.prod(len(c) - 1 for c in cuts) > max_parts:
        return None
    spans = [list(itertools.pairwise(c)) for c in cuts]
    return [tuple(part) for part in itertools.product(*spans)]


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    """The strides of a row-major (contiguous) tensor of ``shape``, in elements."""
    strides = [1] * len(shape)
    for dim in range(len(shape) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * max(shape[dim + 1], 1)
    return strides


def view_region(
    view: torch.Tensor, base: torch.Tensor
) -> tuple[Box, tuple[int | None, ...]] | None:
    """The box of ``base`` (contiguous, same storage) that ``view`` covers.

    Returns:
        ``(box, axes)``: ``axes[k]`` is the base dim view dim ``k`` runs along, or None
        (size 1, or it runs across several dims as in ``view(-1)``); None when the view
        has no elements.

    A contiguous view of all of ``base`` (``w.view(4, 8, 16)``, ``w.reshape(2, -1)``) is
    all of it whatever dims it splits or merges: its elements are the base's, one to one
    in row-major order (so a random fill, drawn by flat element index, is the same), and
    its dims that run along no single base dim are None.

    Raises:
        Cannot: the view's elements are not a box of the base (a strided slice, an
            expanded view, overlapping dims).
    """
    with torch_function_disabled():  # the tensors' own layouts (see the function below)
        return _view_region(view, base)


def _view_region(
    view: torch.Tensor, base: torch.Tensor
) -> tuple[Box, tuple[int | None, ...]] | None:
    if view.numel() == 0:
        return None
    shape = tuple(base.shape)
    if view is base:  # the whole tensor (most init code writes): each dim along itself
        return whole_region(shape)
    # The answer is a function of the two layouts alone (a model writes views of a few),
    # and a view some rows further is the same view moved along dim 0 (a row loop's
    # views, one layout: :func:`row_shift`).
    base_strides, view_shape, view_strides = (
        stored_strides(base),
        tuple(view.shape),
        stored_strides(view),
    )
    rel = int(view.storage_offset() - base.storage_offset())
    rows, rest = row_shift(shape, base_strides, rel, view_span(view_shape, view_strides))
    key = (view_shape, view_strides, rest, shape, base_strides)
    kept = _REGIONS.get(key)
    if kept is None:
        try:
            kept = (_moved_region(_region_of(view, base), -rows), "")
        except Cannot as cannot:
            kept = (None, cannot.reason)
        _REGIONS.put(key, kept)
    if kept[0] is None:
        raise Cannot(kept[1])
    return _moved_region(kept[0], rows)


def row_shift(
    shape: tuple[int, ...], strides: tuple[int, ...], rel: int, span: int
) -> tuple[int, int]:
    """``(rows, rest)`` with ``rel = rows * row + rest``, ``row`` the elements of one
    index of dim 0 of the row-major (contiguous) tensor of ``shape`` and ``strides``,
    and ``0 <= rest < row``: a view whose elements run from ``rel`` to ``rel + span``
    inside that tensor holds the elements of the same view started at ``rest``, each
    ``rows`` further along dim 0 and at the same coordinates of the other dims. So what
    is asked of a view's layout (its box, where its elements lie) is asked once for a
    loop over rows. ``(0, rel)`` (no move) for a tensor that is not row-major, a 0-d one,
    or a view that does not lie inside it (a base that views part of its storage)."""
    row = _row_elements(shape, strides)
    if not row or rel < 0 or rel + span >= row * shape[0]:
        return 0, rel
    return divmod(rel, row)


def view_span(shape: Sequence[int], strides: Sequence[int]) -> int:
    """How far past its first element a view's last one lies (``-1``: no element;
    a negative stride, which torch's views do not make: none either)."""
    if any(stride < 0 for stride in strides):
        return -1
    return sum((size - 1) * stride for size, stride in zip(shape, strides, strict=True))


@cached
def _row_elements(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The elements of one index of dim 0 of a tensor of ``shape`` and ``strides`` when
    it is row-major (its dim-0 stride), else 0."""
    if not shape or tuple(contiguous_strides(shape)) != tuple(strides):
        return 0
    return int(strides[0])


def moved_rows(box: Box, rows: int) -> Box:
    """``box`` moved ``rows`` along dim 0 (:func:`row_shift`)."""
    if not rows:
        return box
    (start, stop), *rest = box
    return ((start + rows, stop + rows), *rest)


def _moved_region(
    region: tuple[Box, tuple[int | None, ...]], rows: int
) -> tuple[Box, tuple[int | None, ...]]:
    return region if not rows else (moved_rows(region[0], rows), region[1])


@cached
def whole_region(shape: tuple[int, ...]) -> tuple[Box, tuple[int | None, ...]] | None:
    """:func:`view_region` of a contiguous tensor of ``shape`` viewed whole: each dim
    along itself (None for a dim of size 1); None when it has no elements. Kept by
    shape: a model's thousands of parameters have a few."""
    if any(size == 0 for size in shape):
        return None
    return tuple((0, size) for size in shape), tuple(
        None if size == 1 else dim for dim, size in enumerate(shape)
    )


#: :func:`view_region` of non-empty views by layout: the region, or why there is none.
_REGIONS: BoundedMap[tuple[object, ...], tuple[tuple[Box, tuple[int | None, ...]] | None, str]] = (
    BoundedMap()
)


def _region_of(view: torch.Tensor, base: torch.Tensor) -> tuple[Box, tuple[int | None, ...]]:
    try:
        return _box_of(view, base)
    except Cannot:
        if _all_in_order(view, base):
            return tuple((0, size) for size in base.shape), tuple(None for _ in view.shape)
        reordered = _reordered_box(view, base)
        if reordered is None:
            raise
        return reordered


def _reordered_box(
    view: torch.Tensor, base: torch.Tensor
) -> tuple[Box, tuple[int | None, ...]] | None:
    """The box whose elements ``view`` holds each once in another order than the base's
    (``w.unfold(0, k, k)``: dim 0 split into tiles and their rows, the rows moved last;
    ``w.view(4, 3, 5).permute(1, 0, 2)``), or None when it holds no box or some element
    twice (:class:`Cannot`: an ``unfold`` whose windows overlap, an expanded view).

    The view's dims, by stride, merged where one continues the next, are the dims of a
    view in the base's row-major order that holds the same elements (each once where
    every stride reaches past the span of the dims below it); that one is a box or not.
    A view dim runs along a base dim where it alone spans the box's extent there."""
    dims = sorted(
        (int(stride), int(size))
        for size, stride in zip(view.shape, stored_strides(view), strict=True)
        if size != 1
    )
    atoms: list[list[int]] = []
    for stride, size in dims:
        if stride <= 0:
            raise Cannot("the view holds some element more than once (an expanded view)")
        if atoms and stride < atoms[-1][0] * atoms[-1][1]:  # (an overlap, or a gap)
            raise Cannot(
                "the view's dims interleave: it holds some element more than once "
                "(overlapping windows, as unfold with a step below its size makes) or "
                "elements that are no box of the tensor"
            )
        if atoms and stride == atoms[-1][0] * atoms[-1][1]:
            atoms[-1][1] *= size  # continues the dim below: one run
        else:
            atoms.append([stride, size])
    atoms.reverse()  # row-major: the largest stride first
    ordered = base.as_strided(
        [size for _, size in atoms], [stride for stride, _ in atoms], view.storage_offset()
    )
    try:
        box, _ = _box_of(ordered, base)
    except Cannot:
        return None
    extents = [stop - start for start, stop in box]
    cstride = contiguous_strides(tuple(base.shape))
    axes: list[int | None] = []
    for size, stride in zip(view.shape, stored_strides(view), strict=True):
        along = [
            dim for dim in range(len(extents))
            if size > 1 and stride == cstride[dim] and size == extents[dim]
        ]  # fmt: skip
        axes.append(along[-1] if along else None)
    return box, tuple(axes)


def _all_in_order(view: torch.Tensor, base: torch.Tensor) -> bool:
    """Whether ``view`` holds every element of ``base`` (contiguous) in row-major order."""
    return bool(
        stored_contiguous(view)
        and view.storage_offset() == base.storage_offset()
        and view.numel() == base.numel()
    )


def _box_of(view: torch.Tensor, base: torch.Tensor) -> tuple[Box, tuple[int | None, ...]]:
    """:func:`view_region` of a non-empty view, dim by dim."""
    shape = tuple(base.shape)
    cstride = contiguous_strides(shape)
    rel = view.storage_offset() - base.storage_offset()
    if not 0 <= rel < max(base.numel(), 1):
        raise Cannot("the view starts outside the tensor")
    start = [
        int(rel // cstride[dim] % max(shape[dim], 1)) if shape[dim] else 0
        for dim in range(len(shape))
    ]
    count = [1] * len(shape)
    used = [False] * len(shape)
    axes: list[int | None] = []
    for size, stride in zip(view.shape, stored_strides(view), strict=True):
        if size == 1:
            axes.append(None)
            continue
        inner = [d for d in range(len(shape)) if cstride[d] == stride and shape[d] > 1]
        if not inner:
            raise Cannot(f"a view dim of stride {stride} runs along no dim of the tensor")
        dim = inner[-1]
        if not used[dim] and start[dim] + size <= shape[dim]:
            used[dim] = True
            count[dim] = size
            axes.append(dim)
            continue
        _merge_dims(dim, size, shape, start, count, used)
        axes.append(None)
    box = tuple((int(s), int(s + c)) for s, c in zip(start, count, strict=True))
    if math.prod(count) != view.numel():
        raise Cannot("the view's elements are not a box of the tensor")
    return box, tuple(axes)


def _merge_dims(
    dim: int, size: int, shape: Sequence[int], start: list[int], count: list[int], used: list[bool]
) -> None:
    """A view dim of ``size`` running across base dims ``dim, dim - 1, ...``: each inner
    one must be whole."""
    remaining = size
    while True:
        if dim < 0 or used[dim]:
            raise Cannot("a view dim runs across dims that are not whole")
        used[dim] = True
        if start[dim] + remaining <= shape[dim]:
            count[dim] = remaining
            return
        if start[dim] != 0 or remaining % shape[dim]:
            raise Cannot("a view dim runs across dims that are not whole")
        count[dim] = shape[dim]
        remaining //= shape[dim]
        dim -= 1


def flat_range_boxes(shape: Sequence[int], start: int, stop: int) -> list[tuple[int, Box]]:
    """Splits flat elements ``[start, stop)`` of a row-major tensor of ``shape`` into
    boxes, in order; each with its offset from ``start``.

    Example:
        >>> flat_range_boxes((3, 4), 2, 9)
        [(0, ((0, 1), (2, 4))), (2, ((1, 2), (0, 4))), (6, ((2, 3), (0, 1)))]
    """
    shape = tuple(shape)
    if start >= stop:
        return []
    if len(shape) <= 1:
        return [(0, ((start, stop),) if shape else ())]
    inner = math.prod(shape[1:])
    pieces: list[tuple[int, Box]] = []
    row, offset = divmod(start, inner)
    position = start
    if offset:  # a partial first row
        end = min(stop, (row + 1) * inner)
        for sub_offset, sub in flat_range_boxes(shape[1:], offset, end - row * inner):
            pieces.append((position - start + sub_offset, ((row, row + 1), *sub)))
        position = end
        row += 1
    full_rows = (stop - position) // inner
    if full_rows:
        pieces.append((position - start, ((row, row + full_rows), *((0, s) for s in shape[1:]))))
        position += full_rows * inner
        row += full_rows
    if position < stop:  # a partial last row
        for sub_offset, sub in flat_range_boxes(shape[1:], 0, stop - position):
            pieces.append((position - start + sub_offset, ((row, row + 1), *sub)))
    return pieces


def box_runs(box: Box, shape: Sequence[int]) -> list[FlatRun]:
    """The flat runs of ``box`` of a row-major tensor of ``shape``, in the box's own
    row-major order (adjacent runs merged).

    Example:
        >>> box_runs(((1, 3), (0, 4)), (3, 4)), box_runs(((0, 2), (1, 3)), (3, 4))
        ([(4, 12)], [(1, 3), (5, 7)])
    """
    if any(start >= stop for start, stop in box):
        return []
    strides = contiguous_strides(shape)
    # Trailing dims the box covers whole (and the first partial one) form one run.
    inner = len(box)
    while inner > 0 and box[inner - 1] == (0, shape[inner - 1]):
        inner -= 1
    split = max(inner - 1, 0)
    length = math.prod(stop - start for start, stop in box[split:])
    runs: list[FlatRun] = []
    for index in itertools.product(*(range(start, stop) for start, stop in box[:split])):
        first = sum(i * s for i, s in zip(index, strides, strict=False))
        first += sum(start * strides[d] for d, (start, _) in enumerate(box) if d >= split)
        if runs and runs[-1][1] == first:
            runs[-1] = (runs[-1][0], first + length)
        else:
            runs.append((first, first + length))
    return runs


def view_runs(view: torch.Tensor, base: torch.Tensor) -> list[FlatRun]:
    """The elements of ``view`` (same storage as the contiguous ``base``) in the view's
    row-major order, as flat runs of ``base`` (adjacent runs merged).

    Raises:
        Cannot: the view's order is not the base's (transposed or permuted dims,
            expanded views: a position that does not come after the previous one), or
            the view lies outside the base.

    Example:
        >>> base = torch.zeros(4, 6)
        >>> view_runs(base[1:3, 2:5], base), view_runs(base.view(-1)[::8], base)
        ([(8, 11), (14, 17)], [(0, 1), (8, 9), (16, 17)])
    """
    with torch_function_disabled():  # the tensors' own layouts (see torch_function_disabled)
        if view.numel() == 0:
            return []
        rel = int(view.storage_offset() - base.storage_offset())
        pairs = zip(view.shape, stored_strides(view), strict=True)
        dims = tuple((int(n), int(s)) for n, s in pairs if n != 1)
        numel = base.numel()
    return list(_view_runs(rel, dims, numel))


@cached  # a model's layers write views of the same few shapes
def _view_runs(rel: int, dims: tuple[tuple[int, int], ...], numel: int) -> tuple[FlatRun, ...]:
    """:func:`view_runs` of a view at offset ``rel`` of a base of ``numel`` elements,
    with ``dims`` its (size, stride) pairs of sizes other than 1."""
    length, outer = 1, len(dims)
    while outer > 0 and dims[outer - 1][1] == length:  # trailing dims that are one run
        length *= dims[outer - 1][0]
        outer -= 1
    runs: list[FlatRun] = []
    for index in itertools.product(*(range(n) for n, _ in dims[:outer])):
        start = rel + sum(i * s for i, (_, s) in zip(index, dims, strict=False))
        if runs and start < runs[-1][1]:
            raise Cannot("the view's elements are not in the tensor's row-major order")
        if runs and start == runs[-1][1]:
            runs[-1] = (runs[-1][0], start + length)
        else:
            runs.append((start, start + length))
    if rel < 0 or runs[-1][1] > numel:
        raise Cannot("the view lies outside the tensor")
    return tuple(runs)


def map_runs(
    source: Sequence[FlatRun], piece: FlatRun, target: Sequence[FlatRun]
) -> Iterator[FlatRun]:
    """Where the flat positions ``piece`` of the source's base land in the target's base,
    when the view with runs ``source`` is copied into the view with runs ``target``
    (same number of elements, both in row-major order)."""
    position = 0  # in the copied views' own order
    target_runs = list(_positions(target))
    for start, stop in source:
        low, high = max(start, piece[0]), min(stop, piece[1])
        if low < high:
            yield from _slice_runs(target_runs, position + low - start, position + high - start)
        position += stop - start


def map_runs_from(
    source: Sequence[FlatRun], piece: FlatRun, target: Sequence[FlatRun]
) -> Iterator[tuple[int, FlatRun]]:
    """As :func:`map_runs`, each target run with the source's flat position its first
    element comes from."""
    position = 0
    target_runs = list(_positions(target))
    for start, stop in source:
        low, high = max(start, piece[0]), min(stop, piece[1])
        if low < high:
            for at, run in _slice_runs_at(
                target_runs, position + low - start, position + high - start
            ):
                yield at - position + start, run
        position += stop - start


def _slice_runs_at(
    runs: Sequence[tuple[int, FlatRun]], low: int, high: int
) -> Iterator[tuple[int, FlatRun]]:
    for position, (start, stop) in runs:
        a, b = max(low, position), min(high, position + stop - start)
        if a < b:
            yield a, (start + a - position, start + b - position)


def _positions(runs: Sequence[FlatRun]) -> Iterator[tuple[int, FlatRun]]:
    position = 0
    for run in runs:
        yield position, run
        position += run[1] - run[0]


def _slice_runs(runs: Sequence[tuple[int, FlatRun]], low: int, high: int) -> Iterator[FlatRun]:
    """Positions ``[low, high)`` of the concatenated ``runs`` (each with its position)."""
    for position, (start, stop) in runs:
        a, b = max(low, position), min(high, position + stop - start)
        if a < b:
            yield (start + a - position, start + b - position)
