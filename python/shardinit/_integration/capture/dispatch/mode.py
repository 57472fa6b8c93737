"""The dispatch of a capture: a ``TorchFunctionMode`` that sends each torch call on the
followed tensors down one route (:func:`.tables.route_of`), over a record store
(:mod:`.store`) and an expression engine (:mod:`.engine`), with a ``TorchDispatchMode``
below it (:mod:`.backstop`) that refuses every write to a parameter it did not route.

The routes:

* inside a ``torch.nn.init`` function (recognised by its code on the call stack, so
  wrappers, aliases and patched module attributes all count): recorded once, at the
  first tensor operation it makes; its own body is its business;
* a write into a followed tensor: a translated fill (``normal_``, ``fill_``, ``mul_``
  by a number, ...), ``copy_``, ``__setitem__``, ``.data =``, an in-place elementwise
  step, a ``out=`` of any function (the result is computed as a temporary, then copied);
* writes at positions computed from coordinates (``triu_``, ``fill_diagonal_``,
  ``masked_fill_``, ``index_fill_``, ``w[[i, j]] = v``, constants on a diagonal view)
  and ``outer``: programs of coordinates (:mod:`.coordinates`);
* a temporary: factories, sources (``arange``, ``rand``, ...), ``cat``/``stack``,
  ``clone``, views, elementwise steps, casts;
* questions a parameter's stand-in answers as the parameter will at run time
  (``is_meta``, ``device``), and flags it takes (``requires_grad_``);
* anything else: refused where it reads or writes a parameter's values (naming the
  parameter, the operation and the caller's ``file:line``); on meta temporaries of
  known values, run on the CPU as eager torch would, its results tables
  (:mod:`.concrete`); opaque on other temporaries.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, get_args

import torch
from torch.overrides import TorchFunctionMode

from ...._program.actions import Opaque
from ...._program.cannot import Cannot
from ...._torch_compat import (
    tree_leaves,
    GRAD_SWITCH,
    aten_packet,
    enter_dispatch_mode,
    exit_dispatch_mode,
    handed_to_mode,
)
from ....errors import ShardInitError, UnsupportedInitOpError
from ..ops.composites import (
    MOVES,
    dropout_drops,
    foreach_parts,
    python_numbers,
    resizes_to_itself,
    same_device,
    split_device,
)
from ..ops.pointwise import no_formula
from ..ops.tables import CONCATS, COPIES, FACTORIES, Route, is_inplace, route_of
from ..ops.translations import INIT_FUNCTIONS, INIT_TRANSLATIONS
from ..trace.concrete import Concrete, Evaluated
from ..trace.coordinates import Coordinates
from ..trace.copies import Copies
from ..trace.engine import Engine, read_reason
from ..trace.frames import frame_arguments, func_name, init_frame, user_frame
from ..trace.steps import Steps
from ..trace.store import RecordStore
from ..trace.tracks import Track, run_op, storage_id
from .backstop import WriteBackstop
from .writes import Writes, quietly, tensors_in

__all__ = ["CaptureMode"]

_CPU = torch.device("cpu")
# torch.no_grad()'s switch (GRAD_SWITCH), which torch.nn.init functions run around their
# writes: it writes no tensor and draws no random number, so inside them it runs as it is.


class CaptureMode(TorchFunctionMode):
    """The dispatch (module docstring).

    Args:
        tracks: the followed tensors to start with (parameter stand-ins, buffers).
        aliases: more storages that stand for a track (a model's own meta tensors).
        devices: per parameter track (by ``id``), the device its parameter will be on
            at run time, which its stand-in reports (default: the CPU).
    """

    def __init__(
        self,
        tracks: Sequence[Track],
        aliases: Mapping[int, Track],
        devices: Mapping[int, torch.device] | None = None,
    ) -> None:
        super().__init__()
        self.store = RecordStore(tracks, aliases)
        self.engine = Engine(self.store)
        self.backstop = WriteBackstop(self.store, self.engine)
        self.coordinates = Coordinates(self.store, self.engine)
        self.concrete = Concrete(self.store, self.engine)
        self.steps = Steps(self.store, self.engine)
        self.copies = Copies(self.store, self.engine)
        parts = (self.steps, self.copies, self.coordinates, self.concrete)
        self.writes = Writes(self.store, self.engine, parts, self.backstop)
        self.devices = dict(devices or {})
        self.handled: set[FrameType] = set()
        self.outer: FrameType | None = None  # the frame that entered the mode

    @property
    def error(self) -> UnsupportedInitOpError | None:
        return self.store.error

    def __enter__(self) -> CaptureMode:
        self.outer = sys._getframe(1)
        enter_dispatch_mode(self.backstop)
        try:
            super().__enter__()  # type: ignore[no-untyped-call]
        except BaseException:
            exit_dispatch_mode(self.backstop, None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)  # type: ignore[no-untyped-call]
        finally:
            exit_dispatch_mode(self.backstop, *exc)
            # The frames reach the capture's own frame, which holds this mode: a cycle
            # that would keep every record alive until the garbage collector ran.
            self.handled.clear()
            self.outer = None

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = dict(kwargs or {})
        found = init_frame(self.outer)
        if found is not None:
            return self.inside_init(*found, func, args, kwargs)
        name = func_name(func)
        if name == "type" and (len(args) > 1 or "dtype" in kwargs):
            func, args, kwargs = _type_as_to(args, kwargs)  # a cast named by its class
            name = "to"
        route = route_of(name)
        if name in _VALUES_OUT:
            _refuse_unknown_out(self, name, args, kwargs)
        if route in _UNTOUCHED:
            return func(*args, **kwargs)
        args, kwargs = _with_python_numbers(name, route, args, kwargs)
        if kwargs.get("out") is not None and self.store.followed(kwargs["out"]):
            return self.into_out(name, route, func, types, args, kwargs)
        call = Call(name, route, self.store.lookup(args[0]) if args else None, func, args, kwargs)
        try:
            for handlers in (_ON_TARGET, _BY_ROUTE):
                handler = handlers.get(route)
                result = _NOT_MINE if handler is None else handler(self, call)
                if result is not _NOT_MINE:
                    return result
            return self.unrouted(call)
        except _TORCH_ERRORS as error:
            if isinstance(error, ShardInitError):  # a refusal, or an invalid argument
                raise
            raise self.torch_raised(call, error) from error

    def torch_raised(self, call: Call, error: BaseException) -> BaseException:
        """What a torch error raised while routing ``call`` becomes: on followed tensors
        (meta stand-ins, temporaries the capture runs on meta), shardinit's refusal
        naming the tensor, the op and the line, with torch's message (eager torch, on
        real values, may not raise at all); else torch's error as it is."""
        followed = self.store.followed((call.args, call.kwargs))
        if not followed:
            return error
        text = str(error).strip().splitlines()
        what = f"{type(error).__name__}: {text[0][:300] if text else ''}"
        return self.store.fail(
            followed[0], call.name,
            f"{what} was raised on the capture's stand-ins (meta tensors whose values "
            "the capture follows), where eager torch on real values may not; shardinit "
            "does not replay this operation on these tensors",
        )  # fmt: skip

    def unrouted(self, call: Call) -> Any:
        """An operation no route takes: refused where it reads a parameter's values, else
        run as :meth:`unfollowed` runs it."""
        name, target, args, kwargs = call.name, call.target, call.args, call.kwargs
        params = self.store.params_in((args, kwargs))
        if params:
            if no_formula(name):
                why = "it is an elementwise operation shardinit has no exact formula for"
            elif is_inplace(name) and (target is not None or self.store.params_in(args[:1])):
                why = "this in-place operation on the parameter's values is not replayable"
            else:
                why = "it reads the parameter's values (they do not exist on meta)"
            raise self.store.fail(params[0], name, why)
        reads = self.engine.read_in((args, kwargs), name)
        if reads:  # values computed from a parameter's, beyond elementwise steps
            raise self.store.fail(reads[0][0], name, read_reason(reads[0]))
        return self.unfollowed(name, target, call.func, args, kwargs)

    def unfollowed(
        self, name: str, target: Track | None, func: Any, args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> Any:  # fmt: skip
        """An operation no route follows, reading no parameter's values: run on the CPU
        where its meta operands' values are known (:mod:`.concrete`), its results
        tables; else run as it is, its results opaque (:meth:`.steps.Steps.taint`)."""
        why: str | None = None
        try:
            evaluated = self.concrete.evaluate(name, func, args, kwargs)
        except Cannot as cannot:  # its values are not known: opaque
            evaluated, why = None, cannot.reason
        if target is not None and is_inplace(name):
            return self.other_inplace(name, target, func, args, kwargs, (evaluated, why))
        if evaluated is not None:
            return self.concrete.results(name, func, args, kwargs, evaluated)
        result = run_op(func, args, kwargs)
        self.steps.taint(name, args, kwargs, result, why)
        return result

    def other_inplace(
        self, name: str, target: Track, func: Any, args: Sequence[Any], kwargs: dict[str, Any],
        evaluated: tuple[Evaluated | None, str | None],
    ) -> Any:  # fmt: skip
        """An in-place operation no route follows on a followed tensor: on a known meta
        temporary, the table of its values run on the CPU (:mod:`.concrete`; meta holds
        no values, so nothing runs there); else the tensor's values become opaque (with
        why the CPU run could not be had, if it was tried)."""
        values, why = evaluated
        if values is not None and target.kind == "temp" and target.base.is_meta:
            self.concrete.write_inplace(name, target, args[0], values)
            return args[0]
        self.engine.record(target, args[0], Opaque(why or f"{name} is not a recorded fill"), name)
        with self.backstop.expecting(target):
            result = run_op(func, args, kwargs)
        self.steps.taint(name, args, kwargs, result)
        return result

    # ----------------------------------------------------------------- routes

    def inside_init(
        self, frame: FrameType, init_name: str, func: Any, args: Sequence[Any], kwargs: Any
    ) -> Any:
        """An operation inside ``torch.nn.init.<init_name>``: the call is recorded once, at
        its first operation; torch's own body then runs on temporaries (on a parameter's
        stand-in its writes are the recorded call's, and are skipped)."""
        switch = func is GRAD_SWITCH and frame in self.handled
        if switch and not handed_to_mode(sys._getframe(2), frame):
            return func(*args, **kwargs)  # as below, without reading the frame again
        arguments = frame_arguments(frame)
        tensor = arguments.get("tensor")
        track = self.store.lookup(tensor)
        if frame not in self.handled:
            self.handled.add(frame)
            if track is not None and isinstance(tensor, torch.Tensor):
                self.init_call(init_name, track, tensor, arguments)
        if handed_to_mode(sys._getframe(2), frame):
            # The function handed itself to the mode before running: run its body now.
            if track is not None and track.kind == "param":
                return tensor
            with self.backstop.expecting(track):
                return INIT_FUNCTIONS[init_name](**arguments)
        if func is GRAD_SWITCH:
            return func(*args, **kwargs)
        operand = self.store.lookup(args[0]) if args else None
        if operand is None and track is None:
            return func(*args, **kwargs)
        if operand is not None and operand.kind == "param" and is_inplace(func_name(func)):
            return args[0]
        with self.backstop.expecting(track, operand):  # the recorded call's own writes
            return quietly(func, args, kwargs)

    def init_call(
        self, init_name: str, track: Track, tensor: torch.Tensor, arguments: Mapping[str, Any]
    ) -> None:
        """Records the call ``torch.nn.init.<init_name>`` with ``arguments`` (by name) on
        ``tensor``, a view of ``track``: however it was entered (:meth:`inside_init`,
        :mod:`.initcalls`)."""
        entry = INIT_TRANSLATIONS[init_name]
        values = [arguments.get(n, d) for n, d in zip(entry.names, entry.defaults, strict=True)]
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(entry.names, values, strict=True))
        self.coordinates.write(track, tensor, entry, values, f"torch.nn.init.{init_name}({shown})")

    def answer(self, name: str, target: Track) -> Any:
        """What the parameter of the stand-in ``target`` answers at run time."""
        device = self.devices.get(id(target), _CPU)
        if name == "device.__get__":
            return device
        if name == "get_device":
            if device.type == "cpu":
                return -1
            return device.index if device.index is not None else torch.cuda.current_device()
        kind = name.removeprefix("is_").removesuffix(".__get__")
        return device.type == kind

    def into_out(
        self,
        name: str,
        route: str,
        func: Any,
        types: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """``func(..., out=tensor)`` with ``tensor`` followed: the result computed out of
        place (a temporary, on the out tensor's device and in its dtype for factories),
        then copied into it, as torch writes it."""
        out = kwargs.pop("out")
        func = aten_packet(func)  # ``aten.add.out`` without out is ``aten.add``'s to resolve
        target = self.store.lookup(out) if isinstance(out, torch.Tensor) else None
        if target is None:  # several outs (``torch.max(..., out=(a, b))``), some followed
            track = self.store.followed(out)[0]
            if track.kind == "param":
                raise self.store.fail(track, f"{name}(out=...)", "an out= of several tensors")
            kwargs["out"] = out
            return func(*args, **kwargs)  # the backstop makes the followed outs opaque
        if route in ("factory", "source"):
            kwargs.setdefault("device", out.device)
            kwargs.setdefault("dtype", out.dtype)
        result = self.__torch_function__(func, types, args, kwargs)
        op = f"{name}(out=...)"
        if not isinstance(result, torch.Tensor) or tuple(result.shape) != tuple(out.shape):
            shape = tuple(result.shape) if isinstance(result, torch.Tensor) else result
            why = f"it resizes the out tensor of shape {tuple(out.shape)} to {shape}"
            if target.kind != "temp":
                raise self.store.fail(target, op, why)
            self.engine.record(target, out, Opaque(why), op)
            return result
        self.copies.copy_into(target, out, result, op)
        self.writes.run_on(target, torch.Tensor.copy_, (out, result), {})
        if route in ("factory", "source"):  # torch's factories give out= their flag too
            out.requires_grad_(bool(kwargs.get("requires_grad", False)))
        return out

    def view(self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        _refuse_dtype_view(self.store, name, args, kwargs)
        params = self.store.params_in((args, kwargs))
        why: str | None = None
        if not params and tensors_in((args[1:], kwargs)):  # indexing by tensors: a copy
            try:
                evaluated = self.concrete.evaluate(name, func, args, kwargs)
            except Cannot as cannot:  # its values are not known: the result is opaque
                evaluated, why = None, cannot.reason
            if evaluated is not None:
                return self.concrete.results(name, func, args, kwargs, evaluated)
        result = func(*args, **kwargs)
        if params:
            for leaf in tensors_in(result):
                if self.store.lookup(leaf) is None:
                    raise self.store.fail(params[0], name, "it copies the values (a read)")
        self.steps.taint(name, args, kwargs, result, why)  # advanced indexing copies
        return result

    def make_temporary(
        self, name: str, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any:
        """A factory, ``cat``/``stack`` or ``clone`` (of a parameter: carries the read)."""
        if name in CONCATS:
            params = self.store.params_in((args, kwargs))
            if params:
                raise self.store.fail(params[0], name, "it reads the parameter's values")
        result = run_op(func, args, kwargs)
        if not isinstance(result, torch.Tensor) or not result.is_contiguous():
            return result
        if name in COPIES and storage_id(result) == storage_id(args[0]):
            return result  # contiguous() of a contiguous tensor: itself
        temp = self.store.new_temp(name, result)
        if name in FACTORIES:
            self.fill_new(temp, name, args, kwargs)
        elif name in COPIES:
            self.copies.copy_into(temp, result, args[0], name)
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
        self.engine.record(temp, temp.base, self.writes.constant(temp, value, name), name)

    def concatenate(
        self, temp: Track, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        tensors = list(kwargs.get("tensors", args[0] if args else ()))
        dim = int(kwargs.get("dim", args[1] if len(args) > 1 else 0)) % temp.base.dim()
        parts = [
            (self.engine.operand(part, tuple(part.shape), name), tuple(part.shape))
            for part in tensors
            if self.store.lookup(part) is not None
        ]
        if len(parts) > 1 and self.engine.places.overlap(parts):
            why = (
                f"{name} at {user_frame()} puts the same random values in two places, which "
                "torch repeats and shardinit would draw anew at each (it draws a random "
                "value at its destination element's own index): compute it once and "
                "copy it"
            )
            self.engine.record(temp, temp.base, Opaque(why), name)
            return
        offset = 0
        for index, part in enumerate(tensors):
            if name == "stack":
                dst = temp.base.select(dim, index)
            else:
                dst = temp.base.narrow(dim, offset, part.shape[dim] if part.dim() else 0)
                offset += dst.shape[dim]
            if dst.numel():
                self.copies.copy_into(temp, dst, part, name)


@dataclass(frozen=True)
class Call:
    """One torch call the mode routes: its name, route (:func:`.tables.route_of`), the
    followed tensor it is called on (its first argument; None when that is none), and
    the call itself."""

    name: str
    route: Route
    target: Track | None
    func: Any
    args: Sequence[Any]
    kwargs: dict[str, Any]


#: torch's errors that routing a call on followed tensors may raise where eager torch
#: would not (meta kernels, meta and CPU operands mixed, deep recursion): refused.
_TORCH_ERRORS = (RuntimeError, NotImplementedError, ValueError, IndexError, RecursionError)
#: What a handler returns when the call is not its to take (the next table is asked).
_NOT_MINE: Any = object()
#: Routes that run as they are: questions about a tensor's layout, and flags a tensor
#: takes without its values changing (``requires_grad_``).
_UNTOUCHED = frozenset({"metadata", "flag"})
Handler = Callable[[CaptureMode, Call], Any]
#: Routes whose calls take numbers as operands or fill values, where torch takes a numpy
#: scalar as the Python number it holds (:func:`.composites.python_numbers`); but the
#: data of ``torch.tensor`` keeps a numpy scalar's dtype (``tensor(np.float64(1))`` is
#: float64), and other calls run on the real arguments.
_NUMBER_OPERANDS = frozenset(
    {"translated", "inplace", "pointwise", "coordinate", "factory", "source", "foreach"}
)
_DATA = frozenset({"tensor", "new_tensor"})


def _type_as_to(
    args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """``t.type("torch.FloatTensor")`` (or a tensor class, or ``dtype=``) as the
    ``t.to(...)`` it is: the same dtype (and a ``torch.cuda`` class's device); an
    argument that names no tensor type is left to torch, which refuses it."""
    kind = args[1] if len(args) > 1 else kwargs.get("dtype")
    cls = kind
    if isinstance(kind, str):
        cls = torch.cuda if kind.startswith("torch.cuda.") else torch
        cls = getattr(cls, kind.rsplit(".", 1)[-1], None)
    dtype = getattr(cls, "dtype", None)
    if not isinstance(dtype, torch.dtype):
        return torch.Tensor.type, tuple(args), kwargs
    moved: tuple[Any, ...] = (args[0], dtype)
    if isinstance(kind, str) and kind.startswith("torch.cuda."):
        moved = (args[0], "cuda", dtype)
    rest = {k: v for k, v in kwargs.items() if k == "non_blocking"}
    return torch.Tensor.to, moved, rest


def _with_python_numbers(
    name: str, route: str, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Sequence[Any], dict[str, Any]]:
    if route in _NUMBER_OPERANDS and name not in _DATA:
        return python_numbers(args, kwargs)
    return args, kwargs


def _write(mode: CaptureMode, call: Call) -> Any:
    """A write into a followed tensor (:meth:`.writes.Writes.on_target`)."""
    if call.target is None:
        return _NOT_MINE
    handled, result = mode.writes.on_target(
        call.name, call.target, call.func, call.args, call.kwargs
    )
    return result if handled else _NOT_MINE


def _device(mode: CaptureMode, call: Call) -> Any:
    """A parameter's stand-in answers as the parameter will at run time."""
    if call.target is None or call.target.kind != "param":
        return _write(mode, call)
    return mode.answer(call.name, call.target)


def _coordinate(mode: CaptureMode, call: Call) -> Any:
    if call.target is None:
        return _NOT_MINE
    return mode.writes.coordinate_op(call.name, call.target, call.func, call.args, call.kwargs)


def _view(mode: CaptureMode, call: Call) -> Any:
    return mode.view(call.name, call.func, call.args, call.kwargs)


def _temporary(mode: CaptureMode, call: Call) -> Any:
    return mode.make_temporary(call.name, call.func, call.args, call.kwargs)


def _copy(mode: CaptureMode, call: Call) -> Any:
    return _NOT_MINE if call.target is None else _temporary(mode, call)


def _source(mode: CaptureMode, call: Call) -> Any:
    return mode.steps.source(call.name, call.func, call.args, call.kwargs)


def _refuse_dtype_view(
    store: RecordStore, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> None:
    """A view of a parameter or temporary as another dtype (``w.view(torch.int32)``)
    reinterprets its bits: programs hold values, not bits, so writes or reads through
    it are refused, naming the parameter, the operation and the line."""
    base = args[0] if args and isinstance(args[0], torch.Tensor) else None
    dtypes = [v for v in [*args[1:], *kwargs.values()] if isinstance(v, torch.dtype)]
    if base is None or not dtypes or dtypes[0] == base.dtype:
        return
    tracks = [t for t in store.followed((base,)) if t.kind in ("param", "temp")]
    if tracks:
        raise store.fail(
            tracks[0], name,
            f"a view of its {base.dtype} values as {dtypes[0]} reinterprets their bits, "
            "which shardinit does not replay (write the values in its own dtype)",
        )  # fmt: skip


#: The operations that hand init code a tensor's values as Python values or bytes (not
#: its shape, dtype or device): ``item()``, ``tolist()``, a comparison's ``bool``, numpy,
#: and every path by bytes (its storage, pickle and ``torch.save`` read it, a deep
#: copy): refused on values the capture does not know (:func:`_refuse_unknown_out`).
_VALUES_OUT = frozenset(
    {
        "item", "tolist", "numpy", "__float__", "__int__", "__index__", "__bool__",
        "__complex__", "__array__", "__dlpack__", "untyped_storage", "storage",
        "_typed_storage", "__deepcopy__", "__reduce_ex__", "__getstate__",
    }
)  # fmt: skip


def _refuse_unknown_out(mode: CaptureMode, name: str, args: Sequence[Any], kwargs: Any) -> None:
    """Refuses a Python value or the bytes of a tensor whose values the capture does not
    know: a temporary of random values (torch's draw, no function of ``seed`` and
    another on every rank; the stream draws those at each destination's own index) or a
    tensor computed from unknown values (:meth:`.store.RecordStore.mark_unknown`).
    Init code could put them in a weight or buffer by a path no op shows, or branch on
    them (each rank then records other operations).

    Raises:
        UnsupportedInitOpError: such a read.
    """
    why = (
        "it hands init code a Python value (or the bytes) of random values from torch's "
        "global generator, no function of seed and different on each rank (a buffer "
        "filled with it, or a branch on it, would differ per rank); compute such values "
        "deterministically, or write the random values into a tensor directly"
    )
    for track in mode.store.followed((args, kwargs)):
        if track.kind == "temp" and track.reads:  # a parameter's values: named as such
            raise mode.store.fail(track.reads[0][0], name, read_reason(track.reads[0]))
        if track.kind == "temp" and mode.engine.random(track):
            raise mode.store.fail(track, name, why)
    for leaf in tree_leaves((args, kwargs)):
        unknown = mode.store.unknown_why(leaf)
        if unknown is not None:
            raise mode.store.fail(
                f"a tensor of shape {tuple(leaf.shape)}", name,
                f"it hands init code values shardinit does not know ({unknown})",
            )  # fmt: skip


#: Steps whose value jumps where an operand moves by one ulp (``%`` and ``//`` jump by a
#: whole divisor or unit): on values known at capture, run by torch itself on the CPU
#: (:mod:`.concrete`), so they are eager's bit for bit, not binary64's.
_TORCH_STEPS = frozenset(
    {"remainder", "__mod__", "__rmod__", "floor_divide", "__floordiv__", "__rfloordiv__"}
)


def _pointwise(mode: CaptureMode, call: Call) -> Any:
    if all(track.kind == "buffer" for track in mode.store.followed((call.args, call.kwargs))):
        return _NOT_MINE  # on buffers' real values (or none followed): run as it is
    if call.name in _TORCH_STEPS:
        known = mode.steps.known_on_cpu(call.args, call.kwargs)
        if known:  # followed CPU temporaries of known values: torch's own result, a table
            return run_op(call.func, call.args, call.kwargs)
        try:
            evaluated = mode.concrete.evaluate(call.name, call.func, call.args, call.kwargs)
        except Cannot:
            evaluated = None  # values not known at capture (random): a program's step
        if isinstance(evaluated, Evaluated):
            return mode.concrete.results(call.name, call.func, call.args, call.kwargs, evaluated)
    return mode.steps.pointwise(call.name, call.func, call.args, call.kwargs)


def _foreach(mode: CaptureMode, call: Call) -> Any:
    """``torch._foreach_<op>(tensors, ...)``: ``<op>`` on each tensor, each routed as its
    own call (:func:`.composites.foreach_parts`); in place, torch returns None."""
    parts = foreach_parts(call.name, call.args, call.kwargs)
    if parts is None:
        return _NOT_MINE
    results = [mode.__torch_function__(func, (), args, kwargs) for func, args, kwargs in parts]
    return None if is_inplace(call.name) else results


def _dropout(mode: CaptureMode, call: Call) -> Any:
    """Dropout of a followed tensor: the identity where it drops nothing (torch returns
    its input itself); where it drops, refused on a parameter (a mask drawn from
    torch's generator has no stream rule), else run as any call that draws."""
    followed = mode.store.followed((call.args, call.kwargs))
    if not followed or not call.args:
        return _NOT_MINE
    p = dropout_drops(call.name, call.args, call.kwargs)
    if p is None:
        return call.args[0]
    params = [track for track in followed if track.kind == "param"]
    if params:
        raise mode.store.fail(
            params[0], call.name,
            f"dropout with p={p} in training multiplies the values by a random mask drawn from "
            "torch's generator, which no stream rule describes (dropout with p=0 or "
            "training=False is the identity, and is replayed)",
        )  # fmt: skip
    return _NOT_MINE


def _resize(mode: CaptureMode, call: Call) -> Any:
    """``resize_`` of a followed tensor to its own shape changes nothing, as in eager;
    any other resize is :meth:`CaptureMode.unrouted` (refused on a parameter)."""
    if call.target is None or not resizes_to_itself(call.name, call.args, call.kwargs):
        return _NOT_MINE
    return call.args[0]


def _cast(mode: CaptureMode, call: Call) -> Any:
    if call.target is not None and call.target.kind == "param":
        return _param_cast(mode, call)
    if call.target is None or call.target.kind != "temp" or call.name in MOVES:
        return _NOT_MINE  # a temporary's move: run on its CPU values where known
    return mode.steps.cast_temp(call.name, call.func, call.args, call.kwargs)


def _param_cast(mode: CaptureMode, call: Call) -> Any:
    """A cast or device move of a parameter's stand-in, as eager torch does it on the
    parameter: the parameter itself where nothing changes (``p.cpu()`` of a CPU
    parameter, ``p.float()`` of a float32 one: writes to it are the parameter's); a cast
    to another dtype is a step of its values (a temporary carrying the read, refused
    only where its values reach a tensor, as ``p * 2``); a move to another device than
    the parameter's at run time is a copy of values that do not exist at capture."""
    target = call.target
    assert target is not None  # _cast's check
    device, args, kwargs = split_device(call.name, call.args, call.kwargs)
    runtime = mode.devices.get(id(target), _CPU)
    if device is not None and not same_device(device, runtime):
        raise mode.store.fail(
            target, call.name,
            f"it copies the parameter's values to {device} (the parameter will be on "
            f"{runtime}), and they do not exist at capture",
        )  # fmt: skip
    if call.name in MOVES:
        return call.args[0]
    return mode.steps.cast_temp(call.name, call.func, args, kwargs)


#: First, per route, what a call on a followed tensor does: a parameter's stand-in
#: answers, a write at coordinates, else a write into it when its name is one
#: (:meth:`.writes.Writes.on_target`).
_ON_TARGET: dict[str, Handler] = {
    **{route: _write for route in get_args(Route)},
    "device": _device,
    "coordinate": _coordinate,
}
#: Then, per route, an operation that writes no followed tensor (or one the table above
#: left); a route without a handler here, or whose handler leaves the call, is
#: :meth:`CaptureMode.unrouted`.
_BY_ROUTE: dict[str, Handler] = {
    "view": _view,
    "factory": _temporary,
    "concat": _temporary,
    "copy": _copy,
    "source": _source,
    "pointwise": _pointwise,
    "cast": _cast,
    "foreach": _foreach,
    "dropout": _dropout,
    "resize": _resize,
}
