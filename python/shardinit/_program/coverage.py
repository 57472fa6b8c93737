"""The union of the boxes written to a tensor, kept merged (:class:`Coverage`), so that
"is this box covered?" and "add this box" cost what the union's shape costs, not what
the number of boxes written before costs.

Init code that writes a parameter row by row (``for i in range(n): w[i].fill_(...)``,
a per-head or per-expert ``normal_``) wrote n boxes; asked against all of them, every
new write re-checked every earlier one (quadratic in n, cubic where each write asks
about the whole tensor). Here the union of the n rows is one interval of dim 0 whose
rows are all whole: one node, however many rows made it.

The union is held dim by dim: a sorted tuple of disjoint intervals of dim 0, each with
the union of the remaining dims that every index of the interval holds (the *slice*),
and adjacent intervals with equal slices merged. Each slice is held the same way, so the
form of a set is canonical (its intervals are the maximal runs of indices with equal
slices), and two slices are equal exactly when their tuples are: the merge compares
tuples, and nested tuples are immutable, so intervals split by a new box share their
slices without copying them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any

from .._layout import Box

__all__ = ["BoxMap", "Coverage", "box_union_covers"]

#: One dim of a union: disjoint intervals ``(start, stop, slice)`` in order, ``slice``
#: the union of the next dims over each index of the interval (None past the last dim).
Level = tuple[tuple[int, int, "Level | None"], ...]


#: An interval's start and stop, as bisection keys: C-level getters (a key is called at
#: every probe of every bisection, and an interval's union asks several per box).
_start: Callable[[tuple[int, int, object]], int] = itemgetter(0)
_stop: Callable[[tuple[int, int, object]], int] = itemgetter(1)


def _single(box: Box, dim: int) -> Level | None:
    """The union of one box's dims from ``dim`` on (all non-empty)."""
    if dim == len(box):
        return None
    start, stop = box[dim]
    return ((start, stop, _single(box, dim + 1)),)


def _covers(level: Level, box: Box, dim: int) -> bool:
    """Whether ``level`` (the union over dims ``dim``...) holds all of ``box[dim:]``."""
    start, stop = box[dim]
    at = bisect_right(level, start, key=_start) - 1
    position = start
    while position < stop:  # each interval met must go on where the last one stopped
        if at < 0 or at >= len(level):
            return False
        low, high, inner = level[at]
        if not low <= position < high:
            return False
        if inner is not None and not _covers(inner, box, dim + 1):
            return False
        position, at = high, at + 1
    return True


def _meets(level: Level, box: Box, dim: int) -> bool:
    """Whether ``level`` (the union over dims ``dim``...) holds an element of ``box[dim:]``."""
    start, stop = box[dim]
    at = max(bisect_right(level, start, key=_start) - 1, 0)
    while at < len(level) and level[at][0] < stop:
        _, high, inner = level[at]
        if high > start and (inner is None or _meets(inner, box, dim + 1)):
            return True
        at += 1
    return False


def _add(level: Level, box: Box, dim: int) -> Level:
    """``level`` (the union over dims ``dim``...) with ``box[dim:]`` added, merged."""
    start, stop = box[dim]
    # The intervals the box overlaps or touches: a touching one may merge with it.
    first = bisect_left(level, start, key=_stop)
    end = bisect_right(level, stop, key=_start)
    fresh = _single(box, dim + 1)
    parts: list[tuple[int, int, Level | None]] = []
    position = start
    for low, high, inner in level[first:end]:
        if high <= start or low >= stop:  # touching only
            parts.append((low, high, inner))
            continue
        if low < start:
            parts.append((low, start, inner))
        overlap = (max(low, start), min(high, stop))
        if position < overlap[0]:  # a gap the box fills alone
            parts.append((position, overlap[0], fresh))
        grown = None if inner is None else _add(inner, box, dim + 1)
        parts.append((overlap[0], overlap[1], grown))
        if high > stop:
            parts.append((stop, high, inner))
        position = overlap[1]
    if position < stop:
        parts.append((position, stop, fresh))
    parts.sort(key=_start)
    return (*level[:first], *_merged(parts), *level[end:])


def _merged(parts: Sequence[tuple[int, int, Level | None]]) -> list[tuple[int, int, Level | None]]:
    """``parts`` (in order, disjoint) with adjacent intervals of equal slices joined."""
    out: list[tuple[int, int, Level | None]] = []
    for low, high, inner in parts:
        if out and out[-1][1] == low and out[-1][2] == inner:
            out[-1] = (out[-1][0], high, inner)
        else:
            out.append((low, high, inner))
    return out


