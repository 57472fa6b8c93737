"""The recorder: a ``TorchFunctionMode`` that turns what init code does to the followed
tensors (:mod:`.tracks`) into records, by the tables of :mod:`.translations`.

Three routes reach it:

* a ``torch.nn.init`` function, recognised by its code on the call stack (so wrappers,
  aliases and patched module attributes all count): recorded once, at the first tensor
  operation it makes; the operations it makes inside are its own business;
* a tensor method that writes values (``normal_``, ``fill_``, ``mul_``, ``copy_``, ...);
* operations that make or compose temporaries (``new_empty``, ``torch.zeros``, ``cat``,
  ``stack``, views, ``clone``).

Anything else that reads or writes a parameter's values raises
:class:`~.records.UnsupportedInitOpError` naming the parameter, the operation and the
caller's ``file:line``.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..._torch_compat import handed_to_mode, tree_flatten
from ...errors import ShardInitError
from ...init import Constant
from ...spec import ParamSpec
from .records import Action, CapturedOp, Dirac, Eye, Fill, Opaque, UnsupportedInitOpError
from .regions import box_runs, flat_range_boxes, map_runs, view_region, view_runs
from .tracks import Track, storage_id
from .translations import (
    INIT_CODES,
    INIT_FUNCTIONS,
    INIT_TRANSLATIONS,
    METHOD_TRANSLATIONS,
    Translation,
    bind,
    build,
    scalar,
)

__all__ = ["CaptureMode"]

# Files whose frames are plumbing between the user's call and the op (torch's own
# reset_parameters frames are kept: that is the caller).
_PLUMBING = tuple(
    os.path.join(*parts)
    for parts in (
        ("torch", "nn", "init.py"),
        ("torch", "overrides.py"),
        ("torch", "_tensor.py"),
        ("torch", "utils", "_device.py"),
        ("torch", "utils", "_contextlib.py"),
        ("torch", "_compile.py"),
        ("transformers", "initialization.py"),  # transformers' guarded nn.init wrappers
    )
)
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Tensor methods/functions that only look at metadata: always allowed.
_METADATA = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
        "is_contiguous", "element_size", "untyped_storage", "get_device", "is_floating_point",
        "is_complex", "is_signed", "__len__", "__repr__", "__format__", "__hash__",
        "requires_grad_", "retain_grad", "register_hook", "data_ptr", "_is_view",
        "has_names", "is_shared", "is_pinned", "is_set_to", "type", "__reduce_ex__",
        "__dir__", "__setstate__",
    }
)  # fmt: skip
# Ops whose results alias their input (checked: a result must share the storage).
_VIEWS = frozenset(
    {
        "__getitem__", "view", "view_as", "reshape", "reshape_as", "narrow", "select", "t",
        "transpose", "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "detach",
        "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "expand",
        "expand_as", "as_strided", "diagonal", "movedim", "moveaxis", "swapaxes",
        "swapdims", "__iter__", "unfold", "alias", "hsplit", "vsplit",
    }
)  # fmt: skip
# Factories of temporaries, with the constant they fill (None: empty; "arg": a value).
_FACTORIES: Mapping[str, float | str | None] = {
    "empty": None, "new_empty": None, "empty_like": None,
    "zeros": 0.0, "new_zeros": 0.0, "zeros_like": 0.0,
    "ones": 1.0, "new_ones": 1.0, "ones_like": 1.0,
    "full": "arg", "new_full": "arg", "full_like": "arg",
}  # fmt: skip
_CONCATS = frozenset({"cat", "concat", "concatenate", "stack"})
_COPIES = frozenset({"clone", "contiguous"})
_HELP = (
    "shardinit can replay random fills (torch.nn.init uniform_/normal_/trunc_normal_/"
    "kaiming_*/xavier_*, tensor normal_/uniform_), constant fills (zero_, fill_, zeros_, "
    "ones_, constant_, eye_, dirac_), mul_/div_ by a Python scalar on box regions, and "
    "copies of temporaries filled that way; see docs/capturing-init.md"
)


_ZERO = Constant(0.0)
# A write into a buffer's real stand-in: only its region matters (the values are real).
_BUFFER_WRITE = _ZERO


def user_frame() -> str:
    """``file:line in function`` of the innermost frame outside shardinit's and the
    libraries' plumbing."""
    for frame in reversed(traceback.extract_stack()):
        filename = os.path.abspath(frame.filename)
        if filename.startswith(_OWN_DIR) or filename.endswith(_PLUMBING):
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"


