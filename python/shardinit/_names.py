"""Canonical names and parameter slots (docs/stream-format.md §5): the one walk over a
model's parameters that materialize and capture_init share.

A parameter's stream is keyed by its canonical name: the dotted path in the model with
the segments that wrappers insert (FSDP1, activation checkpointing, ``torch.compile``)
removed, so the same parameter has the same name wrapped or not. A parameter held by
several modules (tied weights) is one slot, named by its first path in
``named_parameters()`` order, with every ``(module, attr)`` that holds it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "WRAPPER_SEGMENTS",
    "BufferHolder",
    "ParamSlot",
    "buffer_holders",
    "canonical_name",
    "holder_names",
    "listing",
    "param_slots",
    "qualified",
    "walk_slots",
]

#: Path segments of wrappers, removed from canonical names (stream-format.md §5).
WRAPPER_SEGMENTS = frozenset({"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"})
# Finds any of them in a path: one without is its own canonical name (most models).
_ANY_WRAPPER = re.compile("|".join(re.escape(segment) for segment in sorted(WRAPPER_SEGMENTS)))

# Names shown in one error message before "... (N more)".
_MAX_LISTED = 20


def qualified(path: str, attr: str) -> str:
    """The dotted path of attribute ``attr`` of the module at ``path`` (``""`` is the root).

    Example:
        >>> qualified("layers.0", "weight"), qualified("", "weight")
        ('layers.0.weight', 'weight')
    """
    return f"{path}.{attr}" if path else attr


def canonical_name(path: str) -> str:
    """The canonical name (stream-format.md §5) of a dotted parameter path: wrapper segments
    (``_fsdp_wrapped_module``, ``_checkpoint_wrapped_module``, ``_orig_mod``) removed.

    Example:
        >>> canonical_name("_orig_mod.layers.0._fsdp_wrapped_module.attn.wq.weight")
        'layers.0.attn.wq.weight'
    """
    if not isinstance(path, str):
        raise TypeError(f"path must be a str, got {type(path).__name__} {path!r}")
    if _ANY_WRAPPER.search(path) is None:
        return path  # nothing to remove: no split and join per parameter
    return ".".join(part for part in path.split(".") if part not in WRAPPER_SEGMENTS)


@dataclass
class ParamSlot:
    """One distinct parameter of a model.

    Attributes:
        name: its canonical name (its first path in ``named_parameters()`` order).
        param: the parameter object the walk found.
        owners: every ``(module, attr)`` holding it, the canonical holder first; more
            than one for tied parameters.
    """

    name: str
    param: nn.Parameter
    owners: list[tuple[nn.Module, str]]

    def current(self) -> torch.Tensor:
        """The tensor the canonical holder has registered now (a new Parameter after
        allocation, not necessarily :attr:`param`)."""
        module, attr = self.owners[0]
        tensor = module._parameters[attr]
        assert tensor is not None, f"{self.name} was unregistered"
        return tensor


#: ``skip(module, attr, param)``: leave this holder out of the walk.
SkipHolder = Callable[[nn.Module, str, nn.Parameter], bool]


def param_slots(root: nn.Module, *, skip: SkipHolder | None = None) -> list[ParamSlot]:
    """Every distinct parameter under ``root``, in ``named_parameters()`` order.

    Args:
        root: the model.
        skip: holders to leave out (e.g. the ones an FSDP1 unit manages).

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False))
        >>> model[1].weight = model[0].weight
        >>> [(slot.name, len(slot.owners)) for slot in param_slots(model)]
        [('0.weight', 2)]
    """
    # named_modules(remove_duplicate=False) visits parameters in named_parameters() order,
    # so the first path seen for a tied parameter is its canonical one (stream-format.md §5).
    return walk_slots(root.named_modules(remove_duplicate=False), skip=skip)


def walk_slots(
    modules: Iterable[tuple[str, nn.Module]], *, skip: SkipHolder | None = None
) -> list[ParamSlot]:
    """Every distinct parameter of the ``(path, module)`` pairs of a walk, in its order,
    named by the first ``path.attr`` seen (canonical); :func:`param_slots` walks
    ``named_modules``, a wrapper whose names drop more segments walks its own way
    (Megatron's global layer and expert numbers)."""
    slots: dict[int, ParamSlot] = {}
    for path, module in modules:
        for attr, param in module._parameters.items():
            if param is None or (skip is not None and skip(module, attr, param)):
                continue
            slot = slots.get(id(param))
            if slot is None:
                name = canonical_name(qualified(path, attr))
                slots[id(param)] = ParamSlot(name, param, [(module, attr)])
            elif not any(m is module and a == attr for m, a in slot.owners):
                slot.owners.append((module, attr))
    return list(slots.values())


def holder_names(root: nn.Module, *, skip: SkipHolder | None = None) -> dict[str, str]:
    """Which parameter each name holds: ``{canonical name of every holder (every path,
    as named_parameters(remove_duplicate=False)): canonical name of its parameter}``.
    Two names map to the same value exactly when they hold one Parameter (tied).

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False))
        >>> model[1].weight = model[0].weight
        >>> holder_names(model)
        {'0.weight': '0.weight', '1.weight': '0.weight'}
    """
    first: dict[int, str] = {}
    names: dict[str, str] = {}
    for path, module in root.named_modules(remove_duplicate=False):
        for attr, param in module._parameters.items():
            if param is None or (skip is not None and skip(module, attr, param)):
                continue
            name = canonical_name(qualified(path, attr))
            names[name] = first.setdefault(id(param), name)
    return names


@dataclass(frozen=True)
class BufferHolder:
    """One registered buffer: its canonical name, the module holding it, its attribute
    name there, and the tensor."""

    name: str
    module: nn.Module
    attr: str
    tensor: torch.Tensor


def buffer_holders(root: nn.Module) -> Iterator[BufferHolder]:
    """Every registered (not None) buffer under ``root``, in ``named_buffers()`` order;
    each module once (a buffer object two modules hold comes once per module)."""
    for path, module in root.named_modules():
        for attr, buffer in module._buffers.items():
            if buffer is not None:
                yield BufferHolder(canonical_name(qualified(path, attr)), module, attr, buffer)


def refuse_lazy(slots: Sequence[ParamSlot], caller: str) -> None:
    """Refuses uninitialized lazy parameters (``nn.LazyLinear`` before its first
    forward), whose shape is unknown.

    Raises:
        ShardInitError: naming them.
    """
    from torch.nn.parameter import is_lazy

    from .errors import ShardInitError

    lazy = [slot.name for slot in slots if is_lazy(slot.param)]
    if lazy:
        raise ShardInitError(
            f"{caller}: {len(lazy)} parameter(s) are uninitialized lazy parameters "
            f"(nn.LazyLinear and the other nn.Lazy* modules), whose shape is unknown until "
            f"their first forward: {listing(lazy)}. Run one forward pass first (on meta, "
            "with meta inputs, it only infers the shapes) or build the modules non-lazy "
            "(nn.Linear(in_features, out_features))"
        )


def listing(names: Sequence[str], separator: str = ", ") -> str:
    """Names for an error message: the first 20, then how many more (``separator``
    between them, e.g. ``"; "`` for entries that hold commas).

    Example:
        >>> listing([f"w{i}" for i in range(22)])[-22:]
        'w18, w19, ... (2 more)'
    """
    shown = separator.join(names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return shown + (f"{separator}... ({more} more)" if more > 0 else "")