class Coverage:
    """The union of boxes of an ``ndim``-dim tensor (module docstring).

    Example:
        >>> union = Coverage(2)
        >>> for row in range(4):
        ...     union.add(((row, row + 1), (0, 8)))
        >>> union.covers(((0, 4), (0, 8))), union.covers(((0, 5), (2, 3))), union.intervals()
        (True, False, 2)
        >>> union.meets(((3, 9), (7, 9))), union.meets(((4, 9), (0, 8)))
        (True, False)
    """

    def __init__(self, ndim: int, boxes: Iterable[Box] = ()) -> None:
        self.ndim = ndim
        self._level: Level = ()
        self._any = False  # for a 0-dim tensor: whether its one element was written
        for box in boxes:
            self.add(box)

    def add(self, box: Box) -> None:
        """Adds ``box`` (one ``(start, stop)`` per dim) to the union.

        Raises:
            ValueError: ``box`` has another number of dims than the tensor.
        """
        if len(box) != self.ndim:
            raise ValueError(f"a box of {len(box)} dims added to a union of {self.ndim}")
        if any(start >= stop for start, stop in box):
            return  # no element
        if self.ndim == 0:
            self._any = True
            return
        if _covers(self._level, tuple(box), 0):
            return  # nothing new (a write over a whole tensor written before: a walk,
            # where an add rebuilds the intervals it meets)
        self._level = _add(self._level, tuple(box), 0)

    def same_as(self, other: Coverage) -> bool:
        """Whether ``other`` holds the very same union (not merely an equal one: the
        answer costs nothing)."""
        return self._level is other._level and self._any == other._any and self.ndim == other.ndim

    def take(self, other: Coverage) -> None:
        """Makes this union the same as ``other`` (its levels are immutable: shared)."""
        self.ndim, self._level, self._any = other.ndim, other._level, other._any

    def covers(self, box: Box) -> bool:
        """Whether every element of ``box`` is in the union (an empty box is).

        Raises:
            ValueError: ``box`` has another number of dims than the tensor.
        """
        return self._query(box, empty_box=True, walk=_covers)

    def meets(self, box: Box) -> bool:
        """Whether some element of ``box`` is in the union (never for an empty box).

        Raises:
            ValueError: ``box`` has another number of dims than the tensor.
        """
        return self._query(box, empty_box=False, walk=_meets)

    def _query(self, box: Box, *, empty_box: bool, walk: Callable[[Level, Box, int], bool]) -> bool:
        """``walk`` over the union for a box of the tensor's dims: the answer for an empty
        box and for a 0-dim tensor's one element are the same for every question."""
        if len(box) != self.ndim:
            raise ValueError(f"a box of {len(box)} dims asked of a union of {self.ndim}")
        if any(start >= stop for start, stop in box):
            return empty_box
        if self.ndim == 0:
            return self._any
        return walk(self._level, tuple(box), 0)

    def intervals(self) -> int:
        """The number of intervals held, over all dims (what a query may walk)."""
        count, stack = 0, [self._level]
        while stack:
            level = stack.pop()
            count += len(level)
            stack += [inner for _, _, inner in level if inner is not None]
        return count


def box_union_covers(boxes: Iterable[Box], shape: Sequence[int]) -> bool:
    """Whether the union of ``boxes`` covers every element of ``shape``."""
    union = Coverage(len(shape), boxes)
    return union.covers(tuple((0, int(size)) for size in shape))


#: One dim of a :class:`BoxMap`: intervals ``(start, stop, inner)`` that tile the dim
#: in order, ``inner`` the next dim's level, or past the last dim the piece's value.
MapLevel = tuple[tuple[int, int, object], ...]


def _tiled(shape: Sequence[int], dim: int, value: object) -> object:
    """The level of dims ``dim``... of ``shape`` holding ``value`` everywhere."""
    if dim == len(shape):
        return value
    return ((0, shape[dim], _tiled(shape, dim + 1, value)),)


def _same(a: object, b: object, depth: int) -> bool:
    """Whether two levels ``depth`` dims from the values hold the same pieces (values
    compared by identity: they are kept, never rebuilt)."""
    if a is b or depth == 0:
        return a is b
    left, right = a, b
    assert isinstance(left, tuple) and isinstance(right, tuple)
    return len(left) == len(right) and all(
        x[0] == y[0] and x[1] == y[1] and _same(x[2], y[2], depth - 1)
        for x, y in zip(left, right, strict=True)
    )


