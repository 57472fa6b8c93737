"""Capture a model's own init code on the meta device.

:func:`capture_init` runs ``init_fn()`` once while every parameter is a plain meta tensor
of its GLOBAL shape (for FSDP2 / DTensor models, meta stand-ins are swapped in for the
duration and the original Parameters are put back after), and records, per parameter,
the ordered operations the code applies to it, each with the REGION of the parameter it
covers (a box of the global tensor). Nothing is allocated and no value is computed:
replaying the record shard-locally from stream v1 is :mod:`shardinit.replay`'s job.

Recorded:

* random fills: ``torch.nn.init`` functions (``uniform_``, ``normal_``,
  ``trunc_normal_``, ``kaiming_*_``, ``xavier_*_``; the bound or std is the one torch
  itself computes from the tensor it was given) and tensor methods (``normal_``,
  ``uniform_``), also through ``.data`` and views;
* deterministic fills: ``zero_``, ``fill_``, ``t[idx] = scalar``, ``zeros_``, ``ones_``,
  ``constant_``, ``eye_``, ``dirac_``;
* in-place scaling by a Python scalar: ``mul_``, ``div_`` (``*=``, ``/=``).

Anything else that writes or reads a parameter's values (``orthogonal_``, ``sparse_``,
``copy_``, arithmetic with tensors, ``.sum()``, ``.item()``, ...) raises
:class:`UnsupportedInitOpError` naming the parameter, the operation and the caller's
``file:line``, while ``init_fn`` runs: before anything is allocated.

Not thread-safe with other code using ``torch.nn.init`` in the same process during the
capture: the ``torch.nn.init`` functions are patched for its duration.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from .errors import ShardInitError
from .init import BaseInit, Constant, Normal, TruncNormal, Uniform
from .spec import SUPPORTED_DTYPES, ParamSpec

__all__ = [
    "Box",
    "CapturedInit",
    "CapturedOp",
    "Dirac",
    "Eye",
    "Fill",
    "ParamRecord",
    "Scale",
    "UnsupportedInitOpError",
    "capture_init",
]

#: A box of a parameter in GLOBAL coordinates: one half-open ``(start, stop)`` per dim.
Box = tuple[tuple[int, int], ...]

#: Path segments of wrappers, removed from canonical names (stream-format.md §5).
_WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})


class UnsupportedInitOpError(ShardInitError):
    """``init_fn`` did something to a parameter that cannot be replayed shard-locally
    (or wrote a region that is not a box). The message names the parameter, the
    operation and where it was called from."""


# --------------------------------------------------------------------------- records


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
class Eye:
    """``torch.nn.init.eye_`` on a 2-D view: 1 where the view's row equals its column.

    Attributes:
        axes: per view dim, the parameter dim it runs along (None: a size-1 view dim).
        origin: the view's first element, in global coordinates.
    """

    axes: tuple[int | None, ...]
    origin: tuple[int, ...]


@dataclass(frozen=True)
class Dirac:
    """``torch.nn.init.dirac_(view, groups)`` on a 3-5-D view (out, in, *kernel).

    Attributes:
        axes: per view dim, the parameter dim it runs along (None: a size-1 view dim).
        origin: the view's first element, in global coordinates.
        view_shape: the shape of the tensor ``dirac_`` was given.
        groups: torch's ``groups`` argument.
    """

    axes: tuple[int | None, ...]
    origin: tuple[int, ...]
    view_shape: tuple[int, ...]
    groups: int


Action = Fill | Scale | Eye | Dirac


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
        name: canonical name (stream-format.md §5).
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
            [op.region for op in self.ops if not isinstance(op.action, Scale)], self.shape
        )


@dataclass(frozen=True)
class CapturedInit:
    """The result of :func:`capture_init`.

    Attributes:
        params: per canonical parameter name, what ``init_fn`` did to it (parameters it
            never touched are absent).
        buffers: canonical names of buffers ``init_fn`` assigned or wrote in place
            (recomputed for real by :func:`shardinit.replay.recompute_buffers`).
        init_fn: the captured callable.
        module_ref: a weak reference to the module captured on (see
            :meth:`captured_on`).
    """

    params: Mapping[str, ParamRecord]
    buffers: tuple[str, ...]
    init_fn: Callable[[], object] = field(repr=False)
    # The module captured on (weakly): ``init_fn`` computes buffers of that object only.
    module_ref: Callable[[], nn.Module | None] = field(
        default=lambda: None, repr=False, compare=False
    )

    def captured_on(self, module: nn.Module) -> bool:
        """Whether this was captured on ``module`` itself (so running ``init_fn``
        computes ``module``'s buffers)."""
        return self.module_ref() is module

    def __contains__(self, name: object) -> bool:
        return name in self.params

    def __getitem__(self, name: str) -> ParamRecord:
        return self.params[name]


def box_union_covers(boxes: Sequence[Box], shape: Sequence[int], max_cells: int = 1 << 16) -> bool:
    """Whether the union of ``boxes`` covers every element of ``shape`` (exactly, by
    coordinate compression; False, conservatively, past ``max_cells`` cells)."""
    full = tuple((0, size) for size in shape)
    if math.prod(shape) == 0 or any(box == full for box in boxes):
        return True
    cuts = []
    for dim, size in enumerate(shape):
        points = sorted({0, size, *(b[dim][0] for b in boxes), *(b[dim][1] for b in boxes)})
        cuts.append([(lo, hi) for lo, hi in itertools.pairwise(points) if lo < hi])
    if math.prod(len(c) for c in cuts) > max_cells:
        return False

    for cell in itertools.product(*cuts):
        if not any(
            all(b[d][0] <= lo and hi <= b[d][1] for d, (lo, hi) in enumerate(cell)) for b in boxes
        ):
            return False
    return True


# --------------------------------------------------------------------------- regions


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for dim in range(len(shape) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * max(shape[dim + 1], 1)
    return strides


def view_region(
    view: torch.Tensor, param: torch.Tensor
) -> tuple[Box, tuple[int | None, ...]] | None:
    """The box of ``param`` (contiguous, same storage) that ``view`` covers.

    Returns:
        ``(box, axes)``: ``axes[k]`` is the parameter dim view dim ``k`` runs along, or
        None (size 1, or it runs across several dims as in ``view(-1)``); None when the
        view has no elements.

    Raises:
        ValueError: the view's elements are not a box of the parameter (a strided slice,
            an expanded view, overlapping dims).
    """
    if view.numel() == 0:
        return None
    shape = tuple(param.shape)
    cstride = _contiguous_strides(shape)
    rel = view.storage_offset() - param.storage_offset()
    if not 0 <= rel < max(param.numel(), 1):
        raise ValueError("the view starts outside the parameter")
    start = []
    for dim in range(len(shape)):
        start.append(rel // cstride[dim] % max(shape[dim], 1) if shape[dim] else 0)
    count = [1] * len(shape)
    used = [False] * len(shape)
    axes: list[int | None] = []
    for size, stride in zip(view.shape, view.stride(), strict=True):
        if size == 1:
            axes.append(None)
            continue
        inner = [d for d in range(len(shape)) if cstride[d] == stride and shape[d] > 1]
        if not inner:
            raise ValueError(f"a view dim of stride {stride} runs along no dim of the parameter")
        dim = inner[-1]
        if not used[dim] and start[dim] + size <= shape[dim]:
            used[dim] = True
            count[dim] = size
            axes.append(dim)
            continue
        # The view dim runs across dims dim, dim-1, ...: each inner one must be whole.
        remaining = size
        while True:
            if dim < 0 or used[dim]:
                raise ValueError("a view dim runs across dims that are not whole")
            used[dim] = True
            if start[dim] + remaining <= shape[dim]:
                count[dim] = remaining
                break
            if start[dim] != 0 or remaining % shape[dim]:
                raise ValueError("a view dim runs across dims that are not whole")
            count[dim] = shape[dim]
            remaining //= shape[dim]
            dim -= 1
        axes.append(None)
    box = tuple((int(s), int(s + c)) for s, c in zip(start, count, strict=True))
    if math.prod(count) != view.numel():
        raise ValueError("the view's elements are not a box of the parameter")
    return box, tuple(axes)


# --------------------------------------------------------------------------- capture


@dataclass
class _Slot:
    name: str
    standin: nn.Parameter
    original: torch.Tensor
    owners: list[tuple[nn.Module, str]]
    ops: list[CapturedOp] = field(default_factory=list)


_LOCK = threading.Lock()
_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
# torch files whose frames are plumbing between the user's call and the op.
_TORCH_PLUMBING = tuple(
    os.path.join(_TORCH_DIR, *parts)
    for parts in (
        ("nn", "init.py"),
        ("overrides.py",),
        ("_tensor.py",),
        ("utils", "_device.py"),
        ("_compile.py",),
    )
)


def _user_frame() -> str:
    """``file:line in function`` of the innermost frame outside shardinit's and torch's
    plumbing (torch's own ``reset_parameters`` frames are kept: that is the caller)."""
    for frame in reversed(traceback.extract_stack()):
        filename = os.path.abspath(frame.filename)
        if filename.startswith(_OWN_DIR) or filename in _TORCH_PLUMBING:
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"


def _func_name(func: Any) -> str:
    name = getattr(func, "__name__", repr(func))
    if name in ("__get__", "__set__"):
        owner = getattr(func, "__self__", None)
        return f"{getattr(owner, '__name__', '?')}.{name}"
    return str(name)


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
        "swapdims", "contiguous", "__iter__", "unfold", "alias", "hsplit", "vsplit",
    }
)  # fmt: skip
_RANDOM_METHODS = frozenset({"normal_", "uniform_"})
_FILL_METHODS = frozenset({"zero_", "fill_", "__setitem__"})
_SCALE_METHODS = frozenset({"mul_", "div_", "__imul__", "__itruediv__"})

# torch.nn.init functions handled (patched for the capture's duration); the rest of the
# *_ functions raise.
_INIT_FUNCTIONS = (
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
    "orthogonal_", "sparse_",
)  # fmt: skip
_ORIGINAL_INIT: dict[str, Callable[..., Any]] = {
    name: getattr(torch.nn.init, name) for name in _INIT_FUNCTIONS
}
_INIT_BY_FUNC: dict[Any, str] = {func: name for name, func in _ORIGINAL_INIT.items()}


def _bind(
    args: Sequence[Any], kwargs: Mapping[str, Any], names: Sequence[str], defaults: Sequence[Any]
) -> list[Any]:
    """Positional + keyword arguments to values in ``names`` order (after ``self``)."""
    values = list(defaults)
    for index, value in enumerate(args):
        values[index] = value
    for key, value in kwargs.items():
        if key == "generator":
            continue  # shardinit's stream replaces torch's generator
        if key not in names:
            raise TypeError(f"unexpected keyword argument {key!r}")
        values[names.index(key)] = value
    return values


def _scalar(value: Any) -> float | None:
    """A Python real number (or a 0-d CPU tensor that is not a parameter), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 0
        and value.device.type == "cpu"
        and not value.is_complex()
    ):
        return float(value.item())
    return None


class _Recorder(TorchFunctionMode):
    """Records operations on the stand-ins; raises on unsupported ones."""

    def __init__(self, slots: list[_Slot], buffers: Mapping[int, str]) -> None:
        super().__init__()
        self.slots = slots
        self.by_storage: dict[int, tuple[_Slot, torch.Tensor]] = {}
        for slot in slots:
            self.by_storage[id(slot.standin.untyped_storage())] = (slot, slot.standin)
            original = slot.original
            if original.is_meta and type(original) in (torch.Tensor, nn.Parameter):
                # Code that kept a reference to the original meta Parameter.
                self.by_storage[id(original.untyped_storage())] = (slot, original)
        self.buffer_storages = dict(buffers)
        self.written_buffers: set[str] = set()
        self.error: UnsupportedInitOpError | None = None

    # ----------------------------------------------------------------- lookups

    def lookup(self, value: Any) -> tuple[_Slot, torch.Tensor] | None:
        if not isinstance(value, torch.Tensor) or not value.is_meta:
            return None
        try:
            storage = value.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        return self.by_storage.get(id(storage))

    def params_in(self, tree: Any) -> list[_Slot]:
        leaves, _ = tree_flatten(tree)
        found = []
        for leaf in leaves:
            hit = self.lookup(leaf)
            if hit is not None and hit[0] not in found:
                found.append(hit[0])
        return found

    def fail(self, slot: _Slot, op: str, why: str) -> UnsupportedInitOpError:
        error = UnsupportedInitOpError(
            f"capture_init: parameter {slot.name!r}: {op} at {_user_frame()}: {why}. "
            "shardinit can replay random fills (torch.nn.init uniform_/normal_/"
            "trunc_normal_/kaiming_*/xavier_*, tensor normal_/uniform_), constant fills "
            "(zero_, fill_, zeros_, ones_, constant_, eye_, dirac_) and mul_/div_ by a "
            "Python scalar on box regions; see docs/capturing-init.md"
        )
        if self.error is None:
            self.error = error
        return error

    def region(
        self, slot: _Slot, base: torch.Tensor, view: torch.Tensor, op: str
    ) -> tuple[Box, tuple[int | None, ...]] | None:
        try:
            return view_region(view, base)
        except ValueError as why:
            raise self.fail(slot, op, f"the region written is not a box ({why})") from None

    def record(
        self, slot: _Slot, base: torch.Tensor, view: torch.Tensor, action: Action, op: str
    ) -> None:
        region = self.region(slot, base, view, op)
        if region is None:
            return
        if isinstance(action, Fill):
            try:
                ParamSpec(slot.name, tuple(slot.standin.shape), slot.standin.dtype, action.init,
                          seed=0)  # fmt: skip
            except ShardInitError as why:
                raise self.fail(slot, op, str(why)) from None
        slot.ops.append(CapturedOp(region[0], action, op, _user_frame()))

    # ----------------------------------------------------------------- dispatch

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        # torch.nn.init's functions dispatch to the name in their module's globals:
        # the original, or (during the capture) the patched one.
        init_name = _INIT_BY_FUNC.get(func) or getattr(func, "_shardinit_init", None)
        if init_name is not None:
            return self.nn_init(init_name, args, kwargs)
        name = _func_name(func)
        if name in _METADATA or name.endswith(".__get__"):
            return func(*args, **kwargs)
        target = self.lookup(args[0]) if args else None
        if name == "data.__set__" and target is not None:
            if len(args) > 1 and _same_view(args[0], args[1]):
                return None  # `p.data /= 4` stores p.data back into p.data
            raise self.fail(target[0], "param.data = tensor", "it replaces the values")
        if target is not None and (
            name in _RANDOM_METHODS or name in _FILL_METHODS or name in _SCALE_METHODS
        ):
            return self.method(name, target[0], target[1], args, kwargs)
        slots = self.params_in((args, kwargs))
        if name in _VIEWS:
            result = func(*args, **kwargs)
            if slots:
                for leaf in tree_flatten(result)[0]:
                    if isinstance(leaf, torch.Tensor) and self.lookup(leaf) is None:
                        raise self.fail(slots[0], name, "it copies the values (a read)")
            return result
        if slots:
            if name == "copy_" and target is not None:
                why = "copying values from another tensor is not replayable shard-locally"
            elif name.endswith("_") or name.startswith("__i") or name == "__setitem__":
                why = "this in-place operation on the parameter's values is not replayable"
            else:
                why = "it reads the parameter's values (they do not exist on meta)"
            raise self.fail(slots[0], name, why)
        if name.endswith("_") and args and isinstance(args[0], torch.Tensor):
            buffer = self.buffer_storages.get(_storage_id(args[0]) or -1)
            if buffer is not None:
                self.written_buffers.add(buffer)
        return func(*args, **kwargs)

    def method(
        self,
        name: str,
        slot: _Slot,
        base: torch.Tensor,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
    ) -> Any:
        tensor = args[0]
        rest = args[1:]
        action: Action
        if name == "normal_":
            mean, std = _bind(rest, kwargs, ("mean", "std"), (0.0, 1.0))
            op = f"normal_(mean={mean}, std={std})"
            action = self.base(slot, op, lambda: Normal(float(mean), float(std)))
        elif name == "uniform_":
            low, high = _bind(rest, kwargs, ("from", "to"), (0.0, 1.0))
            op = f"uniform_(from={low}, to={high})"
            action = self.base(slot, op, lambda: _uniform(float(low), float(high)))
        elif name == "zero_":
            op = "zero_()"
            action = Fill(Constant(0.0))
        elif name == "fill_":
            (value,) = _bind(rest, kwargs, ("value",), (None,))
            op = f"fill_({value!r})"
            action = Fill(Constant(self.scalar_arg(slot, op, value)))
        elif name == "__setitem__":
            index, value = rest
            op = f"[{index!r}] = {value!r}"
            view = tensor[index]
            if _same_view(view, value):
                # `w[idx] *= 2`: Python stores the scaled view back into itself.
                return None
            constant = self.scalar_arg(slot, op, value)
            if self.lookup(view) is None:
                raise self.fail(slot, op, "advanced indexing writes a region that is not a box")
            self.record(slot, base, view, Fill(Constant(constant)), op)
            return None
        else:
            divide = name in ("div_", "__itruediv__")
            if kwargs.get("rounding_mode") is not None:
                raise self.fail(slot, f"{name}(rounding_mode=...)", "rounding is not supported")
            plain = {k: v for k, v in kwargs.items() if k != "rounding_mode"}
            (other,) = _bind(rest, plain, ("other",), (None,))
            op = f"{'div_' if divide else 'mul_'}({other!r})"
            factor = self.scalar_arg(slot, op, other)
            action = Scale(factor, divide)
        self.record(slot, base, tensor, action, op)
        return tensor

    def scalar_arg(self, slot: _Slot, op: str, value: Any) -> float:
        if isinstance(value, torch.Tensor) and self.lookup(value) is not None:
            raise self.fail(slot, op, "it reads a parameter's values")
        scalar = _scalar(value)
        if scalar is None:
            raise self.fail(slot, op, "the operand is not a Python scalar (arithmetic with "
                            "or copying from tensors is not replayable)")  # fmt: skip
        return scalar

    def base(self, slot: _Slot, op: str, make: Callable[[], BaseInit]) -> Fill:
        try:
            return Fill(make())
        except ShardInitError as why:
            raise self.fail(slot, op, str(why)) from None

    # ----------------------------------------------------------------- nn.init

    def nn_init(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        tensor = args[0] if args else kwargs.get("tensor")
        hit = self.lookup(tensor)
        rest = list(args[1:])
        kw = {k: v for k, v in kwargs.items() if k != "tensor"}
        if hit is None:
            slots = self.params_in((args, kwargs))
            if slots:
                raise self.fail(slots[0], f"torch.nn.init.{name}", "it reads a parameter")
            if isinstance(tensor, torch.Tensor):
                buffer = self.buffer_storages.get(_storage_id(tensor) or -1)
                if buffer is not None:
                    self.written_buffers.add(buffer)
            with torch._C.DisableTorchFunction():
                return _ORIGINAL_INIT[name](*args, **kwargs)
        slot, base = hit
        assert isinstance(tensor, torch.Tensor)
        op = (
            f"torch.nn.init.{name}("
            + ", ".join([*(repr(a) for a in rest), *(f"{k}={v!r}" for k, v in kw.items())])
            + ")"
        )
        action: Action
        if name in ("orthogonal_", "sparse_"):
            raise self.fail(slot, op, "its values depend on the whole tensor (QR / random "
                            "positions) and cannot be generated shard-locally")  # fmt: skip
        if name == "uniform_":
            a, b = _bind(rest, kw, ("a", "b"), (0.0, 1.0))
            action = self.base(slot, op, lambda: _uniform(float(a), float(b)))
        elif name == "normal_":
            mean, std = _bind(rest, kw, ("mean", "std"), (0.0, 1.0))
            action = self.base(slot, op, lambda: Normal(float(mean), float(std)))
        elif name == "trunc_normal_":
            mean, std, a, b = _bind(rest, kw, ("mean", "std", "a", "b"), (0.0, 1.0, -2.0, 2.0))
            action = self.base(
                slot, op, lambda: TruncNormal(float(mean), float(std), float(a), float(b))
            )
        elif name in ("zeros_", "ones_"):
            action = Fill(Constant(0.0 if name == "zeros_" else 1.0))
        elif name == "constant_":
            (value,) = _bind(rest, kw, ("val",), (None,))
            action = Fill(Constant(self.scalar_arg(slot, op, value)))
        elif name == "eye_":
            if tensor.dim() != 2:
                raise ValueError("Only tensors with 2 dimensions are supported")
            action = self.aligned(slot, base, tensor, op, "eye_", None)
        elif name == "dirac_":
            (groups,) = _bind(rest, kw, ("groups",), (1,))
            if tensor.dim() not in (3, 4, 5):
                raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
            if tensor.size(0) % int(groups) != 0:
                raise ValueError("dim 0 must be divisible by groups")
            action = self.aligned(slot, base, tensor, op, "dirac_", int(groups))
        else:
            action = self.base(slot, op, lambda: _probe(name, tensor, rest, kw))
        self.record(slot, base, tensor, action, op)
        return tensor

    def aligned(
        self,
        slot: _Slot,
        base: torch.Tensor,
        tensor: torch.Tensor,
        op: str,
        kind: str,
        groups: int | None,
    ) -> Action:
        region = self.region(slot, base, tensor, op)
        if region is None:
            return Fill(Constant(0.0))
        box, axes = region
        for size, axis in zip(tensor.shape, axes, strict=True):
            if size > 1 and axis is None:
                raise self.fail(slot, op, f"{kind} on a view that merges dims")
        origin = tuple(start for start, _ in box)
        if groups is None:
            return Eye(axes, origin)
        return Dirac(axes, origin, tuple(tensor.shape), groups)


def _storage_id(tensor: torch.Tensor) -> int | None:
    try:
        return id(tensor.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


def _same_view(view: torch.Tensor, value: Any) -> bool:
    return bool(
        isinstance(value, torch.Tensor)
        and value.is_meta
        and _storage_id(value) == _storage_id(view)
        and value.storage_offset() == view.storage_offset()
        and value.shape == view.shape
        and value.stride() == view.stride()
    )


def _uniform(low: float, high: float) -> BaseInit:
    # torch's uniform_(a, a) fills a; shardinit's Uniform needs a < b.
    return Constant(low) if low == high else Uniform(low, high)


def _probe(
    name: str, tensor: torch.Tensor, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> BaseInit:
    """Runs torch's own ``torch.nn.init.<name>`` on a meta tensor of ``tensor``'s shape
    and catches the ``uniform_`` / ``normal_`` call it ends with: the bound / std is
    exactly torch's, computed from that shape."""
    probe = torch.empty(tuple(tensor.shape), dtype=tensor.dtype, device="meta")
    seen: list[BaseInit] = []

    def uniform_(a: float = 0.0, b: float = 1.0, **_: Any) -> torch.Tensor:
        seen.append(_uniform(float(a), float(b)))
        return probe

    def normal_(mean: float = 0.0, std: float = 1.0, **_: Any) -> torch.Tensor:
        seen.append(Normal(float(mean), float(std)))
        return probe

    # Instance attributes shadow the Tensor methods for torch's Python code.
    probe.uniform_ = uniform_  # type: ignore[method-assign,assignment]
    probe.normal_ = normal_  # type: ignore[method-assign]
    with torch._C.DisableTorchFunction():
        _ORIGINAL_INIT[name](probe, *args, **kwargs)
    if not seen:
        return Constant(0.0) if tensor.numel() == 0 else _no_sample(name)
    return seen[-1]


def _no_sample(name: str) -> BaseInit:
    raise ShardInitError(f"torch.nn.init.{name} sampled nothing on a meta tensor")


def _canonical(path: str) -> str:
    return ".".join(part for part in path.split(".") if part not in _WRAPPER_SEGMENTS)


def _make_slots(module: nn.Module) -> list[_Slot]:
    slots: dict[int, _Slot] = {}
    for path, owner in module.named_modules(remove_duplicate=False):
        for attr, param in owner._parameters.items():
            if param is None:
                continue
            if getattr(param, "_is_flat_param", False):
                raise ShardInitError(
                    "capture_init: FSDP1 flat parameters are not supported; capture the "
                    "model's init code before wrapping it in FullyShardedDataParallel"
                )
            slot = slots.get(id(param))
            if slot is None:
                name = _canonical(f"{path}.{attr}" if path else attr)
                if param.dtype not in SUPPORTED_DTYPES:
                    raise ShardInitError(f"capture_init: parameter {name} has dtype "
                                         f"{param.dtype}, not one of stream format v1")  # fmt: skip
                standin = nn.Parameter(
                    torch.empty(tuple(param.shape), dtype=param.dtype, device="meta"),
                    requires_grad=param.requires_grad,
                )
                slots[id(param)] = _Slot(name, standin, param, [(owner, attr)])
            elif (owner, attr) not in slot.owners:
                slot.owners.append((owner, attr))
    return list(slots.values())


@contextmanager
def swapped_parameters(module: nn.Module) -> Iterator[list[_Slot]]:
    """Puts plain global-shape meta stand-ins in place of every parameter of
    ``module`` (DTensor or not) and restores the originals on exit.

    Raises:
        ShardInitError: the code run inside replaced a parameter.
    """
    slots = _make_slots(module)
    for slot in slots:
        for owner, attr in slot.owners:
            owner._parameters[attr] = slot.standin
    replaced = []
    try:
        yield slots
    finally:
        for slot in slots:
            for owner, attr in slot.owners:
                if owner._parameters.get(attr) is not slot.standin:
                    replaced.append(slot.name)
                owner._parameters[attr] = slot.original  # type: ignore[assignment]
    if replaced:
        raise UnsupportedInitOpError(
            f"capture_init: init_fn replaced parameter(s) {sorted(set(replaced))} with new "
            "objects; initialize them in place (e.g. with torch.nn.init) instead"
        )


@contextmanager
def _patched_init(recorder: _Recorder) -> Iterator[None]:
    """``torch.nn.init.<name>`` -> the recorder (trunc_normal_ never reaches a
    TorchFunctionMode on meta tensors, so it must be caught by name)."""

    def make(name: str) -> Callable[..., Any]:
        def patched(*args: Any, **kwargs: Any) -> Any:
            return recorder.nn_init(name, args, kwargs)

        patched.__name__ = name
        patched._shardinit_init = name  # type: ignore[attr-defined]
        patched.__qualname__ = name
        return patched

    def no_grad_trunc_normal(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        # Reached by code holding the original trunc_normal_ (`from torch.nn.init import
        # trunc_normal_`), which looks this helper up in torch.nn.init at call time.
        return recorder.nn_init("trunc_normal_", (tensor, *args), kwargs)

    for name in _INIT_FUNCTIONS:
        setattr(torch.nn.init, name, make(name))
    helper = getattr(torch.nn.init, "_no_grad_trunc_normal_", None)
    if helper is not None:
        torch.nn.init._no_grad_trunc_normal_ = no_grad_trunc_normal
    try:
        yield
    finally:
        for name, func in _ORIGINAL_INIT.items():
            setattr(torch.nn.init, name, func)
        if helper is not None:
            torch.nn.init._no_grad_trunc_normal_ = helper


def _buffer_storages(module: nn.Module) -> dict[int, str]:
    found: dict[int, str] = {}
    for path, owner in module.named_modules():
        for attr, buffer in owner._buffers.items():
            if buffer is not None:
                sid = _storage_id(buffer)
                if sid is not None:
                    found.setdefault(sid, _canonical(f"{path}.{attr}" if path else attr))
    return found


def _buffer_objects(module: nn.Module) -> dict[str, Any]:
    return {
        _canonical(f"{path}.{attr}" if path else attr): buffer
        for path, owner in module.named_modules()
        for attr, buffer in owner._buffers.items()
    }


def capture_init(module: nn.Module, init_fn: Callable[[], object]) -> CapturedInit:
    """Runs ``init_fn()`` on meta stand-ins of ``module``'s parameters and records what it
    does to each one.

    The parameters are swapped for plain meta tensors of their GLOBAL shape (DTensors of
    FSDP2 / tensor parallelism included) for the duration and put back after, so the
    module is unchanged. Buffers ``init_fn`` assigns are restored too; their names are
    recorded so they can be recomputed for real (:func:`shardinit.replay.recompute_buffers`).

    Args:
        module: the model, on the meta device or sharded (any parameter values are
            ignored: only names, shapes and dtypes are read).
        init_fn: a callable that initializes ``module`` in place when run normally, e.g.
            ``model.init_weights`` or ``lambda: model.apply(model._init_weights)``.

    Returns:
        The :class:`CapturedInit`: per canonical parameter name, the ordered operations
        with the box of the parameter each one covers.

    Raises:
        UnsupportedInitOpError: ``init_fn`` applied an operation that cannot be replayed
            shard-locally (``orthogonal_``, ``sparse_``, ``copy_``, arithmetic with
            tensors, reading values, a non-box region, replacing a parameter).
        ShardInitError: FSDP1 flat parameters, or dtypes outside stream format v1.
        TypeError: ``module`` is not an ``nn.Module`` or ``init_fn`` is not callable.

    Example:
        >>> import torch, shardinit
        >>> from torch import nn
        >>> with torch.device("meta"):
        ...     model = nn.Linear(4, 3)
        >>> captured = shardinit.capture_init(model, lambda: nn.init.normal_(model.weight,
        ...                                                                   std=0.02))
        >>> captured["weight"].ops[0].action
        Fill(init=Normal(mean=0.0, std=0.02))
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not callable(init_fn):
        raise TypeError(f"init_fn must be callable, got {type(init_fn).__name__}")
    with _LOCK:
        buffers_before = _buffer_objects(module)
        owners_before = {
            (id(owner), attr): (owner, attr, buffer)
            for owner in module.modules()
            for attr, buffer in owner._buffers.items()
        }
        with swapped_parameters(module) as slots:
            recorder = _Recorder(slots, _buffer_storages(module))
            try:
                with _patched_init(recorder), recorder, torch.no_grad():
                    init_fn()
            finally:
                buffers_after = _buffer_objects(module)
                # Buffers assigned on meta by init_fn are put back: recompute_buffers
                # runs that code for real after allocation.
                for owner, attr, buffer in owners_before.values():
                    owner._buffers[attr] = buffer
            if recorder.error is not None:
                # init_fn swallowed the exception: the capture is still unusable.
                raise recorder.error
    changed = {
        name for name, buffer in buffers_after.items() if buffers_before.get(name) is not buffer
    }
    written = sorted(changed | recorder.written_buffers)
    params = {
        slot.name: ParamRecord(
            slot.name, tuple(slot.standin.shape), slot.standin.dtype, tuple(slot.ops)
        )
        for slot in slots
        if slot.ops
    }
    return CapturedInit(params, tuple(written), init_fn, weakref.ref(module))
