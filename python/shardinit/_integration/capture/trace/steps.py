"""Sources and elementwise steps of a capture: the temporaries init code makes
(factories of known values, random sources, elementwise operations and casts with a
followed operand), in-place steps on followed tensors, and the results of operations
no route follows (opaque, or tables). A component the dispatch (:mod:`.mode`) calls,
holding the record store and the expression engine (:mod:`.engine`)."""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...._caches import BoundedMap
from ...._program.actions import Fill, Opaque
from ...._program.cannot import Cannot
from ...._program.exact import (
    INTEGER_DTYPES,
    check_exact_integers,
    exact_integers,
    in_dtype,
    stored,
)
from ...._program.nodes import (
    Bad,
    Binary,
    Const,
    Coord,
    Expr,
    Prior,
    Source,
    bad_reasons,
    contains,
)
from ...._program.rewrite import combine
from ...._torch_compat import stored_contiguous, stored_order, torch_function_disabled, tree_leaves
from ..ops import POINTWISE, RANDOM_SOURCES, RESULT_DTYPE, cast, cast_dtype, no_formula, step_of
from .engine import Engine, constants_table
from .folds import unknown_values
from .frames import user_frame
from .store import RecordStore
from .tracks import Track, run_op

__all__ = ["Steps", "unfollowed"]


