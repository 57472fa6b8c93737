"""Init code that reaches a capture's stand-ins from another thread.

The capture's torch modes (:mod:`.mode`, :mod:`.backstop`) are per thread: in any thread
but the one that runs ``init_fn``, an operation on a parameter's stand-in would take
torch's meta no-op (and the parameter keep its default, silently), and one on a buffer's
CPU stand-in would change values the capture never sees. So the stand-ins themselves
carry the check, as tensor subclasses with torch's Python dispatch key: their
``__torch_dispatch__`` sees every aten operation on them from every thread (threads of
``threading``, pools made before the capture, ``asyncio.to_thread``, threads started in
C, ops reached with torch functions disabled), and their views (``.data``,
``view``, slicing, made in any thread) are such subclasses too.

* In the capturing thread an operation runs as it is (the capture's modes above have
  routed it already): nothing changes there.
* In another thread every operation that dispatches on a stand-in or a view of one is
  refused (reads and writes alike), but views (``.data``, slicing, ``view``), whose
  results carry the check on; and so are the questions a stand-in answers as the
  run-time parameter in the capturing thread (``device``, ``is_meta``, ...; elsewhere
  they would say meta) and ``.data =``. The refusal names the parameter or buffer, the
  thread and the caller's line; it is raised in that thread, where ``Thread.run`` may
  swallow it, so it is also kept as the capture's error, raised in the capturing thread
  when ``init_fn`` returns, or instead of the error ``init_fn`` raised after it (the
  refusal is why), before anything is allocated.
* Metadata that dispatches nothing (``shape``, ``dtype``, ``size()``, ``dim()``,
  ``numel()``, ``requires_grad``) is read as it is from any thread, of a view too: it is
  the same there and in eager torch.

Recording other threads' operations instead would need the capture's modes in each of
them while the routes keep one record order; refusing clearly is the closed answer.

The same check answers for layouts: a stand-in is row-major (its boxes are), but a
parameter may be ``channels_last`` (on meta before the capture, or by init code's
``module.to(memory_format=...)``). Such a stand-in and its views carry a meta tensor of
eager's layout (:func:`..trace.give_eager_layout`); a view that eager torch cannot make there
(``view`` raises, ``reshape``/``flatten`` copy) and ``contiguous()``, which copies there,
are refused, naming the parameter and the line. ``stride()`` and ``is_contiguous()``
always answer eager's layout (init code may branch on it), whoever asks: shardinit's
own region arithmetic reads the stand-in's row-major layout through
:func:`shardinit._torch_compat.stored_strides`, never by asking the stand-in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...._torch_compat import (
    DISABLED_TORCH_FUNCTION,
    make_subclass,
    python_key_excluded,
    stored_contiguous,
    torch_function_disabled,
    tree_leaves,
)
from ....errors import UnsupportedInitOpError
from ..trace import EAGER_LAYOUT, refusal, storage_id

if TYPE_CHECKING:
    from ..trace import RecordStore

__all__ = [
    "CheckedParameter",
    "checked_tensor",
    "plain_tensor",
    "watching_threads",
]


@dataclass
class _Watch:
    owner: int  # the capturing thread's ident
    store: RecordStore
    refused: UnsupportedInitOpError | None = None  # the first refusal in another thread

    def refuse(self, op: str, args: Any) -> UnsupportedInitOpError:
        """The refusal of ``op`` from this (other) thread, kept as the capture's error."""
        tracks = self.store.followed(args)
        label = tracks[0].label if tracks else "a parameter's or buffer's stand-in"
        error = refusal(
            label,
            f"{op} in thread {threading.current_thread().name!r}",
            "the capture records init code in the thread that runs init_fn (torch's "
            "modes are per thread), so there the operation would not be recorded (on a "
            "parameter's meta stand-in it does nothing) and the default kept",
            "Run this init code in init_fn's own thread (call it instead of handing it "
            "to a thread, a pool or asyncio.to_thread)",
        )
        if self.store.error is None:
            self.store.error = error
        if self.refused is None:
            self.refused = error
        return error


#: The capture in progress (captures are one at a time, process-wide: see api.py).
_WATCH: _Watch | None = None


