"""The dispatch of a capture: a ``TorchFunctionMode`` that sends each torch call on the
followed tensors down one route (see :mod:`.recorder` for the routes of fills and
copies, :mod:`.computed` for computed values)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import torch

from ..._torch_compat import handed_to_mode, tree_flatten
from ...errors import ShardInitError
from ...init import Constant
from .computed import SOURCES, Computing, read_reason
from .pointwise import POINTWISE, inplace_name, no_formula
from .recorder import (
    CONCATS,
    COPIES,
    FACTORIES,
    METADATA,
    VIEWS,
    frame_arguments,
    func_name,
    init_frame,
    is_inplace,
    same_view,
)
from .records import Action, Fill, Opaque
from .tracks import Track, storage_id
from .translations import INIT_FUNCTIONS, INIT_TRANSLATIONS, METHOD_TRANSLATIONS, bind, scalar

__all__ = ["CaptureMode"]

_CASTS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "to", "type", "type_as"})
_SCALES = frozenset({"scale", "divide"})


def _tensor_operand(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a mul_/div_ has a tensor operand (not a 0-d CPU number) or a rounding."""
    if kwargs.get("rounding_mode") is not None:
        return True
    other = args[1] if len(args) > 1 else kwargs.get("other")
    return isinstance(other, torch.Tensor) and (other.dim() > 0 or other.device.type != "cpu")


