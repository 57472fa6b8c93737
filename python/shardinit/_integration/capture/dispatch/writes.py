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
from ...._torch_compat import (
    kernels_only,
    stored_contiguous,
    stored_strides,
    torch_function_disabled,
    tree_leaves,
)
from ....errors import ShardInitError
from ..ops import scalar, shown
from ..trace import (
    Concrete,
    Coordinates,
    Copies,
    Engine,
    RecordStore,
    Steps,
    Track,
    give_eager_layout,
    same_view,
)
from .backstop import WriteBackstop
from .metaruns import run_meta_inplace
from .scattered import write_scattered

__all__ = ["Writes", "quietly", "tensors_in"]


def quietly(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``func(*args, **kwargs)`` leaving torch's CPU random generator as it was (followed
    temporaries are sampled by the stream at replay, not by torch)."""
    state = torch.default_generator.get_state()
    try:
        return func(*args, **kwargs)
    finally:
        torch.default_generator.set_state(state)


def _plain_index(index: Any) -> bool:
    """Whether ``index`` holds no tensor: a number, slice, None or Ellipsis, or a tuple
    of them (most writes: ``w[i] = t``, ``table[i, j] = c``), known without a walk."""
    parts = index if type(index) is tuple else (index,)
    return all(type(part) in _PLAIN_INDEX for part in parts)


#: The types of a plain index's parts (:func:`_plain_index`).
_PLAIN_INDEX = (int, slice, type(None), type(Ellipsis), bool)


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
        if view is not target.base and not isinstance(view, torch.nn.Parameter):
            # A view's .data = rebinds that view alone in eager torch: the tensor it
            # viewed keeps its values, and later writes through the view go elsewhere
            # (a parameter's stand-in is a Parameter, a tied holder's too).
            raise self.store.fail(
                target, op,
                "it is set on a view, which eager torch rebinds to the value alone (the "
                "viewed tensor keeps its values, and later writes through the view miss "
                "it); shardinit does not follow the rebound view: write through the view "
                "(view.copy_(value)), or set the tensor's own .data",
            )  # fmt: skip
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
        self.keep_strides(target, view, value, op)
        # ``.data =`` bypasses autograd: a Parameter that requires grad (a constructor's,
        # outside no_grad) takes the copy through its detached self.
        self.run_on(target, torch.Tensor.copy_, (view.detach(), value), {})

    def keep_strides(self, target: Track, view: torch.Tensor, value: torch.Tensor, op: str) -> None:
        """After ``tensor.data = value``: the tensor takes ``value``'s strides, as in eager
        torch. A dense layout (a transpose, a permutation) is kept on the track (the meta
        tensor takes it after the capture, :func:`..session.standins.give_memory_formats`)
        and on the stand-in (its views follow eager's layout, ``threads.py``); strides
        with gaps or repeats (``t[:, ::2]``, ``expand``) no allocation makes: refused."""
        if target.kind == "temp":
            return
        with torch_function_disabled():  # the tensors' own layout
            strides = stored_strides(value)
            contiguous = stored_contiguous(value)
            dense = torch.empty_like(value, device="meta").stride() == strides
        if contiguous:
            target.strides = None
            give_eager_layout(view, view)
            return
        if not dense:
            raise self.store.fail(
                target, op,
                f"the value has strides {strides}, with gaps or repeats, which eager's "
                "tensor takes and no allocation gives (copy_ it instead, or make it "
                "contiguous)",
            )  # fmt: skip
        target.strides = strides
        give_eager_layout(view, value)

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

    def scattered_item(
        self, target: Track, tensor: torch.Tensor, index: Any, value: Any, op: str
    ) -> None:
        """``tensor[index] = value`` on a parameter by an advanced index: values known at
        capture at positions known at capture (:mod:`.scattered`), else refused."""
        args = (tensor, index, value)
        try:
            write_scattered(self, op, target, torch.Tensor.__setitem__, args, {})
        except Cannot as cannot:
            why = f"advanced indexing writes a region that is not a box, and {cannot}"
            raise self.store.fail(target, op, why) from None

    def setitem(self, target: Track, tensor: torch.Tensor, index: Any, value: Any) -> None:
        op = f"[{shown(index)}] = {shown(value)}"
        if not _plain_index(index) and any(t.is_meta for t in tensors_in(index)):
            self.setitem_by_meta(target, tensor, index, value, op)
            return
        if target.kind == "temp" and type(tensor) is torch.Tensor:  # the capture's own
            with kernels_only():  # view of a plain temporary: torch's kernels alone (a
                view = tensor[index]  # Python dispatch per index otherwise)
        elif target.kind != "temp" and _plain_index(index):
            # A stand-in's view by numbers and slices, for the capture's own use (its
            # box and layout; never handed to init code): a plain view of the same
            # storage by torch's kernels alone. Through the dispatch it would be made a
            # checked view, for a thread or a layout that no view of a basic index
            # meets (a row loop paid it per row).
            with kernels_only():
                view = tensor[index]
        else:  # a stand-in's views are checked views (session/threads.py)
            with torch_function_disabled():  # a view of a followed tensor: no mode's business
                view = tensor[index]
        if same_view(view, value):
            return  # `w[idx] *= 2`: Python stores the scaled view back into itself
        if self.store.lookup(view) is not target:
            if self.coordinates.indexed_constant(target, tensor, index, value, op):
                pass  # constants at listed positions or a mask: a program of coordinates
            elif target.kind == "param":  # a table at positions known at capture, or why not
                self.scattered_item(target, tensor, index, value, op)
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