@contextmanager
def watching_threads(store: RecordStore) -> Iterator[None]:
    """Refuses operations on the stand-ins from threads other than this one while the
    context is open (module docstring)."""
    global _WATCH
    watch = _WATCH = _Watch(threading.get_ident(), store)
    try:
        yield
    except Exception as error:
        if watch.refused is None or watch.refused is error:
            raise
        # init_fn failed after another thread's operation was refused (a thread that
        # got nothing back): the refusal is why.
        raise watch.refused from error
    finally:
        _WATCH = None


def _other_thread() -> _Watch | None:
    watch = _WATCH
    if watch is None or threading.get_ident() == watch.owner:
        return None
    return watch


def _device_question(name: str) -> Any:
    """The property ``name`` of torch.Tensor (``device``, ``is_meta``, ...), refused in
    other threads: in the capturing thread the capture's mode answers it with the
    run-time device (through torch's own getter), elsewhere it would say meta."""
    getter = getattr(torch.Tensor, name).__get__

    def get(self: torch.Tensor) -> Any:
        watch = _other_thread()
        if watch is not None:
            raise watch.refuse(name, self)
        return getter(self, type(self))

    return property(get)


#: torch.Tensor's own ``data`` descriptor (typed as a tensor by torch's stubs).
_TENSOR_DATA: Any = torch.Tensor.data


def _get_data(self: torch.Tensor) -> torch.Tensor:
    view: torch.Tensor = _TENSOR_DATA.__get__(self, type(self))  # a view: allowed anywhere
    return view


def _set_data(self: torch.Tensor, value: torch.Tensor) -> None:
    watch = _other_thread()
    if watch is not None:  # swaps the tensor, which no dispatch sees
        raise watch.refuse(".data =", self)
    _TENSOR_DATA.__set__(self, value)


