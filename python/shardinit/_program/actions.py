"""What a parameter's record holds: per operation, the region (a box of the GLOBAL
tensor) it covers and its action, the init program (:mod:`.nodes`) of the value it leaves
there. Rules, torch.nn defaults and constructor values are records of one or two
:class:`Fill` actions; a capture (:mod:`shardinit._integration.capture`) records any of
the five kinds. The writer (:mod:`.writer`) writes them."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import torch

from .._caches import cached
from ..init import BaseInit, Constant, Initializer
from .cannot import Cannot
from .coverage import box_union_covers
from .exact import bare_source, holds_exactly, stored
from .nodes import Const, Coord, Expr, Prior, Round, Source, Where
from .regions import Box, whole
from .rewrite import combine, substitute_prior, where
from .selection import first_unwritten

__all__ = [
    "Action",
    "CapturedOp",
    "Computed",
    "ComputedOnPrior",
    "Fill",
    "Masked",
    "Opaque",
    "ParamRecord",
    "Scale",
    "Selected",
    "TrackAction",
    "base_ops",
    "check_all_set",
    "constant_fill",
    "ops_digest",
    "program_of",
    "selects_values",
    "sets_all_of",
    "sets_values",
]


class Action:
    """What an operation leaves in the elements it covers: an init program (sources,
    then elementwise steps, :mod:`.nodes`) over the parameter's GLOBAL coordinates,
    evaluated by the core in binary64 and rounded once to the parameter's dtype
    (docs/stream-format.md §7), then copied into the operation's region. Random sources
    are the parameter's own stream at the element's own global index, so the values do
    not depend on the layout.

    Every write init code makes to a parameter is one; the five kinds differ only in
    how the program is written down:

    * :class:`Fill`: one source (``normal_``, ``zero_``, ...);
    * :class:`Scale`: a step of the values before it (``mul_`` / ``div_`` by a scalar);
      the writer reads those as the program of the operations before it, so no program
      reads memory;
    * :class:`Computed`: any program capture followed (``log(arange(...))``,
      ``eye_``, ...), with in-place steps already folded in;
    * :class:`Masked`: a constant where a condition of the coordinates holds, else the
      value before (``triu_``, ``masked_fill_``, ...);
    * :class:`Selected`: another action where a strided view's elements lie, else the
      value before (``w[::2].normal_()``, ``w.diagonal().mul_(2)``).
    """

    #: Whether the program reads the element's value before it (:class:`.nodes.Prior`).
    reads_prior: ClassVar[bool] = False

    def program(self, dtype: torch.dtype, ndim: int, origin: int) -> Expr:
        """The program over ``ndim`` global coordinates, for a parameter of ``dtype``;
        ``origin`` tells its random source from other operations'."""
        raise NotImplementedError

    def plain_init(self, dtype: torch.dtype) -> BaseInit | None:
        """The initializer when this program, in a parameter of ``dtype``, is nothing but
        one stream-v1 fill (:func:`.exact.bare_source`): the writer hands it to the
        core as is, without building the program. None for any other."""
        return None

    def after(self, dtype: torch.dtype, ndim: int, origin: int, prior: Expr) -> Expr:
        """The value an element holds after this operation, as a tensor of ``dtype``
        holds it, given ``prior``, its value before."""
        value = self.program(dtype, ndim, origin)
        if self.reads_prior:
            value = substitute_prior(value, prior)
        return stored(value, dtype)


def _own_coords(ndim: int) -> tuple[Expr, ...]:
    """``(Coord(0), ..., Coord(ndim - 1))``, one tuple per ``ndim`` (shared: a rewrite
    that maps a coordinate to an equal one keeps the nodes above it)."""
    found = _OWN_COORDS.get(ndim)
    if found is None:
        found = _OWN_COORDS[ndim] = tuple(Coord(d) for d in range(ndim))
    return found


#: :func:`_own_coords` by the number of dims.
_OWN_COORDS: dict[int, tuple[Expr, ...]] = {}


