"""An init program (:mod:`shardinit._program.nodes`) evaluated whole by torch's own CPU kernels: the
values eager torch holds for a temporary capture followed, for :mod:`.concrete`.

The core's binary64 evaluator (what replay uses) rounds once per stored temporary; eager
torch computes a float32 ``sin`` with its own float32 kernel, which may differ in the
last bit. A table computed at capture stands for eager values, so here each step is the
torch call eager made: a step whose result is stored in a dtype (``Round(op(...), dt)``)
and whose operands are held in that dtype (stored temporaries of it, Python numbers) runs
as torch's ``op`` in that dtype; any other step (index arithmetic, float64 temporaries,
the parts of composite steps) in float64, rounded where the program rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...._caches import BoundedMap
from ...._program.exact import INTEGER_DTYPES
from ...._program.keys import tree_key
from ...._program.nodes import Binary, Const, Coord, Expr, Round, Table, Unary, Where, walk_nodes
from ...._torch_compat import kernels_only

__all__ = ["eager_values", "exactly", "torch_values"]

_F64 = torch.float64
_CPU = torch.device("cpu")

_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "abs": torch.abs, "cos": torch.cos, "erf": torch.erf, "erfinv": torch.erfinv,
    "exp": torch.exp, "expm1": torch.expm1, "floor": torch.floor, "log": torch.log,
    "log1p": torch.log1p, "neg": torch.neg, "reciprocal": torch.reciprocal,
    "round_half_even": torch.round, "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid,
    "sin": torch.sin, "sqrt": torch.sqrt, "tanh": torch.tanh,
    "softplus": lambda x: torch.logaddexp(x, torch.zeros((), dtype=x.dtype, device=_CPU)),
}  # fmt: skip
_BINARY: dict[str, Callable[[Any, Any], torch.Tensor]] = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.true_divide,
    "pow": torch.pow, "floordiv": torch.floor_divide, "mod": torch.remainder,
    "max": torch.maximum, "min": torch.minimum, "lt": torch.lt, "le": torch.le,
    "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
}  # fmt: skip
_NO_SCALARS = frozenset({"max", "min"})  # torch.maximum/minimum take tensors only

Value = torch.Tensor | float


def torch_values(expr: Expr, shape: tuple[int, ...]) -> torch.Tensor:
    """The values of ``expr`` (no random source, no prior, nothing bad) over a tensor of
    ``shape``, in binary64 (exact for every dtype the program rounds to)."""
    values: dict[int, Value] = {}
    for node in walk_nodes(expr):
        values[id(node)] = _node(node, values, shape)
    result = values[id(expr)]
    if not isinstance(result, torch.Tensor):
        result = torch.tensor(result, dtype=_F64, device=_CPU)
    return result.to(_F64).expand(shape).contiguous()


def eager_values(expr: Expr, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    """The values of ``expr`` over a tensor of ``shape`` as eager torch holds them, a CPU
    tensor of ``dtype`` (the caller's own: it may write it); None where ``dtype`` cannot
    hold every value exactly.

    Results of expressions without tables are kept by the expression's tree key
    (:func:`~shardinit._program.keys.tree_key`), to a budget of bytes: a model computes
    the same coordinate table in each of its layers (Swin's relative positions, BEiT's
    196 x 196 x 2 relative coordinates, MaxViT's, one per attention), each a new
    expression of the same nodes."""
    with kernels_only():  # the capture's own computation on CPU values: no mode sees it
        return _eager_values(expr, shape, dtype)


def _eager_values(expr: Expr, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
    if math.prod(shape) == 0:
        return torch.empty(shape, dtype=dtype, device=_CPU)
    key = tree_key(expr)
    if key is None:
        return exactly(torch_values(expr, shape), dtype)
    kept = _EAGER.get((key, shape, dtype))
    if kept is None:
        kept = (exactly(torch_values(expr, shape), dtype),)
        weight = 0 if kept[0] is None else kept[0].numel() * kept[0].element_size()
        _EAGER.put((key, shape, dtype), kept, weight)
    return None if kept[0] is None else kept[0].clone()


#: The most bytes the results :func:`eager_values` keeps may hold together (a result
#: larger than this is computed each time).
_KEPT_BYTES = 64 << 20
#: :func:`eager_values` by the expression's tree key, shape and dtype.
_EAGER: BoundedMap[tuple[object, ...], tuple[torch.Tensor | None]] = BoundedMap(_KEPT_BYTES)


def exactly(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """``values`` (binary64) as ``dtype`` where that holds every value exactly (NaN as
    NaN), else None."""
    converted = values.to(dtype)
    back = converted.to(_F64)
    if not torch.equal(values.isnan(), back.isnan()):
        return None
    return converted if torch.equal(values.nan_to_num(0.0), back.nan_to_num(0.0)) else None


def _node(node: Expr, values: dict[int, Value], shape: tuple[int, ...]) -> Value:
    if isinstance(node, Const):
        return float(node.value)
    if isinstance(node, Coord):
        sizes = [1] * len(shape)
        sizes[node.dim] = shape[node.dim]
        return torch.arange(shape[node.dim], dtype=_F64, device=_CPU).view(sizes)
    if isinstance(node, Table):
        return _read(node, _tensor(values[id(node.index)]).to(torch.int64))
    if isinstance(node, Where):
        cond, a, b = (_tensor(values[id(n)]) for n in (node.cond, node.a, node.b))
        return torch.where(cond != 0, a, b)
    if isinstance(node, Round):
        return _rounded(node, values)
    return _step(node, values, _F64)


def _read(node: Table, index: torch.Tensor) -> torch.Tensor:
    """A table read at ``index``; NaN outside it (as the core pads a table: read only in a
    ``where`` branch another write covers, never selected)."""
    table = node.data.values
    nan = torch.full((), math.nan, dtype=_F64, device=_CPU)
    if table.numel() == 0:
        return nan.expand(index.shape)
    inside = (index >= 0) & (index < table.numel())
    return torch.where(inside, table[index.clamp(0, table.numel() - 1)], nan)


def _step(node: Expr, values: dict[int, Value], dtype: torch.dtype) -> Value:
    """A unary or binary step computed by torch in ``dtype`` (operands converted)."""
    if isinstance(node, Unary):
        return _UNARY[node.op](_tensor(values[id(node.x)], dtype))
    assert isinstance(node, Binary), node
    a, b = values[id(node.a)], values[id(node.b)]
    if node.op in _NO_SCALARS or not (isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)):
        a, b = _tensor(a, dtype), _tensor(b, dtype)
    else:  # a Python number operand stays one, as in eager torch (its dtype: the tensor's)
        a = a.to(dtype) if isinstance(a, torch.Tensor) else _number(a, dtype)
        b = b.to(dtype) if isinstance(b, torch.Tensor) else _number(b, dtype)
    if isinstance(a, torch.Tensor):
        result = _BINARY[node.op](a, b)
    else:
        result = _number_first(node.op, a, _tensor(b, dtype))
    return result.to(dtype) if result.dtype == torch.bool else result


def _number(value: float, dtype: torch.dtype) -> float | int:
    """A Python number operand as eager passed it: an integral one to an integer step is
    an ``int`` (a float would promote the step to float)."""
    if not dtype.is_floating_point and dtype != torch.bool and float(value).is_integer():
        return int(value)
    return value


def _number_first(op: str, number: float, tensor: torch.Tensor) -> torch.Tensor:
    """``number <op> tensor`` as Python's reflected operators run it on a tensor
    (``Tensor.__rtruediv__`` is ``reciprocal() * number``)."""
    if op in ("add", "mul", "eq", "ne"):
        return _BINARY[op](tensor, number)
    if op == "sub":
        return torch.rsub(tensor, number)
    if op == "div":
        return torch.reciprocal(tensor) * number
    if op == "pow":
        return torch.pow(number, tensor)
    return _BINARY[op](_tensor(number, tensor.dtype), tensor)


def _rounded(node: Round, values: dict[int, Value]) -> Value:
    """``Round(x, dtype)``: torch's step in ``dtype`` where eager computed it there (its
    operands held in that dtype), else the float64 value converted."""
    inner = node.x
    if isinstance(inner, Unary | Binary) and _held_in(inner, node.dtype):
        return _tensor(_step(inner, values, node.dtype)).to(_F64)
    value = _tensor(values[id(inner)])
    if node.dtype in INTEGER_DTYPES:  # an exact integer, wrapped as int64 -> dtype wraps
        value = value.to(torch.int64)
    return value.to(node.dtype).to(_F64)


def _held_in(step: Unary | Binary, dtype: torch.dtype) -> bool:
    """Whether every operand of ``step`` is a value of ``dtype`` (a temporary stored in it,
    or a Python number), so eager torch ran ``step`` in ``dtype``."""
    operands = (step.x,) if isinstance(step, Unary) else (step.a, step.b)
    return all(
        isinstance(x, Const) or (isinstance(x, Round) and x.dtype == dtype) for x in operands
    ) and not all(isinstance(x, Const) for x in operands)


def _tensor(value: Value, dtype: torch.dtype = _F64) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(dtype)
    if math.isnan(value) or math.isinf(value):
        return torch.tensor(value, dtype=dtype, device=_CPU)
    return torch.tensor(value, dtype=_F64, device=_CPU).to(dtype)
