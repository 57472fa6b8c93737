"""Where a captured operation comes from: the user's ``file:line``, and the frames of
``torch.nn.init`` functions on the call stack."""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any

import torch

from .translations import INIT_CODES

__all__ = ["frame_arguments", "func_name", "init_frame", "user_frame"]

# Frames that are plumbing between the user's call and the op: shardinit's, every file
# of the torch package but its modules' own (a Linear's reset_parameters is the caller
# of its init) other than module.py (``apply``, ``to_empty``, ``__setattr__``: the
# caller is whoever called those), and libraries' wrappers of torch.nn.init.
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TORCH_MODULES = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
_TORCH_MODULE_BASE = os.path.join(_TORCH_MODULES, "module.py")
_WRAPPERS = (os.path.join("transformers", "initialization.py"),)  # guarded nn.init wrappers
# co_filename -> whether its frames are plumbing (decided once per file: a capture asks
# for the user's line at every recorded operation).
_IS_PLUMBING: dict[str, bool] = {}


def _plumbing(filename: str) -> bool:
    known = _IS_PLUMBING.get(filename)
    if known is None:
        path = os.path.abspath(filename)
        in_torch = path.startswith(_TORCH_DIR) and (
            not path.startswith(_TORCH_MODULES) or path == _TORCH_MODULE_BASE
        )
        known = path.startswith(_OWN_DIR) or in_torch or path.endswith(_WRAPPERS)
        _IS_PLUMBING[filename] = known
    return known


def user_frame() -> str:
    """``file:line in function`` of the innermost frame outside shardinit's and the
    libraries' plumbing."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if not _plumbing(code.co_filename):
            return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return "<unknown>"


def func_name(func: Any) -> str:
    """The name a torch function, method or property accessor is known by in the
    dispatch tables (``normal_``, ``data.__set__``, ``is_meta.__get__``)."""
    name = getattr(func, "__name__", repr(func))
    if name in ("__get__", "__set__"):
        owner = getattr(func, "__self__", None)
        return f"{getattr(owner, '__name__', '?')}.{name}"
    return str(name)


def init_frame() -> tuple[FrameType, str] | None:
    """The outermost frame running a ``torch.nn.init`` function's original code (a
    private helper a public function calls is part of that call)."""
    found: tuple[FrameType, str] | None = None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = INIT_CODES.get(frame.f_code)
        if name is not None:
            found = frame, name
        frame = frame.f_back
    return found


def frame_arguments(frame: FrameType) -> dict[str, Any]:
    """The arguments a frame's function was called with, by name."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    local = frame.f_locals
    return {name: local[name] for name in names if name in local}