class _ThreadChecked(torch.Tensor):
    """The check both kinds of stand-in carry (module docstring). Its torch functions are
    torch.nn.Parameter's (none of the subclass's own: torch's fast path stays, and
    results are not converted; views become checked at the dispatch, whoever makes
    them), but for the questions a stand-in answers per thread."""

    __torch_function__ = DISABLED_TORCH_FUNCTION
    device = _device_question("device")
    is_meta = _device_question("is_meta")
    is_cpu = _device_question("is_cpu")
    is_cuda = _device_question("is_cuda")
    data = property(_get_data, _set_data)

    def get_device(self) -> int:
        watch = _other_thread()
        if watch is not None:
            raise watch.refuse("get_device", self)
        return torch.Tensor.get_device(self)

    @classmethod  # torch's stub types it as a plain function attribute
    def __torch_dispatch__(  # type: ignore[override]
        cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        watch = _other_thread()
        if watch is not None and not func.is_view:  # a view carries the check on
            raise watch.refuse(str(func), (args, kwargs))
        with python_key_excluded():
            result = func(*args, **(kwargs or {}))
        checked = _views_checked(args, result)
        if func.is_view and _WATCH is not None:
            _follow_eager_layout(_WATCH, func, args, kwargs or {}, checked)
        return checked

    def stride(self, *args: Any, **kwargs: Any) -> Any:
        """Eager's strides (module docstring)."""
        eager = self.__dict__.get(EAGER_LAYOUT)
        if eager is not None:
            return eager.stride(*args, **kwargs)
        return torch.Tensor.stride(self, *args, **kwargs)

    def is_contiguous(self, *args: Any, **kwargs: Any) -> bool:
        """Whether eager's layout is contiguous (module docstring)."""
        eager = self.__dict__.get(EAGER_LAYOUT)
        if eager is not None:
            return bool(eager.is_contiguous(*args, **kwargs))
        return bool(torch.Tensor.is_contiguous(self, *args, **kwargs))

    def contiguous(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        eager = self.__dict__.get(EAGER_LAYOUT)
        with torch_function_disabled():
            copies = eager is not None and not eager.is_contiguous(*args, **kwargs)
        if copies and _WATCH is not None:
            raise _layout_refusal(_WATCH, self, "contiguous", "eager torch copies it there")
        return torch.Tensor.contiguous(self, *args, **kwargs)


class CheckedParameter(_ThreadChecked, nn.Parameter):
    """A parameter's stand-in (see the module docstring)."""


class CheckedTensor(_ThreadChecked):
    """A buffer's stand-in, or a view of any stand-in (see the module docstring)."""


def _layout_refusal(
    watch: _Watch, tensor: torch.Tensor, op: str, why: str
) -> UnsupportedInitOpError:
    track = watch.store.lookup(tensor)
    label = track.label if track is not None else "a parameter"
    eager = tensor.__dict__.get(EAGER_LAYOUT)
    strides = tuple(eager.stride()) if eager is not None else "?"
    error = refusal(
        label,
        op,
        f"in eager torch the tensor has strides {strides} (a memory format such as "
        f"channels_last), where {why}; the capture's stand-in is row-major, so the "
        "result would differ",
        "Initialize the parameter through views both layouts share (indexing, slicing, "
        "torch.nn.init), or set the memory format after init_fn",
    )
    if watch.store.error is None:
        watch.store.error = error
    return error


def _follow_eager_layout(
    watch: _Watch, func: Any, args: Sequence[Any], kwargs: dict[str, Any], result: Any
) -> None:
    """Makes the view ``func`` on eager's layouts of its operands too: refused where
    eager torch cannot (module docstring); else each view of ``result`` notes its own."""

    def eager_of(arg: Any) -> Any:
        layout = arg.__dict__.get(EAGER_LAYOUT) if isinstance(arg, torch.Tensor) else None
        return arg if layout is None else layout

    eager_args = [eager_of(a) for a in args]
    if all(e is a for e, a in zip(eager_args, args, strict=True)):
        return  # no operand of another layout in eager torch (the common case)
    try:
        with torch_function_disabled():
            eager = func(*eager_args, **kwargs)
    except RuntimeError:
        why = "this view is not possible (view() raises; reshape() and flatten() copy)"
        shadowed = next(a for e, a in zip(eager_args, args, strict=True) if e is not a)
        raise _layout_refusal(watch, shadowed, str(func), why) from None
    views = result if isinstance(result, (list, tuple)) else [result]
    eagers = eager if isinstance(eager, (list, tuple)) else [eager]
    with torch_function_disabled():
        for view, eager_view in zip(views, eagers, strict=False):
            if isinstance(view, _ThreadChecked) and not stored_contiguous(eager_view):
                view.__dict__[EAGER_LAYOUT] = eager_view


def checked_tensor(tensor: torch.Tensor) -> CheckedTensor:
    """``tensor``'s alias that carries the check (a buffer's stand-in)."""
    return make_subclass(CheckedTensor, tensor)


def plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s alias as a plain tensor without the check (a buffer's value kept)."""
    if not isinstance(tensor, _ThreadChecked):
        return tensor
    with python_key_excluded():
        return tensor.detach()


def _views_checked(args: Sequence[Any], result: Any) -> Any:
    """``result`` with each tensor that views a stand-in's storage made a checked view
    (the kernel's outputs lack the Python key)."""
    if isinstance(result, _ThreadChecked):
        return result  # an in-place operation's own operand
    if type(result) is torch.Tensor:  # one view (w[i], w.view(...)): of an operand's storage?
        viewed = storage_id(result)
        if viewed is not None and any(
            isinstance(a, _ThreadChecked) and storage_id(a) == viewed for a in args
        ):  # (the stand-in among the arguments themselves: no walk of them)
            return checked_tensor(result)
    leaves = [r for r in tree_leaves(result) if isinstance(r, torch.Tensor)]
    if not leaves:
        return result
    checked = {storage_id(a) for a in tree_leaves(args) if isinstance(a, _ThreadChecked)}
    checked.discard(None)
    if not any(storage_id(leaf) in checked for leaf in leaves):
        return result
    if isinstance(result, torch.Tensor):
        return checked_tensor(result)
    return type(result)(  # split, unbind, chunk: a list or tuple of views
        checked_tensor(r) if isinstance(r, torch.Tensor) and storage_id(r) in checked else r
        for r in result
    )
