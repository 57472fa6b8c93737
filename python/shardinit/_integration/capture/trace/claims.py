"""Where random values land (:class:`RandomPlaces`): a random value is drawn at its
destination element's own index (docs/stream-format.md §7), so one value copied into two
places (two parameters, two boxes, a parameter's value moved within it) would become two
independent values where torch has equal ones. Each random op's values may land in one
place only."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ...._program.actions import CapturedOp, Fill, Selected, TrackAction
from ...._program.cannot import Cannot
from ...._program.index import as_lin
from ...._program.nodes import (
    Const,
    Coord,
    Expr,
    Source,
    Where,
    contains,
    kept_per_key,
    random_key,
    walk_nodes,
)
from ...._program.regions import Box, FlatRun, box_runs
from ...._program.rewrite import reindex
from ....init import Constant
from .before import Before
from .store import RecordStore
from .tracks import Track

__all__ = ["RandomPlaces", "drawn"]

#: The value of a track over a box (:meth:`.engine.Engine.folded_over`).
Folded = Callable[[Track, Box], Expr]


class _Claim(NamedTuple):
    """Where one write put values of one random op: ``runs`` (flat) of the temporary
    ``space`` that op drew them in, or anywhere (``space`` None: not known exactly);
    ``op`` the write (with its line, or its line apart in ``at``: a claim is made per
    random fill of a parameter, and named by a refusal only). A tuple: made at every
    random fill (a model's thousands)."""

    write: int
    space: int | None
    runs: tuple[FlatRun, ...]
    op: str
    at: str = ""

    @property
    def where(self) -> str:
        return f"{self.op} at {self.at}" if self.at else self.op

    def disjoint(self, other: _Claim) -> bool:
        if self.space is None or self.space != other.space:
            return False
        return all(b <= c or d <= a for a, b in self.runs for c, d in other.runs)


def drawn(action: TrackAction) -> bool:
    """Whether ``action`` draws random values (a fill by a random initializer, also
    through a view that is no box)."""
    if isinstance(action, Selected):
        return drawn(action.inner)
    return isinstance(action, Fill) and not isinstance(action.init, Constant)


class RandomPlaces:
    """Per random op, the places its values went; each write to a parameter is numbered
    (:attr:`writes`), so the parts of one write never conflict with each other."""

    def __init__(self, store: RecordStore) -> None:
        self.store = store
        self.claims: dict[int, list[_Claim]] = {}
        self.roots: dict[int, int] = {}  # a fill copied op by op -> the op it copies
        self.spaces: dict[int, Track] = {}  # a random fill of a temporary -> that temporary
        # a fill of a temporary whose values are the whole tensor's (orthogonal) -> it
        self.whole_draws: dict[int, Track] = {}
        self.writes = 0

    def recorded(self, track: Track, op: CapturedOp, name: str) -> None:
        """``op`` was just recorded on ``track`` (the operation ``name``): a random fill
        of a temporary draws in its coordinates; of a parameter, its values are where it
        drew them."""
        if not drawn(op.action):
            return
        if track.kind == "temp":
            self.spaces[id(op)] = track
            if not _elementwise(op.action):
                self.whole_draws[id(op)] = track
        elif track.kind == "param":
            self.writes += 1
            self.claims[id(op)] = [_Claim(self.writes, None, (), name, op.where)]

    def new_write(self) -> None:
        """A new write to a parameter starts: its parts never conflict with each other."""
        self.writes += 1

    def copied_from(self, copy: CapturedOp, entry: CapturedOp) -> None:
        """``copy`` holds the values of ``entry`` (copied op by op): its random op's."""
        self.roots[id(copy)] = self.root(id(entry))

    def root(self, origin: int) -> int:
        """The random op whose values ``origin`` (a fill copied op by op) holds."""
        return self.roots.get(origin, origin)

    def land(self, track: Track, box: Box, expr: Expr, op: str, where: str, folded: Folded) -> None:
        """Checks that the random values in ``expr``, written to ``box`` of the parameter
        ``track`` (whose values over it are ``folded(track, box)``), land in no other place. (The
        engine's ``folded`` comes per call: held here, it would make a reference cycle
        that keeps the capture's records alive until the garbage collector runs.)

        Raises:
            UnsupportedInitOpError: values of one random op land in two places.
        """
        if not contains(expr, Source):
            return  # nothing random (tables, constants): no need to rebuild the program
        fresh = _pinned_ats(expr, box, self.root)
        self.check_whole_draws(track, op, fresh, box)
        held: dict[int, set[tuple[Expr, ...]]] = {}
        if track.touched(box) or contains(expr, Before):
            # (a box nothing touched holds the values before init_fn alone, whose
            # sources are Before's: no value of a fresh draw is there; the next row of
            # a loop is asked no fold)
            held = _pinned_ats(folded(track, box), box, self.root)
        for origin, ats in fresh.items():
            if ats <= held.get(origin, set()):
                continue  # the values already there, at the same places (a step of them)
            space = self.spaces.get(origin)
            runs = None if space is None else _image_runs(ats, box, space.shape)
            exact = None if runs is None else id(space)  # None: all of the op's values
            self.claim(track, origin, _Claim(self.writes, exact, runs or (), where), op)

    def check_whole_draws(
        self, track: Track, op: str, ats: dict[int, set[tuple[Expr, ...]]], box: Box
    ) -> None:
        """Refuses values of a whole-tensor draw of a temporary (``orthogonal_``: each
        value is its matrix's, which the stream computes for the destination's shape)
        read, over ``box`` of ``track``, at places ``ats`` (per random op) other than
        their own positions, or landing in a tensor of another shape than the one drawn
        in: there they would be another matrix's values."""
        try:
            self.place_whole_draws(ats, box, track.shape, track.label)
        except Cannot as cannot:
            raise self.store.fail(track, op, cannot.reason) from None

    def place_whole_draws(
        self, ats: dict[int, set[tuple[Expr, ...]]], box: Box, shape: tuple[int, ...], label: str
    ) -> None:
        """Raises :class:`Cannot` where values read at ``ats`` over ``box`` of a tensor of
        ``shape`` (``label``) are a whole-tensor draw out of place
        (:meth:`check_whole_draws`)."""
        if not self.whole_draws:
            return  # no whole-tensor draw yet (most captures): nothing to place
        own = _pinned_coords(box)
        for origin, places in ats.items():
            space = self.whole_draws.get(origin)
            if space is not None and (space.shape != shape or places != {own}):
                raise Cannot(_misplaced(space, label, shape))

    def place_value(self, expr: Expr, shape: tuple[int, ...], label: str) -> None:
        """:meth:`place_whole_draws` for ``expr``, a whole tensor's value over its own
        coordinates (a constructor's parameter).

        Raises:
            Cannot: a whole-tensor draw out of place.
        """
        if not self.whole_draws or not contains(expr, Source):
            return
        box = tuple((0, size) for size in shape)
        self.place_whole_draws(_random_ats(_pinned(expr, box), self.root), box, shape, label)

    def check_whole_copy(
        self, source: Track, entry: CapturedOp, target: Track, runs: tuple[object, object], op: str
    ) -> None:
        """Refuses a copy op by op of a whole-tensor draw (:meth:`check_whole_draws`)
        whose elements (``runs``: the source's flat runs, the target's) do not land at
        their own positions in a tensor of the shape drawn in."""
        space = self.whole_draws.get(self.root(id(entry)))
        if space is not None and (source.shape != target.shape or runs[0] != runs[1]):
            raise self.store.fail(target, op, _misplaced(space, target.label, target.shape))

    def claim(self, track: Track, origin: int, new: _Claim, op: str) -> None:
        """Records that write ``new.write`` puts values of the random op ``origin`` in
        ``track``; refuses it where an earlier write put some of them elsewhere."""
        claims = self.claims.setdefault(origin, [])
        for old in claims:
            if old.write != new.write and not new.disjoint(old):
                raise self.store.fail(
                    track, op,
                    f"random values that {old.where} already put in a parameter would "
                    "land in a second place: shardinit draws each random value at its "
                    "destination element's own index, so the copy would not equal the "
                    "first, as it does in torch; give each destination its own fill, or "
                    "copy disjoint parts of a temporary op by op",
                )  # fmt: skip
        claims.append(new)

    def overlap(self, parts: list[tuple[Expr, tuple[int, ...]]]) -> bool:
        """Whether the random values of ``parts`` (each its value over its own shape),
        put side by side by one ``cat``/``stack``, read some random op's values twice
        (``torch.cat([r, -r])``): torch repeats those values, shardinit would draw each
        place anew. A read whose places are not known exactly counts as all of it."""
        seen: dict[int, list[FlatRun]] = {}
        for expr, shape in parts:
            if not contains(expr, Source):
                continue
            box = tuple((0, size) for size in shape)
            for origin, ats in _random_ats(_pinned(expr, box), self.root, drawn=True).items():
                space = self.spaces.get(origin)
                runs = None if space is None else _image_runs(ats, box, space.shape)
                if runs is None:
                    runs = ((0, 1 << 62),)  # not known exactly: all of it
                taken = seen.setdefault(origin, [])
                if any(a < d and c < b for a, b in runs for c, d in taken):
                    return True
                taken.extend(runs)
        return False

    def copied(
        self, source: Track, entry: CapturedOp, target: Track, run: FlatRun, op: str, where: str
    ) -> None:
        """Elements ``run`` (flat) of the temporary ``source``, written by ``entry``,
        copied op by op into a parameter (:meth:`land`): exact positions when ``entry``
        drew them itself."""
        if target.kind != "param" or not drawn(entry.action):
            return
        origin = self.root(id(entry))
        space = id(source) if origin == id(entry) else None
        self.claim(target, origin, _Claim(self.writes, space, (run,), where), op)


def _elementwise(action: TrackAction) -> bool:
    """Whether each element of ``action``'s random values is drawn on its own (not
    ``orthogonal_``'s, whose values are the whole matrix's)."""
    inner = action.inner if isinstance(action, Selected) else action
    return not isinstance(inner, Fill) or bool(getattr(inner.init, "elementwise", True))


def _misplaced(space: Track, label: str, shape: tuple[int, ...]) -> str:
    return (
        f"values of a whole-tensor draw (orthogonal_) of {space.label}, of shape "
        f"{space.shape}, land elsewhere than at their own positions in a tensor of that "
        f"shape ({label} is {shape}): the stream computes such a matrix "
        "for the shape it lands in, so they would be another matrix's; copy the "
        "temporary whole into a tensor of its shape, or call orthogonal_ on the parameter"
    )


def _pinned_coords(box: Box) -> tuple[Expr, ...]:
    """The coordinates :func:`_pinned` gives the elements of ``box`` themselves."""
    return tuple(Const(float(a)) if b - a == 1 else Coord(d) for d, (a, b) in enumerate(box))


def _pinned(expr: Expr, box: Box) -> Expr:
    """``expr`` over ``box``, with the coordinates of its one-element dims as constants
    (so a place reads the same however a view wrote it: ``Coord(d)`` or ``0``)."""
    return reindex(expr, _pins(box), list(box), keep=False)


def _pins(box: Box) -> list[Expr]:
    """:func:`_pinned`'s coordinates: a constant for each one-element dim of ``box``."""
    return [Const(float(a)) if b - a == 1 else Coord(d) for d, (a, b) in enumerate(box)]


def _pinned_ats(
    expr: Expr, box: Box, root: Callable[[int], int]
) -> dict[int, set[tuple[Expr, ...]]]:
    """``_random_ats(_pinned(expr, box), root)``, the places of ``expr``'s random values
    over ``box``. Under no condition (no ``where``: pinning a coordinate folds no branch
    away, and a step's sources keep their one key), those are the places of the random
    key kept on ``expr``, each pinned: a few coordinates rewritten (a row's write asks
    it once), not all of the value built again."""
    key = random_key(expr)
    if (
        key is None
        or (contains(expr, Where) and not _branches_stay(expr))
        or any(contains(c, Source) for _, at in key for c in at)
    ):
        return _random_ats(_pinned(expr, box), root)
    coords, ranges = _pins(box), list(box)
    found: dict[int, set[tuple[Expr, ...]]] = {}
    for origin, at in key:
        pinned = tuple(_pin(c, coords, ranges) for c in at)
        found.setdefault(root(origin), set()).add(pinned)
    return found


def _branches_stay(expr: Expr) -> bool:
    """Whether every ``where`` under ``expr`` chooses by a random value and has one in
    a branch (``clamp_``'s, ``relu``'s): pinned coordinates decide no such condition (a
    random value folds to no constant), and its branches become one only where both
    hold the condition's random value (its kept key says they read it at its place),
    so none of its random values is dropped. Kept on each node (a step recorded piece
    by piece asks it of each piece's value)."""
    return bool(kept_per_key(expr, "_claims", "branches_stay", _branches_stay_here))


def _branches_stay_here(node: Expr) -> bool:
    """:func:`_branches_stay` of ``node``, from its children's (kept)."""
    if isinstance(node, Where) and not (
        contains(node.cond, Source) and (contains(node.a, Source) or contains(node.b, Source))
    ):
        return False
    return all(child.__dict__["_claims"]["branches_stay"] for child in node.children())


def _pin(coordinate: Expr, coords: list[Expr], ranges: list[tuple[int, int]]) -> Expr:
    """One coordinate of a place, pinned (:func:`_pinned_ats`): a coordinate of the box
    is read at once (as the rewrite reads it), anything else rewritten."""
    if type(coordinate) is Coord:
        return coords[coordinate.dim]
    if type(coordinate) is Const:
        return coordinate
    return reindex(coordinate, coords, ranges, keep=False)


def _image_runs(
    ats: set[tuple[Expr, ...]], box: Box, shape: tuple[int, ...]
) -> tuple[FlatRun, ...] | None:
    """The flat runs of a temporary of ``shape`` that the places ``ats`` read over
    ``box``, when each is a shift of the box (every coordinate a constant or one of the
    box's dims plus a constant, each dim used once); else None."""
    runs: list[FlatRun] = []
    for at in ats:
        block = _flat_block(at, box, shape)
        if block is not None:
            runs.append(block)
            continue
        image: list[tuple[int, int]] = []
        used: set[int] = set()
        for coordinate in at:
            lin = as_lin(coordinate)
            if lin is None or len(lin.coefs) > 1:
                return None
            if not lin.coefs:
                image.append((lin.offset, lin.offset + 1))
                continue
            ((dim, coef),) = lin.coefs
            if coef != 1 or dim in used:
                return None
            used.add(dim)
            image.append((box[dim][0] + lin.offset, box[dim][1] + lin.offset))
        if len(image) != len(shape) or any(
            stop - start > 1 and dim not in used for dim, (start, stop) in enumerate(box)
        ):
            return None
        runs += box_runs(tuple(image), shape)
    return tuple(runs)


def _flat_block(at: tuple[Expr, ...], box: Box, shape: tuple[int, ...]) -> FlatRun | None:
    """The one flat run of a temporary of ``shape`` that the place ``at`` reads over
    ``box``, when its flat index is the box's own row-major index plus a constant (a
    reshaped view of a contiguous part: ``vec[n:n + k].view(r, c)``, as
    ``vector_to_parameters`` copies); else None."""
    if len(at) != len(shape):
        return None
    offset, coefs = 0, [0] * len(box)
    stride = 1
    for coordinate, size in zip(reversed(at), reversed(shape), strict=True):
        lin = as_lin(coordinate)
        if lin is None:
            return None
        offset += stride * lin.offset
        for dim, coef in lin.coefs:
            coefs[dim] += stride * coef
        stride *= size
    step = 1
    for dim in reversed(range(len(box))):
        start, stop = box[dim]
        offset += coefs[dim] * start
        if stop - start > 1 and coefs[dim] != step:
            return None
        step *= stop - start
    return (offset, offset + step) if offset >= 0 and offset + step <= stride else None


def _random_ats(
    expr: Expr, root: Callable[[int], int], drawn: bool = False
) -> dict[int, set[tuple[Expr, ...]]]:
    """Per random op whose values ``expr`` holds, the places it reads them at. With
    ``drawn``, only values a fill draws: a parameter's values before ``init_fn``
    (:class:`.before.Before`) are no draw, the same wherever a temporary repeats them
    (written back anywhere but their own place, :func:`.before.resolve_before` refuses
    them)."""
    found: dict[int, set[tuple[Expr, ...]]] = {}
    key = None if drawn else random_key(expr)
    if key is not None and not any(contains(c, Source) for _, at in key for c in at):
        # The random key kept on the node is the (origin, place) of each source under
        # it (no walk: a row's write asks it once more), unless a place reads a source.
        for origin, at in key:
            found.setdefault(root(origin), set()).add(at)
        return found
    for node in walk_nodes(expr):
        if isinstance(node, Source) and not (drawn and isinstance(node, Before)):
            found.setdefault(root(node.origin), set()).add(node.at)
    return found
