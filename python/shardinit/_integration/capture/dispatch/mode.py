"""The dispatch of a capture: a ``TorchFunctionMode`` that sends each torch call on the
followed tensors to the handlers of its op family (:mod:`.families`), over a record
store and an expression engine (:mod:`..trace`), with a ``TorchDispatchMode`` below it
(:mod:`.backstop`) that refuses every write to a parameter it did not route.

The routes:

* inside a ``torch.nn.init`` function (recognised by its code on the call stack, so
  wrappers, aliases and patched module attributes all count): recorded once, at the
  first tensor operation it makes; its own body is its business;
* a write into a followed tensor: a translated fill (``normal_``, ``fill_``, ``mul_``
  by a number, ...), ``copy_``, ``__setitem__``, ``.data =``, an in-place elementwise
  step, a ``out=`` of any function (the result is computed as a temporary, then copied);
* writes at positions computed from coordinates (``triu_``, ``fill_diagonal_``,
  ``masked_fill_``, ``index_fill_``, ``w[[i, j]] = v``, constants on a diagonal view)
  and ``outer``: programs of coordinates (:mod:`..trace.coordinates`);
* a temporary: factories, sources (``arange``, ``rand``, ...), ``cat``/``stack``,
  ``clone``, views, elementwise steps, casts;
* questions a parameter's stand-in answers as the parameter will at run time
  (``is_meta``, ``device``), and flags it takes (``requires_grad_``);
* anything else: refused where it reads or writes a parameter's values (naming the
  parameter, the operation and the caller's ``file:line``); on meta temporaries of
  known values, run on the CPU as eager torch would, its results tables
  (:mod:`..trace.concrete`); opaque on other temporaries.
"""

from __future__ import annotations

import dis
import os
import pathlib
import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ...._caches import cached
from ...._program.actions import Opaque
from ...._program.cannot import too_deep
from ...._torch_compat import (
    GRAD_SWITCH,
    enter_dispatch_mode,
    exit_dispatch_mode,
    handed_to_mode,
)
from ....errors import InternalError, ShardInitError, UnsupportedInitOpError
from ..ops import INIT_FUNCTIONS, INIT_TRANSLATIONS, is_inplace, python_numbers, shown_call
from ..trace import (
    Concrete,
    Coordinates,
    Copies,
    Engine,
    RecordStore,
    Steps,
    Track,
    frame_arguments,
    func_name,
    init_frame,
    user_frame,
)
from .backstop import WriteBackstop
from .calls import NOT_MINE, Call
from .families import Family, family_of
from .handlers import VALUES_OUT, into_out, refuse_unknown_out, type_as_to, unrouted
from .targets import META, META_AS_CPU
from .writes import Writes, quietly

__all__ = ["CaptureMode"]

