"""Module calls inside init code: ``model.to_empty(device=...)``, ``model.to(device)``,
``.cuda()`` / ``.cpu()``, ``.half()`` and ``model._apply(fn)`` while ``init_fn`` runs.

torch's ``Module._apply`` reads every parameter (``_has_compatible_shallow_copy_type``)
and replaces its storage, which a stand-in cannot allow. During a capture every module
of the model gets an instance attribute ``_apply`` (put back after) that does to each
stand-in what the call would do to the parameter being initialized, reading no value:

* a device move (``to(device)``, ``cuda``, ``cpu``, ...) is nothing: shardinit
  allocates each parameter on its target device later; a memory format
  (``to(memory_format=torch.channels_last)``) is kept on the track, and the capture
  gives it to the meta parameter or buffer, which ``materialize`` allocates so;
* ``to_empty`` is nothing for a parameter ``init_fn`` has not written yet (OLMo-core
  calls it first); one it wrote is refused (``to_empty`` would discard those values).
  A buffer's stand-in is emptied as eager torch empties the buffer: init code must
  compute it again, else the capture raises naming it;
* a dtype change (``half()``, ``to(torch.bfloat16)``) changes what the parameter is:
  refused, naming the parameter and the call's line;
* ``_apply(fn)`` with another ``fn`` is run on a one-element CPU tensor of each
  stand-in's dtype: what keeps its value is a move, a new tensor without it is
  ``to_empty``, a dtype change is refused as above, and so is anything else (``fn``
  failing, changing the value in place or the shape).
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import CodeType, FrameType
from typing import Any

import torch
from torch import nn

from ...._torch_compat import torch_function_disabled
from ..dispatch import CaptureMode
from ..ops import CAST_DTYPES
from ..trace import Track, give_memory_format
from .standins import DTensorStandIn

__all__ = ["constructor_moves", "install_module_calls"]

_DEVICE_MOVES = ("cuda", "cpu", "xpu", "ipu", "mtia", "to_empty")
#: The casts nn.Module has (``module.half()``): those of tensors it names.
_DTYPE_CASTS = {name: dtype for name, dtype in CAST_DTYPES.items() if hasattr(nn.Module, name)}
_KIND = {"param": "parameter", "buffer": "buffer", "temp": "temporary"}
#: The code of each nn.Module method that calls ``self._apply``, by name.
_CALLERS: dict[CodeType, str] = {
    getattr(nn.Module, name).__code__: name
    for name in (*_DEVICE_MOVES, *_DTYPE_CASTS, "to")
    if hasattr(nn.Module, name)
}


def install_module_calls(
    root: nn.Module, recorder: CaptureMode, modules: Iterable[nn.Module] | None = None
) -> Callable[[], None]:
    """Gives every module of ``root`` (``modules``: ``root.modules()``, where the caller
    has them) the capture's ``_apply``; returns the undo."""
    installed: list[tuple[nn.Module, Any]] = []
    for module in root.modules() if modules is None else modules:
        installed.append((module, module.__dict__.get("_apply")))
        module.__dict__["_apply"] = _bound_apply(module, recorder)

    def undo() -> None:
        for module, previous in installed:
            if previous is None:
                module.__dict__.pop("_apply", None)
            else:
                module.__dict__["_apply"] = previous

    return undo


