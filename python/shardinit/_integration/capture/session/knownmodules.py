"""Constructors whose values are facts of torch, followed without their operations.

Every normalization layer of ``torch.nn`` (``BatchNorm``, ``InstanceNorm``,
``SyncBatchNorm``: :class:`torch.nn.modules.batchnorm._NormBase`) builds the same five
tensors the same way: ``weight`` of ones, ``bias``, ``running_mean`` and
``num_batches_tracked`` of zeros, ``running_var`` of ones (``torch.empty`` /
``zeros`` / ``ones`` / ``tensor(0)``, then ``reset_parameters``). Followed operation by
operation under :func:`.constructors.record_constructors`, those 13 torch calls and
grad switches cost about 1.2 ms per layer, 40% of an EfficientNet's or a RegNet's
recorded build. So for the span of a recording ``_NormBase.__init__`` holds an entry
that runs torch's constructor with no mode seeing its calls (its ``device`` argument
puts every tensor on meta, as the device mode would: that mode's Python call at each
of its calls costs as much again as the constructor's own) and then follows each tensor
it left as the capture would have at the end: a temporary of the same label, its last
write the constant torch wrote (its earlier writes are overwritten whole: the value is
the same).

Only where every fact holds, checked at each call: the recording thread, with the
capture's mode innermost; a class that keeps torch's ``reset_parameters``,
``reset_running_stats`` and registration methods; ``torch.nn.init.ones_`` /
``zeros_``, ``torch.empty`` / ``zeros`` / ``ones`` / ``tensor`` and ``Parameter`` as
torch defines them; no global registration hook but the recording's own and
shardinit's (a hook's operations would go unfollowed); the tensors on meta. Anything
else (a subclass's own reset, a lazy layer, a CPU device, another thread) runs the
constructor followed as any other code.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection
from typing import Any

import torch
from torch import nn
from torch.nn.modules import batchnorm

from ...._program.actions import constant_fill
from ...._torch_compat import (
    NORM_BASE,
    default_device_type,
    dispatch_mode_popped,
    innermost_dispatch_mode,
    innermost_function_mode,
    mode_popped,
    registration_hooks,
    torch_function_disabled,
    torchs_own_function,
)
from ....errors import InternalError
from ...parents import shardinits_hooks
from ..dispatch import CaptureMode
from ..ops import INIT_FUNCTIONS

__all__ = ["install_known_constructors"]

_NormBase = NORM_BASE
#: torch's own constructor and the methods it calls on the module (checked 2.15.0).
_TORCH_INIT: Callable[..., None] = _NormBase.__dict__["__init__"]
_TORCH_METHODS = {
    name: getattr(_NormBase, name)
    for name in (
        "reset_parameters", "reset_running_stats", "register_buffer",
        "register_parameter", "__setattr__", "__getattr__",
    )
}  # fmt: skip
#: torch's functions the constructor calls, as torch defines them.
_TORCH_FUNCTIONS = (
    *((torch, name, torchs_own_function(name)) for name in ("empty", "zeros", "ones", "tensor")),
    (torch.nn.init, "ones_", INIT_FUNCTIONS["ones_"]),
    (torch.nn.init, "zeros_", INIT_FUNCTIONS["zeros_"]),
    (batchnorm, "Parameter", nn.Parameter),
    (batchnorm, "init", torch.nn.init),
    (batchnorm, "torch", torch),
)
#: What the constructor leaves in each slot it fills: the table, the attribute, the
#: factory that made the tensor (its temporary's label), the value, and the last write.
_FACTS = (
    ("_parameters", "weight", "empty", 1.0, "torch.nn.init.ones_()"),
    ("_parameters", "bias", "empty", 0.0, "torch.nn.init.zeros_()"),
    ("_buffers", "running_mean", "zeros", 0.0, "zero_"),
    ("_buffers", "running_var", "ones", 1.0, "fill_"),
    ("_buffers", "num_batches_tracked", "tensor", 0.0, "zero_"),
)
#: ``device`` among ``_NormBase.__init__``'s positional arguments (after ``self``).
_DEVICE_AT = 5


def install_known_constructors(
    recorder: CaptureMode, own_hooks: Collection[object]
) -> Callable[[], None]:
    """Puts the entry in front of ``_NormBase.__init__`` for the span of a recording by
    ``recorder`` in this thread (``own_hooks``: the registration hooks that may run
    besides shardinit's); returns the undo. A constructor someone else replaced is left
    alone (its operations are followed)."""
    if _NormBase.__dict__.get("__init__") is not _TORCH_INIT:
        return lambda: None
    owner = threading.get_ident()

    @functools.wraps(_TORCH_INIT)
    def entry(module: nn.Module, *args: Any, **kwargs: Any) -> None:
        if (
            threading.get_ident() != owner
            or innermost_function_mode() is not recorder
            or innermost_dispatch_mode() is not recorder.backstop
            or not _facts_hold(type(module), own_hooks)
            or not _on_meta(args, kwargs)
        ):
            _TORCH_INIT(module, *args, **kwargs)
            return
        # No mode at all, its tensors made on meta by its own ``device`` argument (what
        # the device mode would give them, without its Python call at each of its 13
        # torch calls), and no backstop: the constructor reads and writes no tensor but
        # its own new ones. Then followed with the device mode alone, as before.
        args, kwargs = _on_meta_device(args, kwargs)
        with mode_popped(recorder), dispatch_mode_popped(recorder.backstop):
            with torch_function_disabled():
                _TORCH_INIT(module, *args, **kwargs)
            _follow(recorder, module)

    _NormBase.__init__ = entry

    def undo() -> None:
        if _NormBase.__dict__.get("__init__") is entry:
            _NormBase.__init__ = _TORCH_INIT

    return undo


def _facts_hold(cls: type[nn.Module], own_hooks: Collection[object]) -> bool:
    """Whether the constructor of ``cls`` computes the values of :data:`_FACTS` and
    nothing a hook would do: its methods, torch's functions and the hooks now."""
    # Loops, not generators: asked at every normalization layer a recording builds.
    for name, own in _TORCH_METHODS.items():
        if getattr(cls, name, None) is not own:
            return False  # (read at each call: a class's methods may be patched later)
    for owner, name, own in _TORCH_FUNCTIONS:
        if getattr(owner, name, None) is not own:
            return False
    allowed = {id(hook) for hook in (*own_hooks, *shardinits_hooks())}
    return all(id(hook) in allowed for hook in registration_hooks())


def _on_meta(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the constructor's tensors are made on meta: its ``device`` argument, or
    the default device (the ``torch.device`` mode under the capture's)."""
    device = kwargs.get("device", args[_DEVICE_AT] if len(args) > _DEVICE_AT else None)
    if device is None:
        return default_device_type() == "meta"
    try:
        return torch.device(device).type == "meta"
    except (RuntimeError, TypeError):
        return False  # torch raises its own error in the constructor, followed


def _on_meta_device(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The constructor's arguments with ``device`` the meta device where it is None
    (:func:`_on_meta` holds: the default device is meta), as the ``torch.device`` mode
    would give it to each of its factories."""
    if len(args) > _DEVICE_AT:
        if args[_DEVICE_AT] is None:
            args = (*args[:_DEVICE_AT], _META, *args[_DEVICE_AT + 1 :])
    elif kwargs.get("device") is None:
        kwargs = {**kwargs, "device": _META}
    return args, kwargs


_META = torch.device("meta")


def _follow(recorder: CaptureMode, module: nn.Module) -> None:
    """Follows each tensor the constructor left in ``module`` as the capture would
    have: a temporary (labelled by the factory that made it) whose last write set all
    of it to the constructor's constant."""
    store = recorder.store
    outer_site = store.call_site
    store.call_site = None  # one walk of the stack for the five labels (store.where)
    try:
        _follow_tensors(recorder, module)
    finally:
        store.call_site = outer_site


def _follow_tensors(recorder: CaptureMode, module: nn.Module) -> None:
    for table, attr, factory, value, op in _FACTS:
        tensor = getattr(module, table).get(attr)
        if tensor is None:
            continue
        with torch_function_disabled():
            meta = tensor.is_meta
            base = tensor.detach()  # the factory's tensor: a plain one, as followed
        if not meta:
            raise InternalError(
                f"record_constructors: {type(module).__name__}.{attr} was made on "
                f"{tensor.device}, not meta (a bug in shardinit: please report it)"
            )
        track = recorder.store.new_temp(factory, base)
        recorder.engine.record(track, base, _CONSTANT_FILLS[value], op)


#: The fills of :data:`_FACTS`' constants, built once (an action is immutable; one
#: object for each constant lets the constructor values of equal layers share a fold).
_CONSTANT_FILLS = {value: constant_fill(value) for _, _, _, value, _ in _FACTS}