def _joined(parts: Sequence[tuple[int, int, object]], depth: int) -> MapLevel:
    """``parts`` (tiling, in order) with adjacent intervals of the same pieces joined."""
    out: list[tuple[int, int, object]] = []
    for low, high, inner in parts:
        if out and _same(out[-1][2], inner, depth):
            out[-1] = (out[-1][0], high, inner)
        else:
            out.append((low, high, inner))
    return tuple(out)


def _update(level: MapLevel, box: Box, dim: int, change: Callable[[object], object]) -> MapLevel:
    """``level`` (dims ``dim``...) with ``change`` applied to the value of every piece
    inside ``box[dim:]``, the pieces cut at the box's faces and joined again."""
    start, stop = box[dim]
    depth = len(box) - dim - 1
    first = bisect_right(level, start, key=_start) - 1
    last = bisect_right(level, stop - 1, key=_start) - 1
    parts: list[tuple[int, int, object]] = list(level[max(first - 1, 0) : first])
    for low, high, inner in level[first : last + 1]:
        if low < start:
            parts.append((low, start, inner))
        if depth == 0:
            changed = change(inner)
        else:
            assert isinstance(inner, tuple)
            changed = _update(inner, box, dim + 1, change)
        parts.append((max(low, start), min(high, stop), changed))
        if high > stop:
            parts.append((stop, high, inner))
    parts += level[last + 1 : last + 2]
    return (*level[: max(first - 1, 0)], *_joined(parts, depth), *level[last + 2 :])


def _pieces(
    level: MapLevel, box: Box, dim: int, outer: tuple[tuple[int, int], ...], out: list[Any]
) -> None:
    """Appends to ``out`` each piece of ``level`` (dims ``dim``...) that meets
    ``box[dim:]``, clipped to the box, with its value (``outer``: the clipped dims
    before ``dim``)."""
    start, stop = box[dim]
    at = bisect_right(level, start, key=_start) - 1
    while at < len(level) and level[at][0] < stop:
        low, high, inner = level[at]
        clipped = (*outer, (max(low, start), min(high, stop)))
        if dim == len(box) - 1:
            out.append((clipped, inner))
        else:
            assert isinstance(inner, tuple)
            _pieces(inner, box, dim + 1, clipped, out)
        at += 1


class BoxMap:
    """A value for each element of a tensor of ``shape``, held as boxes (pieces) that
    tile it, each with one value: dim by dim, as :class:`Coverage` holds a union, with
    adjacent pieces of the same value (by identity) joined. A tensor written row by row
    holds a piece per row, and asking what lies under a row costs a bisection, however
    many rows there are.

    Example:
        >>> pieces = BoxMap((4, 8), "never")
        >>> for row in range(4):
        ...     pieces.update(((row, row + 1), (0, 8)), lambda old, row=row: f"row {row}")
        >>> pieces.pieces(((1, 3), (2, 4)))
        [(((1, 2), (2, 4)), 'row 1'), (((2, 3), (2, 4)), 'row 2')]
    """

    def __init__(self, shape: Sequence[int], value: object) -> None:
        self.shape = tuple(int(size) for size in shape)
        self._level: object = _tiled(self.shape, 0, value)
        self._empty = any(size == 0 for size in self.shape)

    def update(self, box: Box, change: Callable[[object], object]) -> None:
        """Sets the value of each piece inside ``box`` (clipped to the tensor) to
        ``change`` of its value before (one call per piece the box meets)."""
        clipped = self._clipped(box)
        if clipped is None:
            return
        if not self.shape:
            self._level = change(self._level)
            return
        assert isinstance(self._level, tuple)
        self._level = _update(self._level, clipped, 0, change)

    def pieces(self, box: Box) -> list[tuple[Box, object]]:
        """The pieces that meet ``box``, each clipped to it, with its value (row-major
        order of their corners)."""
        clipped = self._clipped(box)
        if clipped is None:
            return []
        if not self.shape:
            return [((), self._level)]
        out: list[tuple[Box, object]] = []
        assert isinstance(self._level, tuple)
        _pieces(self._level, clipped, 0, (), out)
        return out

    def _clipped(self, box: Box) -> Box | None:
        if len(box) != len(self.shape):
            raise ValueError(f"a box of {len(box)} dims for a map of {len(self.shape)}")
        clipped = tuple(
            (max(start, 0), min(stop, size))
            for (start, stop), size in zip(box, self.shape, strict=True)
        )
        if self._empty or any(start >= stop for start, stop in clipped):
            return None
        return clipped