# torch.no_grad()'s switch (GRAD_SWITCH), which torch.nn.init functions run around their
# writes: it writes no tensor and draws no random number, so inside them it runs as it is.
#: The data of ``torch.tensor`` keeps a numpy scalar's dtype (``tensor(np.float64(1))``
#: is float64): no Python numbers there (:attr:`.families.Family.numbers`).
_DATA = frozenset({"tensor", "new_tensor"})


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
        #: The frames of torch.nn.init calls recorded, with the arguments each was called with.
        self.handled: dict[FrameType, dict[str, Any]] = {}
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
        if self.store.in_signal is not None:
            self.store.refuse_in_signal(func_name(func), (args, kwargs))
        name, family, as_is = _routing(func)
        if as_is:  # before the stack walk: most calls of a model's build
            return func(*args, **kwargs)
        store = self.store
        outer_site, store.call_site = store.call_site, None  # walked once: store.where
        try:
            return self.route(func, name, family, types, args, kwargs)
        finally:
            store.call_site = outer_site

    def route(
        self, func: Any, name: str, family: Family, types: Any, args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> Any:  # fmt: skip
        """The call ``func`` (``name``, of ``family``) on followed tensors, routed (the
        module docstring): inside a ``torch.nn.init`` function, or by its family."""
        found = init_frame(self.outer)
        if found is not None:
            return self.inside_init(*found, func, args, kwargs)
        if name == "type" and (len(args) > 1 or "dtype" in kwargs):
            func, args, kwargs = type_as_to(args, kwargs)  # a cast named by its class
            name = "to"
            family = family_of(name)
        if name in VALUES_OUT:
            refuse_unknown_out(self, name, args, kwargs)
        if kwargs.get("device") is META_AS_CPU and family.route != "cast":
            kwargs["device"] = META  # a meta temporary's answer, handed back: beside it
        if family.as_is:
            return func(*args, **kwargs)
        if family.numbers and name not in _DATA:
            args, kwargs = python_numbers(args, kwargs)
        if kwargs.get("out") is not None and self.store.followed(kwargs["out"]):
            return into_out(self, Call(name, family.route, None, func, args, kwargs), types)
        target = self.store.lookup(args[0]) if args else None
        call = Call(name, family.route, target, func, args, kwargs)
        try:
            if target is not None and family.on_target is not None:
                result = family.on_target(self, call)
                if result is not NOT_MINE:
                    return result
            if family.handler is not None:
                result = family.handler(self, call)
                if result is not NOT_MINE:
                    return result
            return unrouted(self, call)
        except _TORCH_ERRORS as error:
            if isinstance(error, ShardInitError):  # a refusal, or an invalid argument
                raise
            if isinstance(error, RecursionError):
                raise self.too_deep(call, error) from error
            if shardinits_own(error):
                raise InternalError(
                    f"shardinit's capture failed on {call.name} at {user_frame()}: "
                    f"{type(error).__name__}: {error} (a bug in shardinit, not in torch or "
                    "the init code: please report it)"
                ) from error
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

    def too_deep(self, call: Call, error: RecursionError) -> BaseException:
        """A RecursionError while routing ``call``: the capture's own limit (the values'
        expression nests past Python's recursion limit), refused as such."""
        followed = self.store.followed((call.args, call.kwargs))
        return self.store.fail(followed[0] if followed else "a temporary", call.name, too_deep())

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
        arguments = self.handled.get(frame)
        first = arguments is None
        if arguments is None:  # the call's arguments, read once (f_locals copies them all)
            arguments = self.handled[frame] = frame_arguments(frame)
        tensor = arguments.get("tensor")
        track = self.store.lookup(tensor)
        if first and track is not None and isinstance(tensor, torch.Tensor):
            self.init_call(init_name, track, tensor, arguments)
        if handed_to_mode(sys._getframe(2), frame):
            # The function handed itself to the mode before running: run its body now,
            # unless its tensor holds no values to compute (a parameter's stand-in, a
            # temporary on meta whose call was recorded as a fill): then its writes are
            # the recorded call's.
            if track is not None and (track.kind == "param" or _valueless(track, tensor)):
                return tensor
            with self.backstop.expecting(track):
                return INIT_FUNCTIONS[init_name](**arguments)
        if func is GRAD_SWITCH:
            return func(*args, **kwargs)
        operand = self.store.lookup(args[0]) if args else None
        if operand is None and track is None:
            return func(*args, **kwargs)
        valueless = operand is not None and (
            operand.kind == "param" or (operand is track and _valueless(track, args[0]))
        )
        if valueless and is_inplace(_routing(func)[0]):
            return args[0]  # a write of the recorded call, on a tensor with no values
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
        op = shown_call(f"torch.nn.init.{init_name}", entry.names, values)
        self.engine.write(track, tensor, entry, values, op)


def _valueless(track: Track, tensor: Any) -> bool:
    """Whether ``tensor``, a view of ``track``, is a temporary on meta (no values) whose
    last recorded operation, the ``torch.nn.init`` call running, is a fill: its
    translation took the arguments. A call it refused is opaque there, and runs, so
    that torch raises where eager raises (``normal_(w, std=-1.0)``)."""
    return (
        track.kind == "temp"
        and isinstance(tensor, torch.Tensor)
        and tensor.is_meta
        and bool(track.ops)
        and not isinstance(track.ops[-1].action, Opaque)
    )


def _routing(func: Any) -> tuple[str, Family, bool]:
    """What the dispatch asks of ``func`` at every call, a fact of ``func`` alone,
    found once per function (:func:`_routing_of`); an unhashable callable (a user's
    object with ``__eq__`` and no ``__hash__``) is asked afresh."""
    try:
        return _routing_of(func)
    except TypeError:  # unhashable: lru_cache's key
        return _routing_of.__wrapped__(func)


@cached
def _routing_of(func: Any) -> tuple[str, Family, bool]:
    """``func``'s name in the dispatch tables (:func:`..trace.func_name`), its family,
    and whether it runs as it is wherever it is called, inside ``torch.nn.init``
    functions too: its family's (a question of layout, a flag, ``no_grad``'s switch),
    which writes no value and draws nothing. Inside an init function the call is then
    recorded at its first other operation, with the same arguments (no
    ``torch.nn.init`` function rebinds its own: ``tests/capture``). A cast named by
    its class (``type(torch.half)``) is no question, and a tensor's values or bytes
    going out (:data:`.handlers.VALUES_OUT`) are checked first: both routed."""
    name = func_name(func)
    family = family_of(name)
    return name, family, name != "type" and name not in VALUES_OUT and family.as_is


#: torch's errors that routing a call on followed tensors may raise where eager torch
#: would not (meta kernels, meta and CPU operands mixed): refused. The same types raised
#: by shardinit's own code are no torch error (:func:`shardinits_own`).
_TORCH_ERRORS = (RuntimeError, NotImplementedError, ValueError, IndexError, RecursionError)

#: shardinit's package folder, and its expression floor (which runs no init code's op).
_PACKAGE = str(pathlib.Path(__file__).resolve().parents[3])  # shardinit/
_FLOOR = os.path.join(_PACKAGE, "_program") + os.sep
#: Instructions by which a frame raises an exception itself (not a callee in C).
_RAISING = frozenset({"RAISE_VARARGS", "RERAISE"})


def shardinits_own(error: BaseException) -> bool:
    """Whether ``error`` came from shardinit's own code rather than from torch: raised
    where shardinit's expression floor (:mod:`shardinit._program`) runs (a builtin's
    error there, such as ``zip``'s, is shardinit's), or by a ``raise`` statement of
    shardinit's package. An error of torch's C++ kernels surfaces in the Python frame
    that called them, which may be shardinit's: that is a call, not a ``raise``."""
    innermost = error.__traceback__
    if innermost is None:
        return False
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
    code = innermost.tb_frame.f_code
    if not code.co_filename.startswith(_PACKAGE + os.sep):
        return False  # torch's own Python (meta kernels, references), or the init code's
    if code.co_filename.startswith(_FLOOR):
        return True
    instruction = next(
        (i for i in dis.get_instructions(code) if i.offset == innermost.tb_lasti), None
    )
    return instruction is not None and instruction.opname in _RAISING