class Steps:
    """Sources and elementwise steps, recorded through ``engine`` (module docstring)."""

    def __init__(self, store: RecordStore, engine: Engine) -> None:
        self.store = store
        self.engine = engine

    def source(self, name: str, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """A factory of known values: the result is a new temporary."""
        state = torch.default_generator.get_state()
        try:
            result = run_op(func, args, kwargs)
        finally:
            torch.default_generator.set_state(state)
        if not isinstance(result, torch.Tensor):
            return result
        temp = self.store.new_temp(name, result)
        base = name.removesuffix("_like")
        if base in RANDOM_SOURCES:
            self.engine.record(temp, result, Fill(RANDOM_SOURCES[base]), name)
            return result
        expr = self.source_value(name, func, args, kwargs, result)
        self.store.hold(temp, self.engine.action_of(temp, expr, name), name)
        return result

    def source_value(
        self,
        name: str,
        func: Any,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        result: torch.Tensor,
    ) -> Expr:
        if name in ("tensor", "new_tensor"):
            data = args[1] if name == "new_tensor" else args[0] if args else kwargs["data"]
            return self.engine.table_of(torch.tensor(data, dtype=result.dtype, device="cpu"))
        if name == "eye":
            return Binary("eq", Coord(0), Coord(1))
        numbers = [float(a) for a in args if isinstance(a, (int, float)) and a is not True]
        start, step = (0.0, 1.0) if len(numbers) < 2 else (numbers[0], 1.0)
        if len(numbers) >= 3:
            step = numbers[2]
        start = float(kwargs.get("start", start))
        step = float(kwargs.get("step", step))
        if name == "linspace" or not _exact_steps(start, step, result):
            # torch computes start + step * i fused (one rounding), in the dtype's own
            # arithmetic for linspace's step: torch's own values, as a table.
            cpu = {**kwargs, "device": "cpu", "dtype": result.dtype, "requires_grad": False}
            return constants_table(run_op(func, args, cpu))  # of constants: no draw
        value = combine("add", combine("mul", Coord(0), Const(step)), Const(start))
        if result.dtype.is_floating_point:
            return stored(value, result.dtype)
        return exact_integers(value, result.dtype, _ranges(result))

    def pointwise(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """An elementwise operation with a followed operand: a new temporary."""
        step = POINTWISE[name]
        operands, options = step_of(step, args, kwargs)
        result = run_op(func, args, kwargs)
        if not isinstance(result, torch.Tensor):
            return result
        operands = numbers_as_torch_takes(operands)
        if not stored_contiguous(result):
            result = result.contiguous()
        shape = tuple(result.shape)
        exprs = [None if v is None else self.engine.operand(v, shape, name) for v in operands]
        temp = self.store.new_temp(name, result)
        self.engine.carry_read(temp, operands, name)
        options[RESULT_DTYPE] = result.dtype
        expr = in_dtype(step.build(exprs, options), result.dtype)
        expr = exact_integers(expr, result.dtype, _ranges(result))
        self.store.hold(temp, self.engine.action_of(temp, expr, name), name)
        return result

    def known_on_cpu(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
        """Whether the followed temporaries among ``args`` are CPU tensors whose values
        are all known (no random source, nothing opaque): then they hold eager torch's
        values, and torch's own result of an operation on them is eager's."""
        temps = self.store.followed((args, kwargs))
        if not temps or any(temp.base.device.type != "cpu" for temp in temps):
            return False
        return not any(contains(self.engine.folded(t), (Source, Bad, Prior)) for t in temps)

    def cast_temp(self, name: str, func: Any, args: Sequence[Any], kwargs: Any) -> Any:
        """A cast or device move of a followed temporary. Its result keeps the layout
        eager's has (``t.T.float()`` is transposed, ``to(dtype, memory_format=
        torch.channels_last)`` NHWC): the temporary followed is its storage's row-major
        view, whose values are the source's dims in that order."""
        result = run_op(func, args, kwargs)
        source = args[0]
        if not isinstance(result, torch.Tensor) or self.store.lookup(result) is not None:
            return result
        order = stored_order(result)
        if order is None:  # a cast gives a dense tensor; made one where it would not
            result, order = result.contiguous(), list(range(result.dim()))
        stored = result.permute(order)
        with torch_function_disabled():  # the source's own view, as torch reads it
            permuted = source.permute(order)
        dtype = cast_dtype(name, args, kwargs) or result.dtype
        operand = self.engine.operand(permuted, tuple(stored.shape), name)
        expr = cast(operand, source.dtype, dtype, _ranges(stored))
        temp = self.store.new_temp(name, stored)
        self.engine.carry_read(temp, source, name)
        self.store.hold(temp, self.engine.action_of(temp, expr, name), name)
        return result

    def inplace(
        self, name: str, base_name: str, target: Track, func: Any, args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> None:  # fmt: skip
        """Records an in-place elementwise step on (a view of) a followed tensor (the
        dispatch runs it on a temporary's or buffer's real values)."""
        view = args[0]
        step = POINTWISE[base_name]
        operands, options = step_of(step, args, kwargs)
        operands = numbers_as_torch_takes(operands)
        shape = tuple(view.shape)
        exprs: list[Expr | None] = [Prior()]
        exprs += [None if v is None else self.engine.operand(v, shape, name) for v in operands[1:]]
        self.engine.carry_read(target, operands[1:], name)
        options[RESULT_DTYPE] = view.dtype
        self.engine.write_expr(target, view, step.build(exprs, options), name)

    def check_integers(self, target: Track, view: torch.Tensor, name: str) -> None:
        """After an in-place write into an integer temporary: where one of its integer
        steps may pass 2**53 (binary64 would round it before the wrap), what was
        written is opaque, refused with why where it reaches a parameter or buffer."""
        if target.kind != "temp" or target.base.dtype not in INTEGER_DTYPES:
            return
        try:
            check_exact_integers(self.engine.folded(target), _ranges(target.base))
        except Cannot as cannot:  # opaque: refused only where it reaches a tensor
            self.engine.record(target, view, Opaque(f"{name} at {user_frame()}: {cannot}"), name)

    def taint(self, name: str, args: Any, kwargs: Any, result: Any, why: str | None = None) -> None:
        """Results of an operation shardinit does not follow, on followed temporaries:
        opaque (unless on the CPU and free of random values, then a table), with ``why``
        (default: an operand's values unknown and why, :meth:`unknown_operand`, else the
        operation is not followed)."""
        temps = self.store.followed((args, kwargs))
        if not temps:
            return
        leaves = [
            leaf
            for leaf in tree_leaves(result)
            if isinstance(leaf, torch.Tensor) and self.store.lookup(leaf) is None
        ]
        if not leaves:  # views of followed tensors (w[i]): nothing new to follow
            return
        random = any(contains(self.engine.folded(t), (Source, Bad)) for t in temps)
        unknown = self.unknown_operand(temps) if random and why is None else None
        if unknown is not None:  # the reason is the operand's values, not the op
            why = f"{name} at {user_frame()}: {unknown_values(unknown)}"
        for leaf in leaves:
            if leaf.device.type == "cpu" and not random:
                continue  # a CPU tensor of known values: a table if it is copied
            order = stored_order(leaf)  # dense in some order (LAPACK's column-major U too)
            if order is not None:
                stored = leaf if order == sorted(order) else leaf.permute(order)
                temp = self.store.new_temp(name, stored)
                temp.from_random = True
                self.engine.carry_read(temp, (args, kwargs), name)
                self.store.hold(temp, Opaque(why or unfollowed(name)), name)

    def unknown_operand(self, operands: list[Track]) -> Track | None:
        """The first operand whose values read are unknown to the capture and which says
        why itself (a buffer's that no constructor value gives, or that to_empty
        emptied, and nothing wrote since: :func:`.folds.unknown_values`); else None."""
        for track in operands:
            why = unknown_values(track)
            if why and why in bad_reasons(self.engine.folded(track)):
                return track
        return None


def numbers_as_torch_takes(operands: list[Any]) -> list[Any]:
    """The operands of an elementwise step with each Python number as torch's kernel
    takes it: where the tensors make the step float32 (``torch.result_type``), a
    float is rounded to float32 first (``torch.arange(400.) * 0.01`` multiplies by
    float32's 0.01, not binary64's: 117 of those 400 products differ otherwise)."""
    tensors = [v for v in operands if isinstance(v, torch.Tensor)]
    if not tensors or not any(isinstance(v, float) for v in operands):
        return operands
    with torch_function_disabled():  # the operands' own dtypes and ranks
        common = tensors[0].dtype
        for value in [*tensors[1:], *(v for v in operands if isinstance(v, (bool, int, float)))]:
            common = _result_type(common, value)
    if common != torch.float32:
        return operands
    return [_float32(v) if isinstance(v, float) else v for v in operands]


def _result_type(common: torch.dtype, value: Any) -> torch.dtype:
    """``torch.result_type`` of a 0-d tensor of ``common`` and ``value``: a function of
    ``common`` and the kind of ``value`` alone (a number's type; a tensor's dtype and
    whether it is 0-d: torch promotes by category, never by value), kept by those."""
    if isinstance(value, torch.Tensor):
        key: tuple[object, ...] = (common, value.dtype, value.dim() == 0)
    else:
        key = (common, type(value))
    found = _RESULT_TYPES.get(key)
    if found is None:
        found = torch.result_type(torch.empty((), dtype=common, device="meta"), value)
        _RESULT_TYPES.put(key, found)
    return found


#: :func:`_result_type` by the dtype and the operand's kind.
_RESULT_TYPES: BoundedMap[tuple[object, ...], torch.dtype] = BoundedMap()


def _float32(value: float) -> float:
    """``value`` rounded to float32 (to nearest, as a C cast; beyond float32's range, an
    infinity, as torch's cast), with no tensor made (init code may run under a
    ``torch.device("meta")`` context)."""
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def unfollowed(name: str) -> str:
    """Why the results of ``name`` (called here) are not a program."""
    kind = (
        "an elementwise operation shardinit has no exact formula for"
        if no_formula(name)
        else "not an elementwise operation shardinit follows"
    )
    return f"{name} at {user_frame()} is {kind}"


def _ranges(result: torch.Tensor) -> list[tuple[int, int]]:
    return [(0, int(size)) for size in result.shape]


def _exact_steps(start: float, step: float, result: torch.Tensor) -> bool:
    """Whether ``start + step * i`` is exact at every index of ``result`` in binary64 and
    in ``result``'s dtype (integers within its significand): then the program, with its
    one rounding, is torch's value. Integer dtypes are checked by their own rule."""
    if not result.dtype.is_floating_point:
        return True
    if not (start.is_integer() and step.is_integer()):
        return False
    digits = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
    reach = abs(start) + abs(step) * max(int(result.shape[0]) - 1, 0) if result.dim() else 0
    return reach <= 2.0 ** digits.get(result.dtype, 0)
