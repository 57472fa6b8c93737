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

from ..._torch_compat import tree_flatten
from ...errors import ShardInitError
from ...init import Constant
from ...spec import ParamSpec
from .program import Const, Coord, Expr, combine
from .records import Action, CapturedOp, Computed, Fill, Opaque, UnsupportedInitOpError
from .regions import Box, view_region
from .tracks import Track, storage_id
from .translations import (
    INIT_CODES,
    Translation,
    build,
)

__all__ = ["Recorder", "same_view", "user_frame"]

# Frames that are never the user's line: everything inside the torch package (its
# modules, parametrizations, nn.init, overrides, ...), and these libraries' wrappers.
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_PLUMBING = (os.path.join("transformers", "initialization.py"),)  # guarded nn.init wrappers
# torch.nn modules' own init code is the library's init code that made the call (a
# default, or init code calling ``module.reset_parameters()``): those frames are kept.
_TORCH_MODULES_DIR = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
_TORCH_INIT_CODE = frozenset({"reset_parameters", "_reset_parameters"})
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Tensor methods/functions that only look at metadata: always allowed.
METADATA = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
        "is_contiguous", "element_size", "untyped_storage", "get_device", "is_floating_point",
        "is_complex", "is_signed", "__len__", "__repr__", "__format__", "__hash__",
        "requires_grad_", "requires_grad.__set__", "retain_grad", "register_hook",
        "data_ptr", "_is_view", "has_names", "is_shared", "is_pinned", "is_set_to", "type",
        "__reduce_ex__", "__dir__", "__setstate__",
    }
)  # fmt: skip
# Ops whose results alias their input (checked: a result must share the storage).
VIEWS = frozenset(
    {
        "__getitem__", "view", "view_as", "reshape", "reshape_as", "narrow", "select", "t",
        "transpose", "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "detach",
        "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "expand",
        "expand_as", "as_strided", "diagonal", "movedim", "moveaxis", "swapaxes",
        "swapdims", "__iter__", "unfold", "alias", "hsplit", "vsplit",
    }
)  # fmt: skip
# Factories of temporaries, with the constant they fill (None: empty; "arg": a value).
FACTORIES: Mapping[str, float | str | None] = {
    "empty": None, "new_empty": None, "empty_like": None,
    "zeros": 0.0, "new_zeros": 0.0, "zeros_like": 0.0,
    "ones": 1.0, "new_ones": 1.0, "ones_like": 1.0,
    "full": "arg", "new_full": "arg", "full_like": "arg",
}  # fmt: skip
CONCATS = frozenset({"cat", "concat", "concatenate", "stack"})
COPIES = frozenset({"clone", "contiguous"})
_HELP = (
    "shardinit can replay random fills (torch.nn.init uniform_/normal_/trunc_normal_/"
    "kaiming_*/xavier_*, tensor normal_/uniform_), constant fills (zero_, fill_, zeros_, "
    "ones_, constant_, eye_, dirac_), mul_/div_ by a Python scalar on box regions, "
    "elementwise init programs (arange/linspace/eye/tensor/rand/randn sources, "
    "arithmetic, exp/log/sin/..., clamp, where, casts, in place too) and copies of "
    "temporaries computed that way; see docs/capturing-init.md"
)


_ZERO = Constant(0.0)
# A write into a buffer's real stand-in: only its region matters (the values are real).
_BUFFER_WRITE = _ZERO


def user_frame() -> str:
    """``file:line in function`` of the innermost frame of the user's (or a library's)
    code: see :func:`_is_users`."""
    for frame in reversed(traceback.extract_stack()):
        if _is_users(os.path.abspath(frame.filename), frame.name):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"


def _is_users(filename: str, function: str) -> bool:
    """Whether a frame is user (or library) code: not shardinit's, not a wrapper of
    ``_PLUMBING``, and not inside torch unless it is a torch.nn module's init code."""
    if filename.startswith(_OWN_DIR) or filename.endswith(_PLUMBING):
        return False
    if filename.startswith(_TORCH_DIR):
        return filename.startswith(_TORCH_MODULES_DIR) and function in _TORCH_INIT_CODE
    return True


def func_name(func: Any) -> str:
    name = getattr(func, "__name__", repr(func))
    if name in ("__get__", "__set__"):
        owner = getattr(func, "__self__", None)
        return f"{getattr(owner, '__name__', '?')}.{name}"
    return str(name)


def init_frame() -> tuple[FrameType, str] | None:
    """The innermost frame running a ``torch.nn.init`` function's original code."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = INIT_CODES.get(frame.f_code)
        if name is not None:
            return frame, name
        frame = frame.f_back
    return None


def frame_arguments(frame: FrameType) -> dict[str, Any]:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    local = frame.f_locals
    return {name: local[name] for name in names if name in local}


def same_view(view: torch.Tensor, value: Any) -> bool:
    return bool(
        isinstance(value, torch.Tensor)
        and storage_id(value) == storage_id(view)
        and value.storage_offset() == view.storage_offset()
        and value.shape == view.shape
        and value.stride() == view.stride()
    )


def is_inplace(name: str) -> bool:
    return name.endswith("_") or name.startswith("__i") or name == "__setitem__"


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


def _structured(
    box: Box, axes: Sequence[int | None], view_shape: Sequence[int], groups: int
) -> Expr:
    """``eye_`` (``groups == 0``) or ``dirac_(view, groups)`` on the view of ``box`` whose
    dims run along ``axes`` (None: a size-1 view dim): a table of the element's global
    coordinates, 1.0 on the identity's (each group's) diagonal, else 0.0."""
    ranges = list(box)

    def op(name: str, a: Expr, b: Expr | float) -> Expr:
        return combine(name, a, Const(float(b)) if isinstance(b, (int, float)) else b, ranges)

    def rel(view_dim: int) -> Expr:  # the view's own coordinate
        axis = axes[view_dim]
        return Const(0.0) if axis is None else op("sub", Coord(axis), box[axis][0])

    if groups == 0:
        return op("eq", rel(0), rel(1))
    out_per_group = view_shape[0] // groups
    diagonal = op("mod", rel(0), out_per_group)
    mask = op("mul", op("lt", diagonal, min(out_per_group, view_shape[1])),
              op("eq", rel(1), diagonal))  # fmt: skip
    for view_dim in range(2, len(view_shape)):
        mask = op("mul", mask, op("eq", rel(view_dim), view_shape[view_dim] // 2))
    return mask


class Recorder(TorchFunctionMode):
    """Records operations on the followed tensors; raises on unsupported ones."""

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
        return Computed(_structured(box, axes, tuple(view.shape), groups if kind == "dirac" else 0))