@dataclass(frozen=True)
class Fill(Action):
    """The program that is one source: every covered element gets the value of ``init``
    at its own position in the parameter's stream (a :class:`~shardinit.init.Constant`
    consumes no words). Evaluated by the stream-v1 fill itself (the Triton kernel on
    CUDA)."""

    init: BaseInit

    def program(self, dtype: torch.dtype, ndim: int, origin: int) -> Expr:
        if isinstance(self.init, Constant):
            return stored(Const(self.init.value), dtype)
        return Source(self.init, dtype, origin, _own_coords(ndim))

    def plain_init(self, dtype: torch.dtype) -> BaseInit | None:
        # ``init``, unless it is a constant that ``dtype`` does not hold exactly: then
        # its program rounds it once, not as stream v1's fill does (bare_source of it).
        if isinstance(self.init, Constant) and not holds_exactly(self.init.value, dtype):
            return None
        return self.init


@dataclass(frozen=True)
class Scale(Action):
    """The covered elements' values before it multiplied (or divided, ``divide``) by
    ``factor``, as torch's ``mul_`` / ``div_`` by a Python scalar compute it: the scalar
    and the product in float32 (binary64 for float64 tensors), then the dtype."""

    factor: float
    divide: bool = False
    reads_prior: ClassVar[bool] = True

    def program(self, dtype: torch.dtype, ndim: int, origin: int) -> Expr:
        factor = self.factor
        if not dtype.is_floating_point:  # an integer tensor: integer arithmetic, wrapped
            return combine("div" if self.divide else "mul", Prior(), Const(factor))
        if dtype != torch.float64:
            factor = (
                _float32(factor)
                if isinstance(factor, float)
                else float(torch.tensor(factor, dtype=torch.float32, device="cpu"))
            )
        step = combine("div" if self.divide else "mul", Prior(), Const(factor))
        return step if dtype == torch.float64 else Round(step, torch.float32)


def _float32(value: float) -> float:
    """``value`` as torch's float32 scalar holds it: a C cast (round to nearest even;
    past float32's range an infinity of its sign), as ``struct`` packs it, with no
    tensor made (a row loop scales each row by its own factor: one tensor a row)."""
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


@dataclass(frozen=True)
class Computed(Action):
    """A program capture followed through init code's elementwise computation (a
    program that is nothing but a source is recorded as that :class:`Fill`, see
    :func:`program_of`). ``eye_`` and ``dirac_`` are programs of the element's
    coordinates (1.0 on their diagonals, else 0.0). An in-place step is recorded with
    the values before it folded in.

    Attributes:
        expr: the program's result.
    """

    expr: Expr

    def program(self, dtype: torch.dtype, ndim: int, origin: int) -> Expr:
        return self.expr


@dataclass(frozen=True)
class ComputedOnPrior(Computed):
    """A program of the element's value before it (:class:`.nodes.Prior`), as an in-place
    step on values ``init_fn`` did not write leaves it (``w.clamp_(-0.1, 0.1)`` on the
    torch.nn default): like :class:`Scale`, it reads what the parameter held before
    ``init_fn``, its rule's, constructor's or default's values, put in front of it."""

    reads_prior: ClassVar[bool] = True


@dataclass(frozen=True)
class Masked(Action):
    """``value`` where ``cond`` (a program of the parameter's GLOBAL coordinates, free of
    random values) holds, else the element's value before.

    Attributes:
        cond: the condition (nonzero: write).
        value: the constant written.
    """

    cond: Expr
    value: float
    reads_prior: ClassVar[bool] = True

    def program(self, dtype: torch.dtype, ndim: int, origin: int) -> Expr:
        return where(self.cond, Const(self.value), Prior())


@dataclass(frozen=True)
class Selected(Action):
    """``inner`` where ``cond`` (a program of the parameter's GLOBAL coordinates, free of
    random values) holds, else the element's value before: any write through a view
    whose elements are no box (``w[::2] = 0``, ``w[:, ::3].normal_()``,
    ``w.diagonal().mul_(2)``), recorded on a box around them (:mod:`.selection`).
    ``inner``'s program is over global coordinates as every action's is (its random
    source read at each element's own index), so each element the view holds gets what
    the same write through a box holding it gives.

    Attributes:
        cond: where the view's elements lie (nonzero: one of them).
        inner: the write's own action.
    """

    cond: Expr
    inner: Action
    reads_prior: ClassVar[bool] = True

    def program(self, dtype: torch.dtype, ndim: int, origin: int) -> Expr:
        return where(self.cond, self.inner.program(dtype, ndim, origin), Prior())

    def after(self, dtype: torch.dtype, ndim: int, origin: int, prior: Expr) -> Expr:
        # As :meth:`Action.after`, with a value before that a write through the same view
        # left (``w[i::k].normal_(); w[i::k].mul_(s)``) read as its branch on each side
        # of the condition: a loop of such steps nests each step once, not twice.
        inner = self.inner.program(dtype, ndim, origin)
        if self.inner.reads_prior:
            inner = substitute_prior(inner, _branch(prior, self.cond, taken=True))
        return stored(where(self.cond, inner, _branch(prior, self.cond, taken=False)), dtype)


