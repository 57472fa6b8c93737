"""Writes of values known at capture to positions known at capture, on a parameter:
``index_copy_``, ``scatter_`` (no ``reduce``), ``index_put_`` (no ``accumulate``),
``masked_scatter_``, ``put_`` and ``w[rows] = table`` by a list of positions.

Where such a write lands and what it writes do not depend on the values it writes
over, so it is run by torch's own kernel twice on the CPU, over a tensor of zeros and
one of ones of the view's shape and dtype (its other operands: CPU tensors, or meta
temporaries whose values are known, :mod:`..trace.concrete`). An element both runs give
the same value is written with that value, as torch's kernel stores it; one each run
left as it was is not written; any other (an accumulating ``index_put_``, a ``scatter_``
with ``reduce``, ``index_add_``: a result of the values before) is no such write, and
the call is refused, saying so. The write is then ``where(written, values, before)``
over the view's coordinates, the capture's masked write
(:meth:`..trace.Coordinates.masked_write`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from ...._program.cannot import Cannot
from ...._torch_compat import kernels_only, tree_map
from ..trace import Concrete, Coordinates, Engine, Track


class Parts(Protocol):
    """The capture's components a scattered write uses (the mode, or its writes)."""

    engine: Engine
    coordinates: Coordinates
    concrete: Concrete


__all__ = ["PURE_WRITES", "write_scattered"]

#: In-place ops that write values at positions, each from its arguments alone.
PURE_WRITES = frozenset({"index_copy_", "scatter_", "index_put_", "masked_scatter_", "put_"})


def write_scattered(
    mode: Parts,
    name: str,
    target: Track,
    func: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> None:
    """Records ``func(*args, **kwargs)`` (a write into ``args[0]``, a view of the
    parameter ``target``) as the masked write it is (module docstring).

    Raises:
        Cannot: it is none (an operand not known at capture, a result of the values
            before); nothing is recorded.
    """
    view = args[0]
    before_zero, before_one = (_run_over(mode, name, func, args, kwargs, fill) for fill in (0, 1))
    with kernels_only():  # the capture's own reads of CPU tensors
        written = before_zero == before_one
        if view.is_floating_point():
            written |= torch.isnan(before_zero) & torch.isnan(before_one)
        untouched = (before_zero == 0) & (before_one == 1)
        if not bool((written | untouched).all()):
            raise Cannot(
                "what it writes depends on the values it writes over (an accumulating or "
                "reducing write), which do not exist on meta"
            )
        cond = mode.engine.table_of(written.to(torch.float64))
        values = mode.engine.table_of(before_zero)
    mode.coordinates.masked_write(target, view, cond, values, name)


def _run_over(
    mode: Parts, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any], fill: int
) -> torch.Tensor:
    """``func`` run on the CPU over a tensor of ``fill`` of ``args[0]``'s shape and dtype,
    its other operands' values known at capture; the tensor after it.

    Raises:
        Cannot: an operand's values are not known at capture (random values, a meta
            tensor not followed).
    """

    def known(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if mode.concrete.store.lookup(value) is not None:  # (a CPU temporary too: its
            return mode.concrete.known(value, name)  # real values may be torch's draws)
        if value.is_meta:
            raise Cannot(f"{name}: an operand is a meta tensor whose values capture did not follow")
        return value

    operands, keywords = tree_map(known, (tuple(args[1:]), dict(kwargs)))
    with kernels_only():
        over = torch.full(tuple(args[0].shape), fill, dtype=args[0].dtype, device="cpu")
        func(over, *operands, **keywords)
    return over
