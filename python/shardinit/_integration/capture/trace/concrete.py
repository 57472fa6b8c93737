"""Concrete values at capture: an operation the engine does not follow as a program (a
reduction, ``repeat_interleave``, ``sort``, indexing by computed integers, ``einsum``,
``item``, ...) on meta temporaries whose values are all known at capture.

A followed meta temporary whose fold is free of random sources, parameter reads and
opaque writes is a pure function of constants and coordinates: its values are what
eager torch would hold. Such an operation runs as eager torch would run it, on the CPU:
each meta operand is evaluated whole (its program, step by step with torch's own CPU
kernels in the dtypes eager torch used, :mod:`.torchvalues`), the very same torch
function runs on those CPU tensors, and each tensor it returns becomes a
temporary holding a table of torch's own CPU result (:meth:`.engine.Engine.table_of`),
as a CPU temporary init code computed would. So the tables are the same on every rank
(constants in, one deterministic CPU kernel) and are torch's values for that operation.

Closed world: an operand with random values (the stream draws those at each
destination's own index, so no table of them exists), values read from a parameter,
values no op describes, or an operation that draws from torch's generator itself is not
evaluated: its results stay opaque, refused with the reason where they reach a
parameter or a buffer. Memory is bounded by :data:`shardinit._program.tables.TABLE_CAP`, the most
elements one evaluated operand or result may hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...._program import tables
from ...._program.actions import Opaque
from ...._program.cannot import Cannot
from ...._program.nodes import Bad, Expr, Source, bad_reasons, contains
from ...._program.tables import beyond_table_cap
from ...._torch_compat import (
    stored_contiguous,
    stored_strides,
    torch_function_disabled,
    tree_leaves,
    tree_map,
)
from ..ops import eager_values, metadata_operands
from .engine import Engine
from .frames import user_frame
from .steps import unfollowed
from .store import RecordStore
from .tracks import Track, run_op, storage_id

__all__ = ["INDEX_CONSTRUCTORS", "Concrete", "Evaluated"]

#: Constructors of integer index tables from Python numbers alone (peft's OFT holds
#: ``triu_indices`` as a buffer): on meta they are run on the CPU, their results tables.
INDEX_CONSTRUCTORS = frozenset({"triu_indices", "tril_indices"})


def _on_meta(kwargs: Mapping[str, Any]) -> bool:
    """Whether a factory called with ``kwargs`` makes a meta tensor (its ``device=``, else
    the default device: ``with torch.device("meta")`` sets it)."""
    device = kwargs.get("device")
    if device is None:
        device = torch.get_default_device()  # ``with torch.device("meta")`` sets it
    return torch.device(device).type == "meta"


_CPU = torch.device("cpu")


@dataclass(frozen=True)
class Evaluated:
    """An operation run on the CPU: its arguments there (an in-place op's first one holds
    its new values) and its result."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    result: Any

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [leaf for leaf in tree_leaves(self.result) if isinstance(leaf, torch.Tensor)]