def _bound_apply(module: nn.Module, recorder: CaptureMode) -> Callable[..., nn.Module]:
    def _apply(fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        call, dtype, memory_format = _calling_method(sys._getframe(1))
        if recurse:
            for child in module.children():
                child._apply(fn, recurse)  # type: ignore[no-untyped-call]
        for tensor in _own_tensors(module):
            track = recorder.store.lookup(tensor)
            if track is None or track.kind == "temp":
                continue  # a real tensor the model holds: not a value being initialized
            _apply_to(recorder, track, tensor, call, dtype, fn)
            if memory_format is not None and tensor.dim() in (4, 5):  # as Module.to
                _give_memory_format(recorder, track, memory_format)
        return module

    return _apply


@contextlib.contextmanager
def constructor_moves() -> Iterator[None]:
    """While modules are built inside ``record_constructors`` (in this thread), a device
    move (``to(device)``, ``cuda()``, ``cpu()``) leaves meta tensors on meta, where
    ``materialize`` allocates them on the target device later: peft's ``_replace_module``
    calls ``module.to(weight.device)``, which the stand-in answers with the run-time
    device, so torch's own move would copy out of meta. Everything else (dtype casts,
    ``to_empty``, any other ``fn``, other threads) is torch's own ``_apply``. A patch of
    the class, not of instances: ``copy.deepcopy`` of a module would copy an instance's
    bound ``_apply`` along, pointing at the original."""
    original: Callable[..., nn.Module] = nn.Module._apply
    owner = threading.get_ident()

    def _apply(
        self: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
    ) -> nn.Module:
        call, dtype, _ = _calling_method(sys._getframe(1))
        if (
            threading.get_ident() == owner
            and call in (*_DEVICE_MOVES, "to")
            and call != "to_empty"
            and dtype is None
        ):
            fn = functools.partial(_keep_meta, fn)
        return original(self, fn, recurse)

    nn.Module._apply = _apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module._apply = original  # type: ignore[method-assign]


def _keep_meta(fn: Callable[[torch.Tensor], torch.Tensor], tensor: torch.Tensor) -> torch.Tensor:
    with torch_function_disabled():  # the tensor's own device, not the stand-in's answer
        meta = tensor.is_meta
    return tensor if meta else fn(tensor)


def _own_tensors(module: nn.Module) -> Iterator[torch.Tensor]:
    for value in (*module._parameters.values(), *module._buffers.values()):
        if value is not None:
            yield value


def _calling_method(
    frame: FrameType | None,
) -> tuple[str, torch.dtype | None, torch.memory_format | None]:
    """The nn.Module method that called ``_apply`` (past the capture's own recursion),
    with the dtype it converts floating tensors to and the memory format ``to`` gives
    4-D and 5-D tensors; ``"_apply"`` for a direct call."""
    own = _bound_apply.__code__.co_consts
    while frame is not None and any(frame.f_code is code for code in own):
        frame = frame.f_back
    name = None if frame is None else _CALLERS.get(frame.f_code)
    if frame is None or name is None:
        return "_apply", None, None
    if name == "to":
        dtype = frame.f_locals.get("dtype")
        memory_format = frame.f_locals.get("convert_to_format")  # Module.to's local
        return (
            name,
            dtype if isinstance(dtype, torch.dtype) else None,
            memory_format if isinstance(memory_format, torch.memory_format) else None,
        )
    return name, _DTYPE_CASTS.get(name), None


def _give_memory_format(
    recorder: CaptureMode, track: Track, memory_format: torch.memory_format
) -> None:
    """Keeps the memory format ``to`` gives a parameter or buffer (the capture gives it
    to the meta tensor after: :func:`.standins.give_memory_formats`); refused for a
    DTensor (FSDP2 / TP), whose local shards are their own contiguous tensors."""
    if isinstance(track.base, DTensorStandIn):
        raise recorder.store.fail(
            track,
            f"to(memory_format={memory_format}) of its module",
            "a sharded (DTensor) parameter's local shards are contiguous tensors of "
            "their own (FSDP2 refuses non-contiguous parameters, and eager torch fails "
            "here too); keep the sharded model row-major",
        )
    give_memory_format(track, memory_format)


def _apply_to(
    recorder: CaptureMode,
    track: Track,
    tensor: torch.Tensor,
    call: str,
    dtype: torch.dtype | None,
    fn: Callable[[torch.Tensor], torch.Tensor],
) -> None:
    op = f"{call}() of its module"
    if call == "_apply":
        dtype, emptied = _probe(recorder, track, tensor, fn)
        call = "to_empty" if emptied else call
    if dtype is not None and tensor.is_floating_point() and dtype != tensor.dtype:
        raise recorder.store.fail(
            track,
            op,
            f"it converts {tensor.dtype} to {dtype}, a {_KIND[track.kind]} of another dtype "
            "than the model's (not the same values in another place); build the model "
            f"in {dtype} on meta instead",
        )
    if call != "to_empty":
        return  # a device move: shardinit allocates on the target device later
    if track.kind == "param" and track.ops:
        raise recorder.store.fail(
            track,
            op,
            f"it discards the values init_fn wrote before ({track.ops[0].op} at "
            f"{track.ops[0].where}); call to_empty before initializing",
        )
    if track.kind == "buffer":
        recorder.store.forget(track)  # eager torch leaves the buffer uninitialized
        track.emptied = True
        fill = math.nan if track.base.is_floating_point() else 0
        # The stand-in's own emptying: no write of init code (the backstop expects it).
        with torch_function_disabled(), recorder.backstop.expecting(track):
            track.base.fill_(fill)


_SENTINEL = 0.5


def _probe(
    recorder: CaptureMode, track: Track, tensor: torch.Tensor, fn: Callable[[Any], Any]
) -> tuple[torch.dtype, bool]:
    """What ``fn`` does to a one-element CPU tensor of ``tensor``'s dtype holding a
    sentinel (0.5; 5 or True for integers and bools):
    the dtype it gives, and whether it empties (a new tensor without the value).

    Raises:
        UnsupportedInitOpError: ``fn`` fails, changes the shape, or changes the value
            in place.
    """
    sentinel = _SENTINEL if tensor.is_floating_point() else 1 if tensor.dtype == torch.bool else 5
    probe = torch.full((1,) * tensor.dim(), sentinel, dtype=tensor.dtype)
    op = "_apply(fn) of its module"
    try:
        with torch_function_disabled():
            result = fn(probe)
            kept = isinstance(result, torch.Tensor) and bool(
                (result.detach().cpu().to(torch.float64) == float(sentinel)).all()
            )
    except Exception as why:  # any failure of user code is the reason
        raise recorder.store.fail(
            track, op, f"fn cannot be followed without values ({type(why).__name__}: {why})"
        ) from None
    if not isinstance(result, torch.Tensor) or tuple(result.shape) != tuple(probe.shape):
        raise recorder.store.fail(track, op, "fn returns no tensor of the shape it was given")
    in_place = result.untyped_storage().data_ptr() == probe.untyped_storage().data_ptr()
    if in_place and not kept:
        raise recorder.store.fail(track, op, "fn changes the tensor's values in place")
    return result.dtype, not kept
