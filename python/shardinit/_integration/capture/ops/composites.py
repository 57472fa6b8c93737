"""Calls that are other calls the routes know: ``torch._foreach_<op>`` over a list of
tensors is ``<op>`` on each; dropout that drops nothing (``p=0`` or not training) and
``resize_`` of a contiguous tensor to its own shape are the identity; a numpy scalar
argument (``fill_(np.float32(0.5))``) is the Python number it holds, as torch takes it.
The dispatch (:mod:`.mode`) routes each part as its own call.

Dropout that drops (training, ``p > 0``) multiplies by a mask drawn from torch's
generator: no stream rule describes it, so on a parameter it is refused; on temporaries
it runs as any call that draws from torch's generator (:mod:`.concrete`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "DROPOUTS",
    "MOVES",
    "RESIZES",
    "dropout_drops",
    "foreach_parts",
    "normal_parts",
    "python_numbers",
    "resizes_to_itself",
    "same_device",
    "split_device",
]

#: Device moves that are no dtype cast (``to`` is a cast with an optional device).
MOVES = frozenset({"cpu", "cuda"})

RESIZES = frozenset({"resize_", "resize_as_"})

#: Dropout by name, each with its ``training`` default (None: the argument is required,
#: ``torch.dropout(input, p, train)``); in place where the name ends with ``_`` or
#: ``inplace=True`` is passed.
DROPOUTS: Mapping[str, bool | None] = {
    "dropout": True, "dropout1d": True, "dropout2d": True, "dropout3d": True,
    "alpha_dropout": False, "feature_alpha_dropout": False,
    "dropout_": None, "alpha_dropout_": None, "feature_alpha_dropout_": None,
    "feature_dropout": None, "feature_dropout_": None,
}  # fmt: skip


def dropout_drops(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> float | None:
    """The ``p`` that dropout ``name(*args, **kwargs)`` drops with; None where it drops
    nothing (``p == 0``, not training or an empty input): then torch returns its input
    itself (``_dropout_impl``), in place or not."""
    p = float(kwargs.get("p", args[1] if len(args) > 1 else 0.5))
    trained = DROPOUTS[name]
    training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else trained))
    empty = isinstance(args[0], torch.Tensor) and args[0].numel() == 0
    return None if not training or p == 0.0 or empty else p


def foreach_parts(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> list[tuple[Any, tuple[Any, ...], dict[str, Any]]] | None:
    """``torch._foreach_<op>(tensors, ...)`` as one ``Tensor.<op>`` call per tensor: an
    argument that is a list as long as ``tensors`` gives each call its own element (a
    list of scalars or of tensors), any other is passed to every call. None where
    ``Tensor`` has no method ``<op>``."""
    method = getattr(torch.Tensor, name.removeprefix("_foreach_"), None)
    tensors = args[0] if args else kwargs.get("self")
    if method is None or not isinstance(tensors, (list, tuple)):
        return None
    count = len(tensors)

    def part(value: Any, index: int) -> Any:
        if isinstance(value, (list, tuple)) and len(value) == count:
            return value[index]
        return value

    return [
        (
            method,
            (tensor, *(part(arg, index) for arg in args[1:])),
            {key: part(value, index) for key, value in kwargs.items() if key != "self"},
        )
        for index, tensor in enumerate(tensors)
    ]


def resizes_to_itself(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether ``resize_`` / ``resize_as_`` keeps a dense tensor as it is: the same
    shape, and no memory format that would restride it (torch then changes nothing):
    none given and row-major, or the one it has (torch's
    ``convert_conv2d_weight_memory_format`` resizes its channels_last copy so)."""
    tensor = args[0] if args else None
    if not isinstance(tensor, torch.Tensor):
        return False
    memory_format = kwargs.get("memory_format")
    if memory_format in (None, torch.preserve_format):
        memory_format = torch.contiguous_format
    if not torch.Tensor.is_contiguous(tensor, memory_format=memory_format):  # its own layout
        return False
    if name == "resize_as_":
        other = args[1] if len(args) > 1 else kwargs.get("the_template")
        return isinstance(other, torch.Tensor) and other.shape == tensor.shape
    sizes = args[1:] if len(args) > 1 else (kwargs.get("size", kwargs.get("sizes")),)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        sizes = tuple(sizes[0])
    return all(isinstance(size, int) for size in sizes) and tuple(sizes) == tuple(tensor.shape)