class Concrete:
    """Operations run on the concrete values of known meta temporaries (module
    docstring), over the capture's store and engine."""

    def __init__(self, store: RecordStore, engine: Engine) -> None:
        self.store = store
        self.engine = engine
        #: id of a temporary -> (it, its op count, its values): complex results, which
        #: programs (real values) cannot hold, kept as the CPU run gave them while
        #: nothing else writes the temporary (:meth:`complex_values`).
        self.complex: dict[int, tuple[Track, int, torch.Tensor]] = {}

    def complex_values(self, value: torch.Tensor) -> torch.Tensor | None:
        """The values of ``value`` (a meta temporary of a complex dtype, or a view of
        one) as eager torch holds them, where every one is a CPU run's result that
        nothing has written since (rotary tables: ``torch.polar``, then ``cat``); else
        None. The caller's own copy."""
        track = self.store.lookup(value)
        kept = None if track is None else self.complex.get(id(track))
        if kept is None or kept[0] is not track or len(track.ops) != kept[1]:
            return None
        with torch_function_disabled():  # its own layout (see torch_function_disabled)
            if value.dtype != track.base.dtype:
                return None
            offset = int(value.storage_offset() - track.base.storage_offset())
            shape, stride = tuple(value.shape), stored_strides(value)
        return kept[2].as_strided(shape, stride, offset).clone()

    def evaluate(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Evaluated | None:
        """``func`` run on the CPU values of its operands; None when no operand is a
        followed meta temporary (torch computes real operands itself).

        Raises:
            Cannot: some value is not known at capture, or the op draws from torch's
                generator.
        """
        leaves = [v for v in tree_leaves((args, kwargs)) if isinstance(v, torch.Tensor)]
        metas = [v for v in leaves if v.is_meta]
        constructor = name in INDEX_CONSTRUCTORS and not leaves and _on_meta(kwargs)
        if not constructor and not any(self.store.lookup(v) is not None for v in metas):
            return None
        if any(not (v.is_meta or v.device.type == "cpu") for v in leaves):
            return None  # real values on an accelerator: not this route's
        operands: dict[int, torch.Tensor] = {}
        for position in metadata_operands(name):  # read for shape and dtype: zeros will do
            value = args[position] if position < len(args) else None
            if isinstance(value, torch.Tensor) and value.is_meta:
                operands[id(value)] = torch.zeros(value.shape, dtype=value.dtype, device=_CPU)
        for value in metas:
            if id(value) in operands:
                continue
            try:
                operands[id(value)] = self.known(value, name)
            except Cannot as cannot:
                raise Cannot(f"{unfollowed(name)}, and {cannot}") from None
        cpu_args, cpu_kwargs = tree_map(
            lambda v: operands.get(id(v), v) if isinstance(v, torch.Tensor) else _on_cpu(v),
            (tuple(args), dict(kwargs)),
        )
        state = torch.default_generator.get_state()
        with torch.device(_CPU):  # a Python-level torch function's own factories too
            result = func(*cpu_args, **cpu_kwargs)
        drew = not torch.equal(torch.default_generator.get_state(), state)
        torch.default_generator.set_state(state)
        if drew:
            raise Cannot(
                f"{name} at {user_frame()} draws from torch's random generator (only the "
                "stream gives random values: use torch.rand/randn or fills)"
            )
        return Evaluated(cpu_args, cpu_kwargs, result)

    def attempt(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[Evaluated | None, str | None]:
        """:meth:`evaluate`, its :class:`Cannot` turned into None and why: the one "try
        the CPU run, else fall through" every caller makes (the values not known at
        capture, the result is opaque or a program's step)."""
        try:
            return self.evaluate(name, func, args, kwargs), None
        except Cannot as cannot:
            return None, cannot.reason

    def known(self, value: torch.Tensor, op: str) -> torch.Tensor:
        """The values of a meta operand on the CPU.

        Raises:
            Cannot: they are not known at capture.
        """
        track = self.store.lookup(value)
        if track is None or track.kind != "temp":
            raise Cannot("its operand is a meta tensor whose values capture did not follow")
        held = self.complex_values(value)
        if held is not None:
            return held
        if value.numel() > tables.TABLE_CAP:
            raise Cannot(beyond_table_cap(value.numel(), "an operand"))
        expr = self.engine.value_of(value, op)
        reasons = bad_reasons(expr)
        if reasons:
            raise Cannot(f"its operand's values are not known ({reasons[0]})")
        if self.engine.random(track) or contains(expr, Source):
            raise Cannot(
                "its operand holds random values (drawn at each destination element's own "
                "index at replay: there is no table of them at capture)"
            )
        return evaluate(expr, tuple(value.shape), value.dtype)

    def results(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any],
        evaluated: Evaluated,
    ) -> Any:  # fmt: skip
        """The meta results of an operation run by :meth:`evaluate`, each a temporary
        holding a table of its CPU values; Python values (``item``, ``tolist``) as they
        are. A result viewing an operand is that view on meta (followed already)."""
        tensors = evaluated.tensors
        if not tensors:
            return evaluated.result
        bases = {storage_id(v) for v in tree_leaves(evaluated.args) if isinstance(v, torch.Tensor)}
        if any(storage_id(t) in bases for t in tensors):
            result = run_op(func, args, kwargs)  # views of operands: the same views on meta
        else:  # new tensors: their metadata is the CPU run's (also where meta has no kernel)
            result = tree_map(_meta_like, evaluated.result)
        metas = tree_leaves(result)
        for meta, cpu in zip(metas, tree_leaves(evaluated.result), strict=True):
            fresh = isinstance(meta, torch.Tensor) and self.store.lookup(meta) is None
            if fresh and stored_contiguous(meta):  # (others: opaque, Engine.taint)
                self.hold(name, meta, cpu)
        return result

    def hold(self, name: str, meta: torch.Tensor, values: torch.Tensor) -> Track:
        """A new temporary ``meta`` that holds ``values`` (its CPU result)."""
        temp = self.store.new_temp(name, meta)
        expr = self.table(values)
        self.store.hold(temp, self.engine.action_of(temp, expr, name), name)
        if values.is_complex() and values.numel() <= tables.TABLE_CAP:
            self.complex[id(temp)] = (temp, len(temp.ops), values.contiguous())
        return temp

    def table(self, values: torch.Tensor) -> Expr:
        if values.numel() > tables.TABLE_CAP:
            return Bad(beyond_table_cap(values.numel(), "a result"))
        return self.engine.table_of(values)

    def write_inplace(
        self, name: str, target: Track, view: torch.Tensor, evaluated: Evaluated
    ) -> None:
        """The new values of an in-place op's first operand, run by :meth:`evaluate` on its
        CPU copy, written into ``view`` of ``target`` as a table."""
        values = evaluated.args[0]
        if tuple(values.shape) != tuple(view.shape):
            why = f"{name} at {user_frame()} changed the tensor's shape"
            self.engine.record(target, view, Opaque(why), name)
            return
        self.engine.write_expr(target, view, self.table(values), name)


def evaluate(expr: Expr, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """The values of ``expr`` over a tensor of ``shape`` as a CPU tensor of ``dtype``, as
    eager torch computed them (:mod:`.torchvalues`); an integer or bool one must be
    exact (Cannot: they are not, or they are complex)."""
    if dtype.is_complex:
        raise Cannot("complex values")
    values = eager_values(expr, shape, dtype)
    if values is None:
        raise Cannot(f"its operand's values are not exactly representable as {dtype}")
    return values


def _on_cpu(value: Any) -> Any:
    """A device argument of the op, as the CPU (the operands are CPU tensors there)."""
    if isinstance(value, torch.device) and value.type == "meta":
        return _CPU
    return "cpu" if isinstance(value, str) and value == "meta" else value


def _meta_like(value: Any) -> Any:
    """A new meta tensor of a CPU result's shape and dtype (contiguous: followed
    temporaries are)."""
    if not isinstance(value, torch.Tensor):
        return value
    return torch.empty(value.shape, dtype=value.dtype, device="meta")