def _branch(value: Expr, cond: Expr, *, taken: bool) -> Expr:
    """``value`` where ``cond`` is ``taken``: when ``value`` is a ``where`` of ``cond``
    (stored: rounded, as an action's value is), that branch, stored; else ``value``."""
    chosen = value.x if isinstance(value, Round) else value
    if not isinstance(chosen, Where) or chosen.cond != cond:
        return value
    branch = chosen.a if taken else chosen.b
    return stored(branch, value.dtype) if isinstance(value, Round) else branch


def constant_fill(value: float) -> Action:
    """Every covered element set to ``value``: a :class:`Fill` by a
    :class:`~shardinit.init.Constant` where ``value`` is finite; NaN and +-inf (a
    sentinel a later write overwrites, a mask's ``-inf``) are no initializer's value, but
    a program's constant, written as the core's evaluator writes any program. One
    action per finite float (immutable, so shared as ``build``'s are): a table written
    element by element holds thousands of writes of a few constants."""
    if type(value) is float and math.isfinite(value):
        return _finite_fill(value.hex())  # by its bits: -0.0 is not 0.0
    if math.isfinite(value):
        return Fill(Constant(value))
    return Computed(Const(value))


@cached
def _finite_fill(bits: str) -> Action:
    return Fill(Constant(float.fromhex(bits)))


def program_of(expr: Expr) -> Action:
    """``expr`` written down as an :class:`Action`: a :class:`Fill` when it is one
    source (or a constant), else :class:`Computed`."""
    init = bare_source(expr)
    return Computed(expr) if init is None else Fill(init)


@dataclass(frozen=True)
class Opaque:
    """Values of a TEMPORARY that no recorded fill describes (an in-place op shardinit
    cannot translate), as capture follows a temporary. Harmless unless copied into a
    parameter, which is then refused with ``why``. Never part of a :class:`ParamRecord`."""

    why: str


#: What an operation on a tensor capture follows does: a parameter's only an Action.
TrackAction = Action | Opaque


def sets_values(action: TrackAction) -> bool:
    """Whether ``action`` sets the values it covers without reading them."""
    return isinstance(action, Opaque) or not action.reads_prior


@dataclass(frozen=True)
class CapturedOp:
    """One recorded operation on a parameter.

    Attributes:
        region: the box of the parameter it covers, in global coordinates.
        action: what it does there (an :class:`Action` in a :class:`ParamRecord`).
        op: the operation as written, e.g. ``"normal_(mean=0.0, std=0.02)"``.
        where: the caller's ``file:line``.
    """

    region: Box
    action: TrackAction
    op: str
    where: str


@dataclass(frozen=True)
class ParamRecord:
    """What ``init_fn`` did to one parameter, in order.

    Attributes:
        name: canonical name (docs/stream-format.md §5).
        shape: GLOBAL shape.
        dtype: the parameter's dtype.
        ops: the operations, first to last.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    ops: tuple[CapturedOp, ...]

    def covers_all(self) -> bool:
        """Whether the fills together cover every element (then the parameter's values
        do not depend on anything before ``init_fn``)."""
        return self._covers_all

    @cached_property
    def _covers_all(self) -> bool:
        # Asked when planning and again when writing: the fields are frozen, so once.
        try:
            check_all_set(self.ops, self.shape)
        except Cannot:
            return False
        return True

    def check_views_set_all(self) -> None:
        """Nothing, unless the record writes through strided views and some element may
        be left unset (then "no rule" alone would not say why).

        Raises:
            Cannot: naming an element no operation sets (or why that is not known).
        """
        if not self.covers_all() and any(selects_values(op.action) for op in self.ops):
            check_all_set(self.ops, self.shape)


def selects_values(action: TrackAction) -> bool:
    """Whether ``action`` sets the values of a strided view's elements."""
    return isinstance(action, Selected) and sets_values(action.inner)