def quietly(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``func(*args, **kwargs)`` leaving torch's CPU random generator as it was (followed
    temporaries are sampled by the stream at replay, not by torch)."""
    state = torch.default_generator.get_state()
    try:
        return func(*args, **kwargs)
    finally:
        torch.default_generator.set_state(state)


class CaptureMode(Computing):
    """The dispatch: which route an operation takes (see the module docstring)."""

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        found = init_frame()
        if found is not None:
            return self.inside_init(*found, func, args, kwargs)
        name = func_name(func)
        if name in METADATA or name.endswith(".__get__"):
            return func(*args, **kwargs)
        target = self.lookup(args[0]) if args else None
        if target is not None:
            handled, result = self.on_target(name, target, func, args, kwargs)
            if handled:
                return result
        if name in VIEWS:
            return self.view(name, func, args, kwargs)
        if name in FACTORIES or name in CONCATS or (name in COPIES and target is not None):
            return self.make_temporary(name, func, args, kwargs)
        if name in SOURCES:
            return self.source(name, func, args, kwargs)
        followed = [t for t in map(self.lookup, tree_flatten((args, kwargs))[0]) if t]
        if name in POINTWISE and any(t.kind != "buffer" for t in followed):
            return self.pointwise(name, func, args, kwargs)
        if name in _CASTS and target is not None and target.kind == "temp":
            return self.cast_temp(name, func, args, kwargs)
        params = self.params_in((args, kwargs))
        if params:
            if no_formula(name):
                why = "it is an elementwise operation shardinit has no exact formula for"
            elif is_inplace(name) and target is not None:
                why = "this in-place operation on the parameter's values is not replayable"
            else:
                why = "it reads the parameter's values (they do not exist on meta)"
            raise self.fail(params[0], name, why)
        reads = self.read_in((args, kwargs), name)
        if reads:  # values computed from a parameter's, beyond elementwise steps
            raise self.fail(reads[0][0], name, read_reason(reads[0]))
        if target is not None and is_inplace(name):
            self.record(target, args[0], Opaque(f"{name} is not a recorded fill"), name)
        result = func(*args, **kwargs)
        self.taint(name, args, kwargs, result)
        return result

    # ----------------------------------------------------------------- routes

    def inside_init(
        self, frame: FrameType, init_name: str, func: Any, args: Sequence[Any], kwargs: Any
    ) -> Any:
        """An operation inside ``torch.nn.init.<init_name>``: the call is recorded once, at
        its first operation; torch's own body then runs (a no-op on meta stand-ins)."""
        arguments = frame_arguments(frame)
        if frame not in self.handled:
            self.handled.add(frame)
            tensor = arguments.get("tensor")
            track = self.lookup(tensor)
            if track is not None and isinstance(tensor, torch.Tensor):
                entry = INIT_TRANSLATIONS[init_name]
                values = [
                    arguments.get(n, d) for n, d in zip(entry.names, entry.defaults, strict=True)
                ]
                shown = ", ".join(f"{n}={v!r}" for n, v in zip(entry.names, values, strict=True))
                self.write(track, tensor, entry, values, f"torch.nn.init.{init_name}({shown})")
        if handed_to_mode(sys._getframe(2), frame):
            # The function handed itself to the mode before running: run its body now.
            return INIT_FUNCTIONS[init_name](**arguments)
        if args and self.lookup(args[0]) is not None:
            return quietly(func, args, kwargs)
        return func(*args, **kwargs)

    def on_target(
        self, name: str, target: Track, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[bool, Any]:
        """Writes into a followed tensor; ``(False, None)`` when ``name`` is none."""
        view = args[0]
        if name == "data.__set__":
            value = args[1]
            if not same_view(view, value):
                self.copy_into(target, view, value, "param.data = tensor")
            return True, None
        entry = METHOD_TRANSLATIONS.get(name)
        if entry is not None and entry.kind in _SCALES and _tensor_operand(args, kwargs):
            entry = None  # arithmetic with a tensor: an elementwise step
        base = inplace_name(name)
        if entry is not None:
            values = bind(
                args[1:], {k: v for k, v in kwargs.items() if k != "rounding_mode"}, entry
            )
            shown = ", ".join(f"{n}={v!r}" for n, v in zip(entry.names, values, strict=True))
            self.write(target, view, entry, values, f"{name.strip('_')}_({shown})")
        elif name == "copy_":
            self.copy_into(target, view, args[1], "copy_")
        elif name == "pad" and not any(args[1] if len(args) > 1 else kwargs.get("pad", ())):
            # Zero padding is the identity: transformers' _adjust_bias stores it back.
            return True, view
        elif name == "__setitem__":
            self.setitem(target, view, args[1], args[2])
            return True, None
        elif base is not None:
            return True, self.inplace(name, base, target, func, args, kwargs)
        else:
            return False, None
        return True, view if target.kind == "param" else quietly(func, args, kwargs)

    def setitem(self, target: Track, tensor: torch.Tensor, index: Any, value: Any) -> None:
        op = f"[{index!r}] = {value!r}"
        view = tensor[index]
        if same_view(view, value):
            return  # `w[idx] *= 2`: Python stores the scaled view back into itself
        if self.lookup(view) is not target:
            if target.kind == "param":
                raise self.fail(target, op, "advanced indexing writes a region that is not a box")
            self.record(target, tensor, Opaque(f"{op}: advanced indexing"), op)
        elif isinstance(value, torch.Tensor) and value.dim() > 0:
            self.copy_into(target, view, value, op)
        else:
            try:
                action: Action = Fill(Constant(scalar(value)))
            except ShardInitError as why:
                if target.kind == "param":
                    raise self.fail(target, op, str(why)) from None
                action = Opaque(str(why))
            self.record(target, view, action, op)
        if target.kind != "param":
            tensor.__setitem__(index, value)

    def view(self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        result = func(*args, **kwargs)
        followed = [t for t in map(self.lookup, tree_flatten((args, kwargs))[0]) if t is not None]
        params = [track for track in followed if track.kind == "param"]
        for leaf in tree_flatten(result)[0]:
            if params and isinstance(leaf, torch.Tensor) and self.lookup(leaf) is None:
                raise self.fail(params[0], name, "it copies the values (a read)")
        self.taint(name, args, kwargs, result)  # advanced indexing copies
        return result

    def make_temporary(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """A factory, ``cat``/``stack`` or ``clone``: the result is a new temporary."""
        if name in CONCATS or name in COPIES:
            params = self.params_in((args, kwargs))
            if params:
                raise self.fail(params[0], name, "it reads the parameter's values")
        result = func(*args, **kwargs)
        if not isinstance(result, torch.Tensor) or not result.is_contiguous():
            return result
        if name in COPIES and storage_id(result) == storage_id(args[0]):
            return result  # contiguous() of a contiguous tensor: itself
        temp = self.new_temp(name, result)
        if name in FACTORIES:
            self.fill_new(temp, name, args, kwargs)
        elif name in COPIES:
            self.copy_into(temp, result, args[0], name)
        else:
            self.concatenate(temp, name, args, kwargs)
        return result

    def fill_new(
        self, temp: Track, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        value = FACTORIES[name]
        if value is None:
            return
        if value == "arg":
            position = 1 if name == "full" else 2 if name == "new_full" else 1
            value = kwargs.get("fill_value", args[position] if len(args) > position else None)
        try:
            action: Action = Fill(Constant(scalar(value)))
        except ShardInitError as why:
            action = Opaque(str(why))
        self.record(temp, temp.base, action, name)

    def concatenate(
        self, temp: Track, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        tensors = list(kwargs.get("tensors", args[0] if args else ()))
        dim = int(kwargs.get("dim", args[1] if len(args) > 1 else 0)) % temp.base.dim()
        offset = 0
        for index, part in enumerate(tensors):
            if name == "stack":
                dst = temp.base.select(dim, index)
            else:
                dst = temp.base.narrow(dim, offset, part.shape[dim] if part.dim() else 0)
                offset += dst.shape[dim]
            if dst.numel():
                self.copy_into(temp, dst, part, name)