def _func_name(func: Any) -> str:
    name = getattr(func, "__name__", repr(func))
    if name in ("__get__", "__set__"):
        owner = getattr(func, "__self__", None)
        return f"{getattr(owner, '__name__', '?')}.{name}"
    return str(name)


def _init_frame() -> tuple[FrameType, str] | None:
    """The innermost frame running a ``torch.nn.init`` function's original code."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = INIT_CODES.get(frame.f_code)
        if name is not None:
            return frame, name
        frame = frame.f_back
    return None


def _frame_arguments(frame: FrameType) -> dict[str, Any]:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    local = frame.f_locals
    return {name: local[name] for name in names if name in local}


def _same_view(view: torch.Tensor, value: Any) -> bool:
    return bool(
        isinstance(value, torch.Tensor)
        and storage_id(value) == storage_id(view)
        and value.storage_offset() == view.storage_offset()
        and value.shape == view.shape
        and value.stride() == view.stride()
    )


def _check_whole(track: Track, view: torch.Tensor) -> None:
    """``orthogonal_``'s matrix is that of the tensor it is given: replayable only when
    that is a parameter itself, whole and in its own order (flattened the same way).

    Raises:
        ShardInitError: a temporary, part of a parameter, or a reordered view.
    """
    if track.kind != "param":
        raise ShardInitError("orthogonal_ on a temporary is not replayable (fill the parameter)")
    whole = (
        view.dim() == track.base.dim()
        and tuple(view.shape) == track.shape
        and view.is_contiguous()
        and view.storage_offset() == track.base.storage_offset()
    )
    if not whole:
        raise ShardInitError(
            f"orthogonal_ on a view of shape {tuple(view.shape)} that is not the whole "
            f"parameter of shape {track.shape} in its own order: its matrix would be the "
            "view's; call it on the parameter itself"
        )


def _is_inplace(name: str) -> bool:
    return name.endswith("_") or name.startswith("__i") or name == "__setitem__"


class _Recorder(TorchFunctionMode):
    """Records operations on the followed tensors; raises on unsupported ones (the
    dispatch is :class:`CaptureMode`'s)."""

    def __init__(self, tracks: Sequence[Track], aliases: Mapping[int, Track]) -> None:
        super().__init__()
        self.by_storage: dict[int, Track] = dict(aliases)
        for track in tracks:
            self.follow(track)
        self.handled: set[FrameType] = set()
        self.error: UnsupportedInitOpError | None = None

    # ----------------------------------------------------------------- lookups

    def follow(self, track: Track) -> Track:
        self.by_storage[id(track.storage)] = track
        return track

    def lookup(self, value: Any) -> Track | None:
        if not isinstance(value, torch.Tensor):
            return None
        sid = storage_id(value)
        return None if sid is None else self.by_storage.get(sid)

    def params_in(self, tree: Any) -> list[Track]:
        found: list[Track] = []
        for leaf in tree_flatten(tree)[0]:
            track = self.lookup(leaf)
            if track is not None and track.kind == "param" and track not in found:
                found.append(track)
        return found

    def fail(self, track: Track, op: str, why: str) -> UnsupportedInitOpError:
        error = UnsupportedInitOpError(
            f"capture_init: {track.label}: {op} at {user_frame()}: {why}. {_HELP}"
        )
        if self.error is None:
            self.error = error
        return error

    # ----------------------------------------------------------------- recording

    def region(self, track: Track, view: torch.Tensor, op: str) -> Any:
        try:
            return view_region(view, track.base)
        except ValueError as why:
            if track.kind != "param":
                return (tuple((0, size) for size in track.shape), None)
            raise self.fail(track, op, f"the region written is not a box ({why})") from None

    def record(self, track: Track, view: torch.Tensor, action: Action, op: str) -> None:
        """Appends ``action`` on the box ``view`` covers (for a temporary whose region is
        no box, the whole temporary becomes opaque)."""
        region = self.region(track, view, op)
        if region is None:
            return
        box, axes = region
        if axes is None:
            action = Opaque(f"{op} wrote a region that is not a box")
        if track.kind == "param" and isinstance(action, Fill):
            try:
                ParamSpec(track.name, track.shape, track.base.dtype, action.init, seed=0)
            except ShardInitError as why:
                raise self.fail(track, op, str(why)) from None
        track.ops.append(CapturedOp(box, action, op, user_frame()))

    def write(
        self, track: Track, view: torch.Tensor, entry: Translation, values: list[Any], op: str
    ) -> None:
        """Records one translated write (``entry`` with argument ``values``)."""
        if track.kind == "buffer":
            self.record(track, view, Fill(_BUFFER_WRITE), op)
            return
        try:
            if entry.kind in ("eye", "dirac"):
                action = self.aligned(track, view, op, entry.kind, values)
            else:
                action = build(entry.kind, values, op.split("(")[0].split(".")[-1], view)
            if entry.kind == "orthogonal":
                _check_whole(track, view)
        except ShardInitError as why:
            if track.kind == "param":
                raise self.fail(track, op, str(why)) from None
            action = Opaque(f"{op}: {why}")
        self.record(track, view, action, op)

    def aligned(
        self, track: Track, view: torch.Tensor, op: str, kind: str, values: list[Any]
    ) -> Action:
        if kind == "eye" and view.dim() != 2:
            raise ValueError("Only tensors with 2 dimensions are supported")
        groups = int(values[0]) if kind == "dirac" else 1
        if kind == "dirac" and (view.dim() not in (3, 4, 5) or view.size(0) % groups):
            raise ValueError("dirac_ needs a 3-5-D tensor whose dim 0 divides into groups")
        region = self.region(track, view, op)
        if region is None:
            return Fill(_ZERO)
        box, axes = region
        if axes is None or any(s > 1 and a is None for s, a in zip(view.shape, axes, strict=True)):
            raise ShardInitError(f"{kind}_ on a view that merges dims")
        origin = tuple(start for start, _ in box)
        if kind == "eye":
            return Eye(axes, origin)
        return Dirac(axes, origin, tuple(view.shape), groups)

    # ----------------------------------------------------------------- copies

    def translate(
        self, source: Track, src: torch.Tensor, target: Track, dst: torch.Tensor, op: str
    ) -> None:
        """``dst`` (of ``target``) takes the values of ``src`` (of ``source``): each
        element the initializer of the element it comes from.

        Raises:
            UnsupportedInitOpError: the source is not a temporary, has elements never
                written or not described by fills, or a view's order is not row-major.
        """
        if source.kind != "temp":
            raise self.fail(target, op, f"it copies the values of {source.label}")
        if tuple(src.shape) != tuple(dst.shape):
            raise self.fail(target, op, f"shapes {tuple(src.shape)} and {tuple(dst.shape)} "
                            "differ (broadcasting copies are not replayable)")  # fmt: skip
        try:
            src_runs, dst_runs = view_runs(src, source.base), view_runs(dst, target.base)
        except ValueError as why:
            raise self.fail(
                target, op, f"the copied views are not boxes in order ({why})"
            ) from None
        for start, stop in src_runs:
            for _, box in flat_range_boxes(source.shape, start, stop):
                if not source.written(box):
                    raise self.fail(target, op, f"it copies elements of {source.label} "
                                    "that were never written")  # fmt: skip
        where = user_frame()
        for entry in source.ops:
            if isinstance(entry.action, (Eye, Dirac, Opaque)):
                reason = (
                    entry.action.why
                    if isinstance(entry.action, Opaque)
                    else f"{entry.op} is not translated into copies"
                )
                if any(
                    next(map_runs(src_runs, run, dst_runs), None) is not None
                    for run in box_runs(entry.region, source.shape)
                ):
                    raise self.fail(target, op, f"it copies values of {source.label}: {reason}")
                continue
            for run in box_runs(entry.region, source.shape):
                for mapped in map_runs(src_runs, run, dst_runs):
                    for _, box in flat_range_boxes(target.shape, *mapped):
                        copied = f"{entry.op} (copied by {op} at {where})"
                        target.ops.append(CapturedOp(box, entry.action, copied, entry.where))

    def copy_into(self, target: Track, dst: torch.Tensor, value: Any, op: str) -> None:
        source = self.lookup(value)
        if target.kind == "buffer":
            self.record(target, dst, Fill(_BUFFER_WRITE), op)
            return
        if source is None:
            if target.kind == "param":
                why = "the source is not a temporary filled by recorded fills"
                raise self.fail(target, op, why + " (computed values cannot be generated)")
            self.record(target, dst, Opaque(f"{op} of values shardinit did not record"), op)
            return
        if source is target and _same_view(dst, value):
            return
        try:
            self.translate(source, value, target, dst, op)
        except UnsupportedInitOpError as error:
            if target.kind == "param":
                raise
            if self.error is error:
                self.error = None
            self.record(target, dst, Opaque(str(error)), op)


class CaptureMode(_Recorder):
    """The dispatch: which route an operation takes (see the module docstring)."""

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        found = _init_frame()
        if found is not None:
            return self.inside_init(*found, func, args, kwargs)
        name = _func_name(func)
        if name in _METADATA or name.endswith(".__get__"):
            return func(*args, **kwargs)
        target = self.lookup(args[0]) if args else None
        if target is not None:
            handled, result = self.on_target(name, target, func, args, kwargs)
            if handled:
                return result
        if name in _VIEWS:
            return self.view(name, func, args, kwargs)
        if name in _FACTORIES or name in _CONCATS or (name in _COPIES and target is not None):
            return self.make_temporary(name, func, args, kwargs)
        params = self.params_in((args, kwargs))
        if params:
            if _is_inplace(name) and target is not None:
                why = "this in-place operation on the parameter's values is not replayable"
            else:
                why = "it reads the parameter's values (they do not exist on meta)"
            raise self.fail(params[0], name, why)
        if target is not None and _is_inplace(name):
            self.record(target, args[0], Opaque(f"{name} is not a recorded fill"), name)
        return func(*args, **kwargs)

    # ----------------------------------------------------------------- routes

    def inside_init(
        self, frame: FrameType, init_name: str, func: Any, args: Sequence[Any], kwargs: Any
    ) -> Any:
        """An operation inside ``torch.nn.init.<init_name>``: the call is recorded once, at
        its first operation; torch's own body then runs (a no-op on meta stand-ins)."""
        arguments = _frame_arguments(frame)
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
        return func(*args, **kwargs)

    def on_target(
        self, name: str, target: Track, func: Any, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> tuple[bool, Any]:
        """Writes into a followed tensor; ``(False, None)`` when ``name`` is none."""
        view = args[0]
        if name == "data.__set__":
            value = args[1]
            if not _same_view(view, value):
                self.copy_into(target, view, value, "param.data = tensor")
            return True, None
        entry = METHOD_TRANSLATIONS.get(name)
        if entry is not None:
            values = bind(
                args[1:], {k: v for k, v in kwargs.items() if k != "rounding_mode"}, entry
            )
            if kwargs.get("rounding_mode") is not None and target.kind == "param":
                raise self.fail(target, f"{name}(rounding_mode=...)", "rounding is not supported")
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
        else:
            return False, None
        return True, view if target.kind == "param" else func(*args, **kwargs)

    def setitem(self, target: Track, tensor: torch.Tensor, index: Any, value: Any) -> None:
        op = f"[{index!r}] = {value!r}"
        view = tensor[index]
        if _same_view(view, value):
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
        return result

    def make_temporary(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """A factory, ``cat``/``stack`` or ``clone``: the result is a new temporary."""
        if name in _CONCATS or name in _COPIES:
            params = self.params_in((args, kwargs))
            if params:
                raise self.fail(params[0], name, "it reads the parameter's values")
        result = func(*args, **kwargs)
        if not isinstance(result, torch.Tensor) or not result.is_contiguous():
            return result
        if name in _COPIES and storage_id(result) == storage_id(args[0]):
            return result  # contiguous() of a contiguous tensor: itself
        label = f"temporary {name}{tuple(result.shape)} at {user_frame()}"
        temp = self.follow(Track("temp", result, label))
        if name in _FACTORIES:
            self.fill_new(temp, name, args, kwargs)
        elif name in _COPIES:
            self.copy_into(temp, result, args[0], name)
        else:
            self.concatenate(temp, name, args, kwargs)
        return result

    def fill_new(
        self, temp: Track, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        value = _FACTORIES[name]
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
