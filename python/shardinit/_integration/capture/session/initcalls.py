"""``torch.nn.init`` functions entered directly during a capture.

Each public ``torch.nn.init`` function (``normal_``, ``zeros_``, ...) is recognised by
its code on the call stack at its first tensor operation (:meth:`.mode.CaptureMode.
inside_init`), however it was called. Reaching that first operation costs torch's own
dispatch to the mode, once or three times per call (``zeros_`` switches grad mode
around its write), several times what recording the call costs: a model of many small
parameters spent most of its capture there (issue 28). So for the span of a capture the
module attributes that still hold torch's own functions hold an entry of the capture's
(put back after): called on a parameter's stand-in, in the capturing thread, with the
capture's mode innermost, it records the call as the first operation would and returns
the tensor, as the recorded call's own body does there. Everything else (a temporary or
buffer, another thread, another mode above the capture's, arguments that do not bind,
a private helper, an alias bound at import) runs torch's function, the route above.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from ...._torch_compat import innermost_function_mode, mode_popped
from ..dispatch import CaptureMode
from ..ops import INIT_FUNCTIONS

__all__ = ["install_init_calls"]


def install_init_calls(recorder: CaptureMode) -> Callable[[], None]:
    """Puts the capture's entry in front of every public ``torch.nn.init`` function the
    module still holds (a library's wrapper there is left alone: it runs, and the
    function it calls is recognised as above); returns the undo."""
    owner = threading.get_ident()
    installed: list[tuple[str, Callable[..., Any], Callable[..., Any]]] = []
    for name, original in INIT_FUNCTIONS.items():
        if name.startswith("_") or getattr(torch.nn.init, name, None) is not original:
            continue
        entry = _entry(recorder, owner, name, original)
        setattr(torch.nn.init, name, entry)
        installed.append((name, original, entry))

    def undo() -> None:
        for name, original, entry in installed:
            if getattr(torch.nn.init, name, None) is entry:  # init code's own patch stands
                setattr(torch.nn.init, name, original)

    return undo


def _entry(
    recorder: CaptureMode, owner: int, name: str, original: Callable[..., Any]
) -> Callable[..., Any]:
    bind = _binder(original)

    @functools.wraps(original)
    def entry(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != owner or innermost_function_mode() is not recorder:
            return original(*args, **kwargs)
        with mode_popped(recorder):  # what the dispatch runs under, as torch calls it
            arguments = bind(args, kwargs)
            tensor = None if arguments is None else arguments.get("tensor")
            track = recorder.store.lookup(tensor)
            if arguments is not None and track is not None and track.kind == "param":
                assert isinstance(tensor, torch.Tensor)
                recorder.init_call(name, track, tensor, arguments)
                return tensor
        return original(*args, **kwargs)

    return entry


def _binder(
    func: Callable[..., Any],
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any] | None]:
    """The arguments of a call of ``func`` by name, defaults included, or None where
    they do not bind (then ``func`` itself raises torch's error)."""
    code = func.__code__
    positional = code.co_varnames[: code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    defaults = dict(zip(positional[len(positional) - len(func.__defaults__ or ()) :],
                        func.__defaults__ or (), strict=True))  # fmt: skip
    defaults.update(func.__kwdefaults__ or {})
    names = frozenset((*positional, *keyword_only))

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        if len(args) > len(positional):
            return None
        bound = dict(defaults)
        bound.update(zip(positional, args, strict=False))  # (defaults for the rest)
        for key, value in kwargs.items():
            if key not in names or key in positional[: len(args)]:
                return None
            bound[key] = value
        return bound if names <= bound.keys() else None

    return bind
