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
from functools import cached_property

import torch
from torch import nn

__all__ = [
    "WRAPPER_SEGMENTS",
    "BufferHolder",
    "ModuleWalk",
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


class ModuleWalk:
    """One walk of ``root``'s modules, shared by the phases of one call instead of a
    walk each (a model of thousands of modules: a walk costs about a microsecond per
    module, and materialize with init_fn had some sixteen).

    It holds the modules and their paths, not their tensors: parameters and buffers are
    read from the modules when asked (allocation replaces them). It stays true while the
    module tree is as it was walked, so a call walks again after running code that may
    change the tree (init_fn: :meth:`~shardinit._integration.capture.session.created.
    CreatedTensors.settle`); it is never kept across calls.

    Attributes:
        root: the model.
        pairs: ``root.named_modules(remove_duplicate=False)``: a module held at two
            paths comes twice, with its subtree.
    """

    def __init__(self, root: nn.Module) -> None:
        self.root = root
        self.pairs: list[tuple[str, nn.Module]] = list(root.named_modules(remove_duplicate=False))

    @cached_property
    def distinct(self) -> list[tuple[str, nn.Module]]:
        """``root.named_modules()``: each module once, at its first path, in the same
        order (a module met again is met with its subtree, all of which was met the
        first time)."""
        seen: set[int] = set()
        found = []
        for path, module in self.pairs:
            if id(module) not in seen:
                seen.add(id(module))
                found.append((path, module))
        return found

    @cached_property
    def modules(self) -> list[nn.Module]:
        """``root.modules()``."""
        return [module for _, module in self.distinct]

    @cached_property
    def slots(self) -> list[ParamSlot]:
        """:func:`param_slots` of ``root``, as the modules held them when first asked
        (each ``slot.param`` is the parameter then; :meth:`ParamSlot.current` reads the
        holder now). Shared: read, never changed."""
        return walk_slots(self.pairs)


def param_slots(
    root: nn.Module, *, skip: SkipHolder | None = None, walk: ModuleWalk | None = None
) -> list[ParamSlot]:
    """Every distinct parameter under ``root``, in ``named_parameters()`` order.

    Args:
        root: the model.
        skip: holders to leave out (e.g. the ones an FSDP1 unit manages).
        walk: ``root``'s walk, where the caller has it.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False))
        >>> model[1].weight = model[0].weight
        >>> [(slot.name, len(slot.owners)) for slot in param_slots(model)]
        [('0.weight', 2)]
    """
    # named_modules(remove_duplicate=False) visits parameters in named_parameters() order,
    # so the first path seen for a tied parameter is its canonical one (stream-format.md §5).
    pairs = root.named_modules(remove_duplicate=False) if walk is None else walk.pairs
    return walk_slots(pairs, skip=skip)


def walk_slots(
    modules: Iterable[tuple[str, nn.Module]], *, skip: SkipHolder | None = None
) -> list[ParamSlot]:
    """Every distinct parameter of the ``(path, module)`` pairs of a walk, in its order,
    named by the first ``path.attr`` seen (canonical); :func:`param_slots` walks
    ``named_modules``, a wrapper whose names drop more segments walks its own way
    (Megatron's global layer and expert numbers)."""
    slots: dict[int, ParamSlot] = {}
    for path, module in modules:
        params = module._parameters
        if not params:
            continue  # most modules of a deep model: containers, activations, norms
        prefix = _canonical_prefix(path)
        for attr, param in params.items():
            if param is None or (skip is not None and skip(module, attr, param)):
                continue
            slot = slots.get(id(param))
            if slot is None:
                name = _attr_name(prefix, attr)
                slots[id(param)] = ParamSlot(name, param, [(module, attr)])
            elif not any(m is module and a == attr for m, a in slot.owners):
                slot.owners.append((module, attr))
    return list(slots.values())


def _canonical_prefix(path: str) -> str:
    """``canonical_name(path) + "."`` (``""`` for the root, or a path of wrapper segments
    only): ``prefix + attr`` is the canonical name of the module's attribute ``attr``,
    found once per module instead of per attribute."""
    canonical = canonical_name(path) if path else ""
    return f"{canonical}." if canonical else ""


def _attr_name(prefix: str, attr: str) -> str:
    """``canonical_name(qualified(path, attr))`` from ``prefix``, the path's
    :func:`_canonical_prefix` (an attribute named as a wrapper segment is dropped too)."""
    return prefix + attr if attr not in WRAPPER_SEGMENTS else prefix[:-1]


def holder_names(
    root: nn.Module, *, skip: SkipHolder | None = None, walk: ModuleWalk | None = None
) -> dict[str, str]:
    """Which parameter each name holds: ``{canonical name of every holder (every path,
    as named_parameters(remove_duplicate=False)): canonical name of its parameter}``.
    Two names map to the same value exactly when they hold one Parameter (tied).
    ``walk``: ``root``'s, where the caller has it.

    Example:
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False))
        >>> model[1].weight = model[0].weight
        >>> holder_names(model)
        {'0.weight': '0.weight', '1.weight': '0.weight'}
    """
    first: dict[int, str] = {}
    names: dict[str, str] = {}
    pairs = root.named_modules(remove_duplicate=False) if walk is None else walk.pairs
    for path, module in pairs:
        params = module._parameters
        if not params:
            continue
        prefix = _canonical_prefix(path)
        for attr, param in params.items():
            if param is None or (skip is not None and skip(module, attr, param)):
                continue
            name = _attr_name(prefix, attr)
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


def buffer_holders(root: nn.Module, walk: ModuleWalk | None = None) -> Iterator[BufferHolder]:
    """Every registered (not None) buffer under ``root``, in ``named_buffers()`` order;
    each module once (a buffer object two modules hold comes once per module).
    ``walk``: ``root``'s, where the caller has it."""
    for path, module in root.named_modules() if walk is None else walk.distinct:
        buffers = module._buffers
        if not buffers:
            continue
        prefix = _canonical_prefix(path)
        for attr, buffer in buffers.items():
            if buffer is not None:
                name = _attr_name(prefix, attr)
                yield BufferHolder(name, module, attr, buffer)


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
