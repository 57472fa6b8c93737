"""What a capture records: per parameter, the ordered operations ``init_fn`` applied and
the region (a box of the GLOBAL tensor) each one covers; and the buffers it computed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ...errors import ShardInitError
from ...init import BaseInit
from .program import Expr
from .regions import Box, box_union_covers

__all__ = [
    "Action",
    "CapturedInit",
    "CapturedOp",
    "Fill",
    "Opaque",
    "ParamRecord",
    "Program",
    "Scale",
    "UnsupportedInitOpError",
    "sets_values",
]


class UnsupportedInitOpError(ShardInitError):
    """``init_fn`` did something to a parameter that cannot be replayed shard-locally
    (or wrote a region that is not a box). The message names the parameter, the
    operation and where it was called from."""


@dataclass(frozen=True)
class Fill:
    """Every covered element gets the value of ``init`` at its own position in the
    parameter's stream (a :class:`~shardinit.init.Constant` consumes no words)."""

    init: BaseInit


@dataclass(frozen=True)
class Scale:
    """The covered elements' current values are multiplied (or divided, ``divide``) by
    ``factor`` in the parameter's dtype, as torch's ``mul_`` / ``div_`` do."""

    factor: float
    divide: bool = False


@dataclass(frozen=True)
class Opaque:
    """Values of a TEMPORARY that no recorded fill describes (an in-place op shardinit
    cannot translate). Harmless unless copied into a parameter, which is then refused
    with ``why``. Never part of a :class:`ParamRecord`."""

    why: str


@dataclass(frozen=True)
class Program:
    """Every covered element gets the value of an init program (:mod:`.program`): the
    elementwise computation init code performed, over the parameter's GLOBAL
    coordinates, evaluated by the core in binary64 and rounded once to the parameter's
    dtype (docs/stream-format.md §7). Random sources in it are the parameter's own
    stream at the element's own global index, as for :class:`Fill`; a program that is
    nothing but a source is recorded as that :class:`Fill`. ``eye_`` and ``dirac_`` are
    programs of the element's coordinates (1.0 on their diagonals, else 0.0). An in-place
    step is recorded with the values before it folded in (the program never reads
    memory).

    Attributes:
        expr: the program's result.
    """

    expr: Expr


Action = Fill | Scale | Opaque | Program


def sets_values(action: Action) -> bool:
    """Whether ``action`` sets the values it covers without reading them."""
    return not isinstance(action, Scale)


@dataclass(frozen=True)
class CapturedOp:
    """One recorded operation on a parameter.

    Attributes:
        region: the box of the parameter it covers, in global coordinates.
        action: what it does there.
        op: the operation as written, e.g. ``"normal_(mean=0.0, std=0.02)"``.
        where: the caller's ``file:line``.
    """

    region: Box
    action: Action
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
        return box_union_covers(
            [op.region for op in self.ops if sets_values(op.action)], self.shape
        )


@dataclass(frozen=True)
class CapturedInit:
    """The result of :func:`shardinit.capture_init`.

    Attributes:
        params: per canonical parameter name, what ``init_fn`` did to it (parameters it
            never touched are absent).
        buffers: canonical names of the meta buffers ``init_fn`` computed (their values
            are in ``buffer_values``).
        init_fn: the captured callable.
        buffer_values: per name in ``buffers``, the value ``init_fn`` computed for it
            during the capture (on the CPU; buffers were real tensors there).
        module_ref: a weak reference to the module captured on (see
            :meth:`captured_on`).
        aliases: which parameter each name of the module captured on held, as
            :func:`shardinit._names.holder_names` gives it (tied names share a value);
            materialize refuses a model tied differently.
    """

    params: Mapping[str, ParamRecord]
    buffers: tuple[str, ...]
    init_fn: Callable[[], object] = field(repr=False)
    buffer_values: Mapping[str, torch.Tensor] = field(default_factory=dict, repr=False)
    # The module captured on (weakly): its buffers are the ones computed.
    module_ref: Callable[[], nn.Module | None] = field(
        default=lambda: None, repr=False, compare=False
    )
    aliases: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def captured_on(self, module: nn.Module) -> bool:
        """Whether this was captured on ``module`` itself (so the buffer values computed
        are ``module``'s)."""
        return self.module_ref() is module

    def __contains__(self, name: object) -> bool:
        return name in self.params

    def __getitem__(self, name: str) -> ParamRecord:
        return self.params[name]