def _python_number(value: Any) -> Any:
    if isinstance(value, (np.bool_, np.integer, np.floating)):
        return value.item()
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.generic) for v in value):
        return type(value)(_python_number(v) for v in value)
    return value


#: What :func:`python_numbers` looks into: numpy scalars, and lists or tuples of them.
_NUMBER_HOLDERS = (np.generic, list, tuple)


def python_numbers(
    args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[Sequence[Any], dict[str, Any]]:
    """``args`` and ``kwargs`` with each numpy scalar (also in a list argument) the
    Python number it holds: torch takes a numpy scalar as that number (a wrapped
    number: ``int32 * np.float32(2.5)`` is float32, ``fill_(np.float32(0.1))`` stores
    float(np.float32(0.1))), so the routes, which know Python numbers, take it so too.
    The same objects where there is none (the common case, checked first)."""
    for held in (args, kwargs.values()):  # (no generator: asked at every torch call)
        for value in held:
            if isinstance(value, _NUMBER_HOLDERS):
                break
        else:
            continue
        break
    else:
        return args, kwargs
    return (
        tuple(_python_number(v) for v in args),
        {key: _python_number(v) for key, v in kwargs.items()},
    )


def split_device(
    name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[torch.device | None, tuple[Any, ...], dict[str, Any]]:
    """The device a ``cpu`` / ``cuda`` / ``to`` call moves its tensor to (None: no device
    named, or a meta tensor's), and the call's arguments without it (``to(other)`` keeps
    ``other``'s dtype): what is left is a dtype cast, or nothing."""
    if name == "cpu":
        return torch.device("cpu"), (args[0],), {}
    if name == "cuda":
        index = args[1] if len(args) > 1 else kwargs.get("device")
        return torch.device("cuda", index) if index is not None else torch.device("cuda"), (
            args[0],
        ), {}  # fmt: skip
    device: torch.device | None = None
    rest: list[Any] = [args[0]]
    for value in args[1:]:
        if isinstance(value, (str, torch.device)):
            device = torch.device(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            device = torch.device("cuda", value)  # to(0): a CUDA device's index
        elif isinstance(value, torch.Tensor) and not value.is_meta:
            device = value.device
            rest.append(value.dtype)
        else:
            rest.append(value)
    others = dict(kwargs)
    if others.get("device") is not None:
        device = torch.device(others.pop("device"))
    return device, tuple(rest), others


def same_device(asked: torch.device, runtime: torch.device) -> bool:
    """Whether a move to ``asked`` keeps a tensor on ``runtime`` (an index not given is
    any: ``cuda`` on ``cuda:1`` is the current device, the one it is on at run time)."""
    if asked.type != runtime.type:
        return False
    return asked.index is None or runtime.index is None or asked.index == runtime.index


def normal_parts(
    args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[Any, Any, tuple[int, ...], dict[str, Any]] | None:
    """``torch.normal(mean, std[, size])`` as aten computes it (``normal_out_impl``,
    checked 2.15.0): an empty tensor, ``normal_(0, 1)`` on it, then ``mul_(std)`` and
    ``add_(mean)`` (``normal_(0, std)`` for a number ``std``; ``normal_(mean, std)``
    where both are numbers): ``(mean, std, shape, factory options)``. Its shape is the
    tensors' broadcast, its options the ``mean`` tensor's (else ``std``'s, else those
    passed). None where a generator or ``out`` is given (torch's own draw, refused
    where it reaches a followed tensor) or the arguments are not those forms."""
    if kwargs.get("generator") is not None or kwargs.get("out") is not None:
        return None
    names = ("mean", "std", "size")
    bound = {**dict(zip(names, args, strict=False)), **kwargs}
    mean, std = bound.get("mean", 0.0), bound.get("std", 1.0)
    tensors = [v for v in (mean, std) if isinstance(v, torch.Tensor)]
    if any(isinstance(v, torch.Tensor) and v.is_complex() for v in (mean, std)):
        return None
    if tensors:
        shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))  # type: ignore[no-untyped-call]
        options = {"dtype": tensors[0].dtype, "device": tensors[0].device}
        return mean, std, shape, options
    size = bound.get("size")
    if size is None or not all(isinstance(v, (int, float)) for v in (mean, std)):
        return None
    options = {k: kwargs[k] for k in ("dtype", "device", "requires_grad") if k in kwargs}
    return mean, std, tuple(size), options
