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

``Linear`` and every convolution (:class:`torch.nn.modules.conv._ConvNd`) make each
parameter with ``torch.empty`` and call ``reset_parameters`` last: their entry runs
torch's constructor the same way up to that call (each parameter followed as the
``torch.empty`` temporary it is), then ``reset_parameters``: torch's own recorded
without running it (:mod:`.knownresets`), a subclass's own followed as any code.

Only where every fact holds, checked at each call: the recording thread, with the
capture's mode innermost; a class that keeps torch's ``reset_parameters``,
``reset_running_stats`` and registration methods; ``torch.nn.init.ones_`` /
``zeros_``, ``torch.empty`` / ``zeros`` / ``ones`` / ``tensor`` and ``Parameter`` as
torch defines them; no global registration hook but the recording's own and
shardinit's (a hook's operations would go unfollowed); the tensors on meta. Anything
else (a normalization layer's own reset, a lazy layer, a CPU device, another thread)
runs the constructor followed as any other code.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Collection
from typing import Any, cast

import torch
from torch import nn
from torch.nn.modules import batchnorm, conv, linear
from torch.nn.modules.lazy import LazyModuleMixin

from ...._program.actions import constant_fill
from ...._torch_compat import (
    CONV_BASE,
    NORM_BASE,
    default_device_type,
    dispatch_mode_popped,
    innermost_dispatch_mode,
    innermost_function_mode,
    mode_popped,
    registration_hooks,
    source_as_checked,
    torch_function_disabled,
    torchs_own_function,
)
from ....errors import InternalError
from ...parents import shardinits_hooks
from ..dispatch import CaptureMode
from ..ops import INIT_FUNCTIONS
from .knownresets import record_torch_reset

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
#: torch's methods of its own that the constructor calls (their effect stated: _FACTS).
_TORCH_RESETS = (_TORCH_METHODS["reset_parameters"], _TORCH_METHODS["reset_running_stats"])
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
#: The constructors that make each parameter with ``torch.empty`` and call
#: ``reset_parameters`` last (checked 2.15.0), with ``device``'s position among their
#: positional arguments (after ``self``) and the torch module whose names they call.
_EMPTY_THEN_RESET = (
    (CONV_BASE, CONV_BASE.__dict__["__init__"], 11, conv),
    (nn.Linear, nn.Linear.__dict__["__init__"], 3, linear),
)
#: The methods of ``nn.Module`` those constructors call on the module.
_MODULE_METHODS = {
    name: getattr(nn.Module, name) for name in ("__setattr__", "__getattr__", "register_parameter")
}


def install_known_constructors(
    recorder: CaptureMode, own_hooks: Collection[object]
) -> Callable[[], None]:
    """Puts the entry in front of ``_NormBase.__init__`` for the span of a recording by
    ``recorder`` in this thread (``own_hooks``: the registration hooks that may run
    besides shardinit's); returns the undo. A constructor someone else replaced is left
    alone (its operations are followed)."""
    owner = threading.get_ident()

    def recording() -> bool:
        """Whether a constructor called now is the recording's to follow."""
        return (
            threading.get_ident() == owner
            and innermost_function_mode() is recorder
            and innermost_dispatch_mode() is recorder.backstop
            and _hooks_known(own_hooks)
        )

    undos = [_install_norm(recorder, recording)]
    for cls, torch_init, device_at, namespace in _EMPTY_THEN_RESET:
        undos.append(_install_reset(recorder, recording, cls, torch_init, device_at, namespace))

    def undo() -> None:
        for each in undos:
            each()

    return undo


def _install_norm(recorder: CaptureMode, recording: Callable[[], bool]) -> Callable[[], None]:
    """Puts the entry in front of ``_NormBase.__init__``; returns the undo."""
    if _NormBase.__dict__.get("__init__") is not _TORCH_INIT or not all(
        map(source_as_checked, (_TORCH_INIT, *_TORCH_RESETS))
    ):
        return lambda: None  # another's constructor, or torch's not as checked: followed

    @functools.wraps(_TORCH_INIT)
    def entry(module: nn.Module, *args: Any, **kwargs: Any) -> None:
        if (
            not recording()
            or not _facts_hold(type(module))
            or not _on_meta(args, kwargs, _DEVICE_AT)
        ):
            _TORCH_INIT(module, *args, **kwargs)
            return
        # No mode at all, its tensors made on meta by its own ``device`` argument (what
        # the device mode would give them, without its Python call at each of its 13
        # torch calls), and no backstop: the constructor reads and writes no tensor but
        # its own new ones. Then followed with the device mode alone, as before.
        args, kwargs = _on_meta_device(args, kwargs, _DEVICE_AT)
        with mode_popped(recorder), dispatch_mode_popped(recorder.backstop):
            with torch_function_disabled():
                _TORCH_INIT(module, *args, **kwargs)
            _follow(recorder, module, _follow_constants)

    _NormBase.__init__ = entry
    return _undo_of(_NormBase, entry, _TORCH_INIT)


def _install_reset(
    recorder: CaptureMode,
    recording: Callable[[], bool],
    cls: type[nn.Module],
    torch_init: Callable[..., None],
    device_at: int,
    namespace: object,
) -> Callable[[], None]:
    """Puts the entry in front of ``cls.__init__``, a constructor of
    :data:`_EMPTY_THEN_RESET`; returns the undo."""
    if cls.__dict__.get("__init__") is not torch_init or not (
        source_as_checked(torch_init) and source_as_checked(cls.__dict__["reset_parameters"])
    ):
        return lambda: None  # another's constructor, or torch's not as checked: followed

    @functools.wraps(torch_init)
    def entry(module: nn.Module, *args: Any, **kwargs: Any) -> None:
        if (
            not recording()
            or not _reset_facts_hold(type(module), namespace)
            or not _on_meta(args, kwargs, device_at)
            or "reset_parameters" in module.__dict__
        ):
            torch_init(module, *args, **kwargs)
            return
        args, kwargs = _on_meta_device(args, kwargs, device_at)
        # Its closing ``self.reset_parameters()`` finds this one first (an instance's
        # attribute before its class's method): called below, followed.
        module.__dict__["reset_parameters"] = _later
        try:
            with mode_popped(recorder), dispatch_mode_popped(recorder.backstop):
                with torch_function_disabled():
                    torch_init(module, *args, **kwargs)
                _follow(recorder, module, _follow_empties)
        finally:
            del module.__dict__["reset_parameters"]
        if not record_torch_reset(recorder, module, namespace):
            cast(Callable[[], None], module.reset_parameters)()  # followed as it runs

    cls.__init__ = entry  # type: ignore[method-assign,assignment]
    return _undo_of(cls, entry, torch_init)


def _later() -> None:
    """``reset_parameters`` while torch's constructor runs unfollowed: run after it."""


def _undo_of(
    cls: type[nn.Module], entry: Callable[..., None], torch_init: Callable[..., None]
) -> Callable[[], None]:
    def undo() -> None:
        if cls.__dict__.get("__init__") is entry:
            cls.__init__ = torch_init  # type: ignore[method-assign]

    return undo


def _hooks_known(own_hooks: Collection[object]) -> bool:
    """Whether every global registration hook is the recording's own or shardinit's (a
    hook's operations would go unfollowed)."""
    allowed = {id(hook) for hook in (*own_hooks, *shardinits_hooks())}
    return all(id(hook) in allowed for hook in registration_hooks())


def _facts_hold(cls: type[nn.Module]) -> bool:
    """Whether the constructor of ``cls`` computes the values of :data:`_FACTS`: its
    methods and torch's functions now."""
    # Loops, not generators: asked at every normalization layer a recording builds.
    for name, own in _TORCH_METHODS.items():
        if getattr(cls, name, None) is not own:
            return False  # (read at each call: a class's methods may be patched later)
    return all(getattr(owner, name, None) is own for owner, name, own in _TORCH_FUNCTIONS)


def _reset_facts_hold(cls: type[nn.Module], namespace: object) -> bool:
    """Whether the constructor of ``cls`` (one of :data:`_EMPTY_THEN_RESET`, whose
    functions are those of ``namespace``) makes its parameters with torch's own
    ``torch.empty`` and ``Parameter`` through ``nn.Module``'s registration, and is no
    lazy layer (whose parameters are made later)."""
    if issubclass(cls, LazyModuleMixin):
        return False
    for name, own in _MODULE_METHODS.items():
        if getattr(cls, name, None) is not own:
            return False
    return (
        getattr(namespace, "torch", None) is torch
        and getattr(namespace, "Parameter", None) is nn.Parameter
        and torch.empty is _TORCH_EMPTY
    )


_TORCH_EMPTY = torchs_own_function("empty")


def _on_meta(args: tuple[Any, ...], kwargs: dict[str, Any], device_at: int) -> bool:
    """Whether the constructor's tensors are made on meta: its ``device`` argument
    (``device_at`` among its positional ones), or the default device (the
    ``torch.device`` mode under the capture's)."""
    device = kwargs.get("device", args[device_at] if len(args) > device_at else None)
    if device is None:
        return default_device_type() == "meta"
    try:
        return torch.device(device).type == "meta"
    except (RuntimeError, TypeError):
        return False  # torch raises its own error in the constructor, followed


def _on_meta_device(
    args: tuple[Any, ...], kwargs: dict[str, Any], device_at: int
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The constructor's arguments with ``device`` the meta device where it is None
    (:func:`_on_meta` holds: the default device is meta), as the ``torch.device`` mode
    would give it to each of its factories."""
    if len(args) > device_at:
        if args[device_at] is None:
            args = (*args[:device_at], _META, *args[device_at + 1 :])
    elif kwargs.get("device") is None:
        kwargs = {**kwargs, "device": _META}
    return args, kwargs


_META = torch.device("meta")


def _follow(
    recorder: CaptureMode,
    module: nn.Module,
    follow: Callable[[CaptureMode, nn.Module], None],
) -> None:
    """``follow(recorder, module)`` with one walk of the stack for all of its labels
    (:meth:`..trace.RecordStore.where`: every tensor was made at the same call)."""
    store = recorder.store
    outer_site = store.call_site
    store.call_site = None
    try:
        follow(recorder, module)
    finally:
        store.call_site = outer_site


def _factorys_tensor(module: nn.Module, attr: str, tensor: torch.Tensor) -> torch.Tensor:
    """The plain tensor the factory made, which ``module.<attr>`` holds (the capture
    follows that one)."""
    with torch_function_disabled():
        meta = tensor.is_meta
        base = tensor.detach()
    if not meta:
        raise InternalError(
            f"record_constructors: {type(module).__name__}.{attr} was made on "
            f"{tensor.device}, not meta (a bug in shardinit: please report it)"
        )
    return base


def _follow_empties(recorder: CaptureMode, module: nn.Module) -> None:
    """Follows each parameter the constructor left in ``module`` as the ``torch.empty``
    temporary it is, in the order it made them."""
    for attr, param in module._parameters.items():
        if param is not None:
            recorder.store.new_temp("empty", _factorys_tensor(module, attr, param))


def _follow_constants(recorder: CaptureMode, module: nn.Module) -> None:
    """Follows each tensor the normalization layer's constructor left in ``module`` as
    the capture would have: a temporary (labelled by the factory that made it) whose
    last write set all of it to the constructor's constant."""
    for table, attr, factory, value, op in _FACTS:
        tensor = getattr(module, table).get(attr)
        if tensor is None:
            continue
        base = _factorys_tensor(module, attr, tensor)
        track = recorder.store.new_temp(factory, base)
        recorder.engine.record(track, base, _CONSTANT_FILLS[value], op)


#: The fills of :data:`_FACTS`' constants, built once (an action is immutable; one
#: object for each constant lets the constructor values of equal layers share a fold).
_CONSTANT_FILLS = {value: constant_fill(value) for _, _, _, value, _ in _FACTS}