def check_all_set(ops: Sequence[CapturedOp], shape: Sequence[int]) -> None:
    """Nothing when ``ops`` set every element of a tensor of ``shape``. An operation
    that sets values sets its box; one through a strided view (:class:`Selected` of such
    an action) sets exactly the view's elements, so a parameter written as ``w[::2]``
    and ``w[1::2]`` is set all through.

    Raises:
        Cannot: some element may be left unset (which, where strided writes are met).
    """
    regions = [op.region for op in ops if sets_values(op.action)]
    if regions and regions[0] == whole(shape):  # a rule's or default's first fill
        return
    if box_union_covers(regions, shape):
        return
    writes = _set_writes(ops)
    if len(writes) == len(regions):
        raise Cannot("some elements are set by no operation")
    try:
        element = first_unwritten(writes, shape)
    except Cannot as why:
        raise Cannot(f"whether its strided writes set every element is not known: {why}") from None
    if element is not None:
        raise Cannot(f"element {element} is set by no write")


def sets_all_of(ops: Sequence[CapturedOp], shape: Sequence[int], region: Box) -> bool:
    """Whether ``ops`` set every element of ``region`` of a tensor of ``shape``, those
    set through strided views counted exactly (as :func:`check_all_set`): a temporary
    written as ``t[:, 0::2]`` and ``t[:, 1::2]`` is all written, as the boxes' union
    would say of two halves."""
    try:
        return first_unwritten(_set_writes(ops), shape, region) is None
    except Cannot:  # a condition no integer expression: not known to be set
        return False


def _set_writes(ops: Sequence[CapturedOp]) -> list[tuple[Box, Expr | None]]:
    """The writes of ``ops`` that set values: each box, and the condition over it where a
    strided view's elements lie (None: all of the box)."""
    writes: list[tuple[Box, Expr | None]] = [
        (op.region, None) for op in ops if sets_values(op.action)
    ]
    writes += [
        (op.region, op.action.cond)
        for op in ops
        if isinstance(op.action, Selected) and selects_values(op.action)
    ]
    return writes


def base_ops(
    initializer: Initializer, shape: Sequence[int], zero_rows: Sequence[int] = ()
) -> tuple[CapturedOp, ...]:
    """Operations that set a whole parameter with ``initializer`` (resolved from the
    GLOBAL ``shape``) and then zero rows ``zero_rows`` along dim 0: what a parameter held
    before ``init_fn`` ran (its module's default), to put in front of a record that
    covers only part of it.
    """
    shape = tuple(shape)
    box = whole(shape)
    ops = [CapturedOp(box, Fill(initializer.resolve(shape)), "default", "<default>")]
    for row in zero_rows:
        region = ((row, row + 1), *box[1:])
        ops.append(CapturedOp(region, Fill(Constant(0.0)), "zero row", "<default>"))
    return tuple(ops)


def ops_digest(ops: Sequence[CapturedOp]) -> str:
    """A digest equal for two records exactly when they are the same operations: each
    one's region, action, op and line, every node's class and fields, floats by their
    bits, tables by their values (so two processes compare records by it: a record is
    the same on every rank only where the digests agree). A node met twice (shared) is
    named by its first place, so shared programs cost their size, not their paths."""
    digest = hashlib.sha256()
    places: dict[int, int] = {}

    def put(value: object) -> None:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            if id(value) in places:
                digest.update(f"@{places[id(value)]};".encode())
                return
            places[id(value)] = len(places)
            digest.update(f"{type(value).__qualname__}(".encode())
            for field in dataclasses.fields(value):
                put(getattr(value, field.name))
            digest.update(b")")
        elif isinstance(value, (tuple, list)):
            digest.update(b"[")
            for item in value:
                put(item)
            digest.update(b"]")
        elif isinstance(value, torch.Tensor):
            data = value.detach().cpu().contiguous().resolve_conj().resolve_neg()
            digest.update(f"{data.dtype}{tuple(data.shape)}".encode())
            digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, float):
            digest.update(value.hex().encode() + b";")
        else:
            digest.update(f"{type(value).__name__}:{value!r};".encode())

    put(tuple(ops))
    return digest.hexdigest()
