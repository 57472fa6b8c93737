"""Where a captured operation comes from: the user's ``file:line``, and the frames of
``torch.nn.init`` functions on the call stack."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

import torch

from ...._caches import BoundedMap, cached
from ...._torch_compat import aten_packet
from ..ops import INIT_CODES

__all__ = ["frame_arguments", "func_name", "init_frame", "user_frame"]

# Frames that are never the user's line (closed world): shardinit's, every file of the
# torch package (its modules' ``apply`` / ``to_empty`` / ``__setattr__``,
# parametrizations, nn.init, overrides, ...), and libraries' wrappers of torch.nn.init;
# but torch.nn modules' own init code is the init code that made the call (a default,
# or init code calling ``module.reset_parameters()``): those frames are the user's.
_OWN_DIR = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_TORCH_MODULES = os.path.join(_TORCH_DIR, "nn", "modules") + os.sep
_TORCH_INIT_CODE = frozenset({"reset_parameters", "_reset_parameters"})
_WRAPPERS = (os.path.join("transformers", "initialization.py"),)  # guarded nn.init wrappers


@cached
def _file_kind(filename: str) -> str:
    """The kind of a file's frames: "user", "plumbing", or "torch.nn" (the user's only
    in _TORCH_INIT_CODE functions); cached: a capture asks for the user's line at every
    recorded operation."""
    path = os.path.abspath(filename)
    if path.startswith(_OWN_DIR) or path.endswith(_WRAPPERS):
        return "plumbing"
    if path.startswith(_TORCH_MODULES):
        return "torch.nn"
    return "plumbing" if path.startswith(_TORCH_DIR) else "user"


def _users_code(code: CodeType) -> bool:
    """Whether the frames of ``code`` are user (or library) code (see above). Asked of
    each frame of the stack at every recorded operation: by the file's name (a string
    keeps its hash, so the cached kind is one lookup; a code object hashes its bytecode
    and constants at every lookup) and the function's."""
    kind = _file_kind(code.co_filename)
    return kind == "user" or (kind == "torch.nn" and code.co_name in _TORCH_INIT_CODE)


def _per_code(
    kept: BoundedMap[int, tuple[CodeType, _A]], code: CodeType, answer: Callable[[CodeType], _A]
) -> _A:
    """``answer(code)``, kept by the code object's identity. A code object hashes its
    bytecode and constants at every lookup (about a microsecond: a stack walk asks it
    of each of tens of frames at every operation); kept with the code object itself,
    so the id stays its own, and the answer is the one the code object gives."""
    found = kept.get(id(code))
    if found is None or found[0] is not code:
        found = (code, answer(code))
        kept.put(id(code), found)
    return found[1]


_A = TypeVar("_A")
#: The ``torch.nn.init`` function a code object runs, by its id.
_INIT_NAMES: BoundedMap[int, tuple[CodeType, str | None]] = BoundedMap()


def user_frame() -> str:
    """``file:line in function`` of the innermost frame of the user's (or a library's)
    code: never shardinit's, a wrapper's or torch's own, but torch.nn modules'
    ``reset_parameters``."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        kind = _file_kind(code.co_filename)  # _users_code, inline: tens of frames a call
        if kind == "user" or (kind == "torch.nn" and code.co_name in _TORCH_INIT_CODE):
            return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return "<unknown>"


def func_name(func: Any) -> str:
    """The name a torch function, method or property accessor is known by in the
    dispatch tables (``normal_``, ``data.__set__``, ``is_meta.__get__``). An aten
    overload (``torch.ops.aten.fill_.Scalar``) is known by its packet's name (``fill_``):
    an overload takes the arguments of the torch function or method of that name, in
    the same order, with the same meaning (a call with another meaning, such as
    ``aten.normal.Tensor_float``, has another name too), so the routes that know the
    name know the overload."""
    name = getattr(aten_packet(func), "__name__", repr(func))
    if name in ("__get__", "__set__"):
        owner = getattr(func, "__self__", None)
        return f"{getattr(owner, '__name__', '?')}.{name}"
    return str(name)


def init_frame(outer: FrameType | None = None) -> tuple[FrameType, str] | None:
    """The outermost frame running a ``torch.nn.init`` function's original code (a
    private helper a public function calls is part of that call), below ``outer`` (the
    capture's own frame: init code runs below it; the stack above it is not walked)."""
    found: tuple[FrameType, str] | None = None
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame is not outer:
        code = frame.f_code
        # A code object equals only one of its own name (compared first, as torch's are
        # looked up by equality): most frames are ruled out without a lookup.
        if code.co_name in _INIT_CODE_NAMES:
            name = _per_code(_INIT_NAMES, code, INIT_CODES.get)
            if name is not None:
                found = frame, name
        frame = frame.f_back
    return found


#: The function names of :data:`INIT_CODES`' code objects.
_INIT_CODE_NAMES = frozenset(code.co_name for code in INIT_CODES)


def frame_arguments(frame: FrameType) -> dict[str, Any]:
    """The arguments a frame's function was called with, by name."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    local = frame.f_locals
    return {name: local[name] for name in names if name in local}
