"""Tensors a model holds outside its parameters and buffers: plain module attributes, and
lists, tuples, dicts, ``SimpleNamespace``s, dataclasses and ``functools.partial``s of
tensors in them (rotary tables kept as ``self.freqs_cis =
[...]``, frequency tables as ``self.pos_freqs = ...``).

``materialize`` allocates and fills parameters and buffers only. A meta tensor held
elsewhere that a constructor computed inside :func:`shardinit.record_constructors` (a
rotary table: ``torch.polar`` of a position table, complex values included) gets the
values eager torch computed, as a buffer does (:func:`keep_attribute_tables`, then
:func:`check_meta_attributes` sets it after the fill, on the device the fill allocates
on). Any other would stay on meta and the model's forward would fail on it, so it is
refused before anything is allocated, naming each attribute (and why its constructor's
value cannot be computed, where it has one). An attribute that is one of the
model's own parameters or buffers (``self.w = self.proj.weight``) is an alias: eager
torch keeps it the very tensor the model holds, so after the fill it is pointed at the
new tensor that replaced the meta one.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._names import ModuleWalk, listing
from .._program.cannot import Cannot
from .._torch_compat import torch_function_disabled
from ..errors import ShardInitError

__all__ = ["Alias", "AttributeTable", "check_meta_attributes", "keep_attribute_tables"]

#: The containers searched for tensors, and how deep (a list of tuples of tensors).
_CONTAINERS = (list, tuple, dict)
_DEPTH = 3
#: ``nn.Module``'s own tables: parameters, buffers and submodules are not attributes.
_MODULE_TABLES = frozenset({"_parameters", "_buffers", "_modules"})

#: Where a tensor sits below an attribute: list/tuple indices and dict keys, in order.
Steps = tuple[Any, ...]


@dataclass(frozen=True)
class Alias:
    """An attribute (``holder.attr`` then ``steps`` into containers) that is the tensor
    ``owner._parameters[name]`` or ``owner._buffers[name]`` before the fill."""

    holder: nn.Module
    attr: str
    steps: Steps
    owner: nn.Module
    name: str

    def rebind(self) -> None:
        """Points the attribute at the tensor ``owner.name`` is now."""
        new = getattr(self.owner, self.name)
        value = vars(self.holder)[self.attr]
        vars(self.holder)[self.attr] = _replaced(value, self.steps, new)


@dataclass(frozen=True)
class AttributeTable:
    """What a constructor computed for a meta tensor it holds as a plain attribute
    (``tensor``, weakly): its values as eager torch computed them on the CPU, or why
    they cannot be computed."""

    tensor: weakref.ref[torch.Tensor]
    values: torch.Tensor | None
    why: str = ""


#: module -> {(attr, steps): its table}, recorded by :func:`keep_attribute_tables`.
_TABLES: weakref.WeakKeyDictionary[nn.Module, dict[tuple[str, Steps], AttributeTable]] = (
    weakref.WeakKeyDictionary()
)


def keep_attribute_tables(
    modules: Iterable[nn.Module],
    values_of: Callable[[torch.Tensor], torch.Tensor],
    skip: Collection[int],
) -> None:
    """Records, for each meta tensor ``modules`` hold as plain attributes (not the ids in
    ``skip``: parameters and buffers), its values by ``values_of`` (a CPU tensor; its
    :class:`Cannot` says why there is none): what :func:`shardinit.record_constructors`
    computed for it."""
    done: set[int] = set()
    for module in modules:
        if id(module) in done:
            continue
        done.add(id(module))
        for attr, value in vars(module).items():
            kind = type(value)  # _holds_no_tensor, inline: every attribute of every module
            if kind in _LEAVES or (kind in _EMPTY_WHEN_FALSE and not value):
                continue
            if attr in _MODULE_TABLES:
                continue
            for steps, tensor in _tensors_in(value, ()):
                if id(tensor) in skip or not _is_meta(tensor):
                    continue
                try:
                    table = AttributeTable(weakref.ref(tensor), values_of(tensor))
                except Cannot as cannot:
                    table = AttributeTable(weakref.ref(tensor), None, cannot.reason)
                _TABLES.setdefault(module, {})[(attr, steps)] = table


def _table_of(
    module: nn.Module, attr: str, steps: Steps, tensor: torch.Tensor
) -> AttributeTable | None:
    """The table recorded for the tensor ``module.<attr>`` holds at ``steps``, if that is
    still the tensor it was recorded for."""
    table = _TABLES.get(module, {}).get((attr, steps))
    return table if table is not None and table.tensor() is tensor else None


def check_meta_attributes(
    root: nn.Module, device: torch.device | None = None, walk: ModuleWalk | None = None
) -> Callable[[], None]:
    """Refuses meta tensors ``root``'s modules hold as plain attributes, but those whose
    constructor's values were recorded (:func:`keep_attribute_tables`); returns what
    points the aliases of parameters and buffers at their new tensors and sets the
    recorded tables, on ``device`` (default the CPU) (call it after the fill).
    ``walk``: ``root``'s, where the caller has it.

    Raises:
        ShardInitError: a meta tensor that is neither a parameter nor a buffer and has
            no computed value, naming every such attribute.
    """
    walk = ModuleWalk(root) if walk is None else walk
    owners = _tensor_owners(walk.modules)
    aliases: list[Alias] = []
    tables: list[tuple[nn.Module, str, Steps, torch.Tensor]] = []
    stranded: list[str] = []
    for path, module in walk.distinct:
        for attr, value in vars(module).items():
            kind = type(value)  # _holds_no_tensor, inline: every attribute of every module
            if kind in _LEAVES or (kind in _EMPTY_WHEN_FALSE and not value):
                continue
            if attr in _MODULE_TABLES or (kind is tuple and _LEAVES.issuperset(map(type, value))):
                continue  # (a tuple of sizes: a convolution's kernel_size, stride, ...)
            for steps, tensor in _tensors_in(value, ()):
                owner = owners.get(id(tensor))
                fixed = all(not isinstance(s, _Field) or s.settable for s in steps)
                if owner is not None and fixed:
                    aliases.append(Alias(module, attr, steps, *owner))
                    continue
                if owner is None and not _is_meta(tensor):
                    continue
                where = f"{_where(path, attr, steps)} ({type(module).__name__})"
                table = _table_of(module, attr, steps, tensor) if fixed else None
                if table is not None and table.values is not None:
                    tables.append((module, attr, steps, table.values))
                elif table is not None:
                    stranded.append(
                        f"{where}, whose constructor's value cannot be computed ({table.why})"
                    )
                else:  # (a partial's: not settable)
                    stranded.append(where)
    if stranded:
        raise ShardInitError(
            f"materialize: {listing(stranded)} hold tensors on the meta device that are "
            "neither parameters nor buffers; materialize fills parameters and buffers "
            "only, so these would stay on meta and forward would fail on them. Register "
            "each as a buffer (register_buffer(name, tensor, persistent=False); built "
            "inside shardinit.record_constructors() it gets its constructor's value), or "
            "compute it on a real device before materialize (e.g. build the module that "
            "holds it again outside the meta device, when it has no parameters)"
        )

    def rebind_aliases() -> None:
        for alias in aliases:
            alias.rebind()
        for module, attr, steps, values in tables:  # the meta tensor, replaced
            placed = values.to(device) if device is not None else values
            vars(module)[attr] = _replaced(vars(module)[attr], steps, placed)

    return rebind_aliases


def _tensor_owners(modules: Iterable[nn.Module]) -> dict[int, tuple[nn.Module, str]]:
    """id of every parameter and buffer of ``modules`` -> (module holding it, its name)."""
    owners: dict[int, tuple[nn.Module, str]] = {}
    for module in modules:
        for table in (module._parameters, module._buffers):
            for name, tensor in table.items():
                if tensor is not None:
                    owners.setdefault(id(tensor), (module, name))
    return owners


#: Attribute types that hold no tensor (most of a module's attributes: flags, sizes,
#: names), and containers that hold none when empty (its hook tables): skipped before
#: the search, which a model's every module and attribute would otherwise enter.
_LEAVES = frozenset({bool, int, float, str, type(None), set, frozenset})
_EMPTY_WHEN_FALSE = frozenset({dict, collections.OrderedDict, list, tuple})


def _holds_no_tensor(value: Any) -> bool:
    kind = type(value)
    return kind in _LEAVES or (kind in _EMPTY_WHEN_FALSE and not value)


def _tensors_in(value: Any, steps: Steps) -> Iterator[tuple[Steps, torch.Tensor]]:
    """The tensors in ``value`` (a tensor, or containers of them to depth ``_DEPTH``:
    lists, tuples, dicts, and the attributes of a ``SimpleNamespace``, a dataclass or a
    ``functools.partial``, steps :class:`_Field`)."""
    if isinstance(value, torch.Tensor):
        yield steps, value
    elif len(steps) >= _DEPTH:
        return
    elif isinstance(value, _CONTAINERS):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if not _holds_no_tensor(item):
                yield from _tensors_in(item, (*steps, key))
    elif isinstance(value, functools.partial):
        for index, item in enumerate(value.args):
            yield from _tensors_in(item, (*steps, _Field(f".args[{index}]", None)))
        for key, item in value.keywords.items():
            yield from _tensors_in(item, (*steps, _Field(f".keywords[{key!r}]", None)))
    elif isinstance(value, types.SimpleNamespace):
        for key, item in list(vars(value).items()):
            yield from _tensors_in(item, (*steps, _Field(f".{key}", key)))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        # By its fields, not vars(): a dataclass with __slots__ (torchtitan's configs)
        # has no __dict__.
        for field in dataclasses.fields(value):
            item = getattr(value, field.name, None)
            yield from _tensors_in(item, (*steps, _Field(f".{field.name}", field.name)))


@dataclass(frozen=True)
class _Field:
    """A step to an attribute of an object (``settable`` its name, where it may be set
    again: not a ``functools.partial``'s arguments)."""

    shown: str
    settable: str | None

    def __repr__(self) -> str:
        return self.shown


def _is_meta(tensor: torch.Tensor) -> bool:
    with torch_function_disabled():  # the tensor's own device, not a mode's answer
        return bool(tensor.is_meta)


def _where(path: str, attr: str, steps: Steps) -> str:
    """``rope.freqs_cis[0]``: the attribute and the steps into it, as Python spells them."""
    name = f"{path}.{attr}" if path else attr
    return name + "".join(
        step.shown if isinstance(step, _Field) else f"[{step!r}]" for step in steps
    )


def _replaced(value: Any, steps: Steps, new: torch.Tensor) -> Any:
    """``value`` with the tensor at ``steps`` replaced by ``new`` (lists and dicts in
    place; a tuple is rebuilt, as it cannot change)."""
    if not steps:
        return new
    head, rest = steps[0], steps[1:]
    if isinstance(head, _Field):
        assert head.settable is not None  # check_meta_attributes's check
        setattr(value, head.settable, _replaced(getattr(value, head.settable), rest, new))
        return value
    if isinstance(value, tuple):
        items = [_replaced(item, rest, new) if i == head else item for i, item in enumerate(value)]
        return tuple(items) if type(value) is tuple else type(value)(*items)  # a namedtuple
    value[head] = _replaced(value[head], rest, new)
    return value
