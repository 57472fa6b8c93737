"""Writes into followed tensors that take more than one step (``.data =``,
``__setitem__``), a number's fill, and the run of a recorded write on a temporary's or
buffer's real values. A component the dispatch's write handlers (:mod:`.targets`) call,
holding the store, the engine and the other components."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...._program.actions import Opaque, TrackAction, constant_fill
from ...._program.cannot import Cannot
from ...._torch_compat import tree_leaves
from ....errors import ShardInitError
from ..ops import scalar
from ..trace import Concrete, Coordinates, Copies, Engine, RecordStore, Steps, Track, same_view
from .backstop import WriteBackstop
from .metaruns import run_meta_inplace

__all__ = ["Writes", "quietly", "tensors_in"]


def quietly(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``func(*args, **kwargs)`` leaving torch's CPU random generator as it was (followed
    temporaries are sampled by the stream at replay, not by torch)."""
    state = torch.default_generator.get_state()
    try:
        return func(*args, **kwargs)
    finally:
        torch.default_generator.set_state(state)


def tensors_in(tree: Any) -> list[torch.Tensor]:
    """The tensors among the leaves of ``tree``."""
    return [leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor)]


class Writes:
    """Writes into followed tensors (module docstring)."""

    def __init__(
        self,
        store: RecordStore,
        engine: Engine,
        parts: tuple[Steps, Copies, Coordinates, Concrete],
        backstop: WriteBackstop,
    ) -> None:
        self.store, self.engine, self.backstop = store, engine, backstop
        self.steps, self.copies, self.coordinates, self.concrete = parts

    def run_on(self, target: Track, func: Any, args: Sequence[Any], kwargs: Any) -> Any:
        """Runs a recorded write on a temporary's or buffer's real values (a parameter's
        stand-in has none: its first argument is returned)."""
        if target.kind == "param":
            return args[0]
        if target.kind == "temp":  # a buffer's write is checked by the backstop each time
            return run_meta_inplace(
                lambda: self._run(target, func, args, kwargs), func, args, kwargs
            )
        return self._run(target, func, args, kwargs)

    def _run(self, target: Track, func: Any, args: Sequence[Any], kwargs: Any) -> Any:
        with self.backstop.expecting(target):
            return quietly(func, args, kwargs)

    def set_data(self, target: Track, view: torch.Tensor, value: Any) -> None:
        """``tensor.data = value``: a copy when ``value`` has the tensor's shape and dtype;
        else it would change what the tensor is (refused on a parameter or buffer; a
        temporary, such as a Parameter its constructor makes, becomes ``value``'s
        tensor, as in eager torch, and what was written to it before is opaque)."""
        op = "tensor.data = value"
        if same_view(view, value):
            return
        if not isinstance(value, torch.Tensor) or (value.shape, value.dtype) != (
            view.shape,
            view.dtype,
        ):
            shown = (
                f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else value
            )
            why = f"it makes the {tuple(view.shape)} {view.dtype} tensor a {shown} one"
            if target.kind != "temp":
                raise self.store.fail(target, op, why)
            self.engine.record(target, view, Opaque(why), op)
            if isinstance(value, torch.Tensor):  # else torch refuses it, as eager does
                view.data = value
            return
        self.copies.copy_into(target, view, value, op)
        # ``.data =`` bypasses autograd: a Parameter that requires grad (a constructor's,
        # outside no_grad) takes the copy through its detached self.
        self.run_on(target, torch.Tensor.copy_, (view.detach(), value), {})

    def setitem_by_meta(
        self, target: Track, tensor: torch.Tensor, index: Any, value: Any, op: str
    ) -> None:
        """``tensor[index] = value`` with meta tensors in ``index`` (peft BOFT's
        ``perm_mat[i, idx] = 1``): meta cannot read an index, so on a known meta temporary
        with a known index the write runs on the CPU values (:mod:`.concrete`); else it is
        refused (a parameter) or the temporary's values become opaque."""
        args = (tensor, index, value)
        evaluated, why = self.concrete.attempt("__setitem__", torch.Tensor.__setitem__, args, {})
        if evaluated is not None and target.kind == "temp" and target.base.is_meta:
            self.concrete.write_inplace("__setitem__", target, tensor, evaluated)
            return
        self.engine.cannot(target, tensor, Cannot(why or "an index by tensors is no box"), op)

    def setitem(self, target: Track, tensor: torch.Tensor, index: Any, value: Any) -> None:
        op = f"[{index!r}] = {value!r}"
        if any(t.is_meta for t in tensors_in(index)):
            self.setitem_by_meta(target, tensor, index, value, op)
            return
        view = tensor[index]
        if same_view(view, value):
            return  # `w[idx] *= 2`: Python stores the scaled view back into itself
        if self.store.lookup(view) is not target:
            if self.coordinates.indexed_constant(target, tensor, index, value, op):
                pass  # constants at listed positions or a mask: a program of coordinates
            elif target.kind == "param":
                raise self.store.fail(
                    target, op, "advanced indexing writes a region that is not a box"
                )
            else:
                self.engine.record(target, tensor, Opaque(f"{op}: advanced indexing"), op)
        elif isinstance(value, torch.Tensor) and value.dim() > 0:
            self.copies.copy_into(target, view, value, op)
        else:
            self.engine.record(target, view, self.constant(target, value, op), op)
        self.run_on(target, torch.Tensor.__setitem__, (tensor, index, value), {})

    def constant(self, target: Track, value: Any, op: str) -> TrackAction:
        """A fill by the number ``value`` (refused on a parameter, opaque on others when
        it is no number)."""
        try:
            return constant_fill(scalar(value))
        except ShardInitError as why:  # scalar() checks the operand: it refuses nothing
            if target.kind == "param":
                raise self.store.fail(target, op, str(why)) from None
            return Opaque(str(why))
