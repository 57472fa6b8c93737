"""Which module holds a module: the ``materialize(submodule)`` trap.

Canonical names are paths from the module passed to ``materialize``. Passed a part of a
model (``materialize(layer.lora_A)`` per adapter), every part would be named from itself
(``default.weight``), so parts of one shape would get equal values, silently. So
``materialize`` refuses a module that a larger model holds, and says how to fill part of
a model (``only=``).

torch modules do not know their parents. This registry does: on first use it scans the
live modules once (``gc.get_objects``) for the links that already exist, and from then on
torch's global registration hooks note every submodule set by ``setattr``,
``add_module`` or ``register_module`` (all of torch.nn's containers, transformers, peft).
A module the registry has never seen (a deep copy's inner modules, unpickled ones) sends
it back to the scan. Links are checked when read (a parent that dropped the module no
longer holds it). Not seen: links made by editing ``_modules`` directly after the scan
(``ModuleList.insert``).
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

from torch import nn
from torch.nn.modules.module import (
    register_module_buffer_registration_hook,
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)

from .._names import canonical_name
from ..errors import ShardInitError

__all__ = ["holder_of", "refuse_part_of_model", "shardinits_hooks"]

_LOCK = threading.Lock()


class _ByModule:
    """A table keyed by live modules: ``id(module)`` -> (the module, weakly; a value).
    Not a WeakKeyDictionary: the registration hook runs at every registration of every
    build (each parameter, buffer and submodule), where a weak-keyed table's Python
    methods and the weak reference with a callback each one makes cost several
    microseconds; a plain ``weakref.ref`` is torch's one object per module, made once.
    An entry whose module died (its reference gives None or, its id reused, another
    module) is replaced when met, and all dead ones are dropped as the table doubles."""

    def __init__(self) -> None:
        self.entries: dict[int, tuple[weakref.ref[nn.Module], Any]] = {}
        #: The size past which the table is next swept: twice its live entries at the
        #: last sweep, and some (no bound on live ones: a sweep).
        self.sweep_past = 64

    def get(self, module: nn.Module) -> Any:
        """``module``'s value, or None where the table does not hold it."""
        entry = self.entries.get(id(module))
        return entry[1] if entry is not None and entry[0]() is module else None

    def put(self, module: nn.Module, value: Any) -> None:
        """Sets ``module``'s value (raises TypeError where it takes no weak reference)."""
        self.entries[id(module)] = (weakref.ref(module), value)
        if len(self.entries) > self.sweep_past:
            dead = [key for key, (ref, _) in self.entries.items() if ref() is None]
            for key in dead:
                del self.entries[key]
            self.sweep_past = 2 * len(self.entries) + 64


#: child -> [(parent, weakly; attribute name)], every link seen (checked when read).
_PARENTS = _ByModule()
#: The modules whose links the registry knows (seen by the scan or by a hook) -> True.
_SEEN = _ByModule()
_INSTALLED: list[bool] = []


def _see(module: nn.Module) -> None:
    if _SEEN.get(module) is None:
        _SEEN.put(module, True)


def _link(parent: nn.Module, name: str, child: object) -> None:
    try:
        _see(parent)
        if isinstance(child, nn.Module):
            _see(child)
            links = _PARENTS.get(child)
            if links is None:
                links = []
                _PARENTS.put(child, links)
            if not any(ref() is parent and attr == name for ref, attr in links):
                links.append((weakref.ref(parent), name))
    except TypeError:
        # A module class whose instances take no weak reference (__slots__ without
        # __weakref__) cannot be tracked (a registration hook must never break building
        # the user's model).
        pass


def _noted(module: nn.Module, name: str, value: object) -> None:
    # A hook returns None: the value registered stays the caller's.
    with _LOCK:
        _link(module, name, value)


def _scan() -> None:
    for obj in gc.get_objects():
        if issubclass(type(obj), nn.Module):  # type(), not isinstance: no __class__ lookups
            try:
                _see(obj)
            except TypeError:  # (see _link)
                continue
            for name, child in obj._modules.items():
                _link(obj, name, child)


def shardinits_hooks() -> tuple[object, ...]:
    """The registration hook the registry installs (it notes links, and runs no torch
    operation): code that must know every hook a registration runs allows it."""
    return (_noted,)


def _install() -> None:
    if not _INSTALLED:
        register_module_module_registration_hook(_noted)
        register_module_parameter_registration_hook(_noted)
        register_module_buffer_registration_hook(_noted)
        _scan()
        _INSTALLED.append(True)


def holder_of(module: nn.Module) -> tuple[nn.Module, str] | None:
    """A live module that holds ``module`` as a submodule, and the attribute name, or None."""
    with _LOCK:
        _install()
        if _SEEN.get(module) is None:
            _scan()
        for ref, name in _PARENTS.get(module) or ():
            parent = ref()
            if parent is not None and parent._modules.get(name) is module:
                return parent, name
    return None


def refuse_part_of_model(module: nn.Module) -> None:
    """Raises if a larger model holds ``module`` under a name that is part of canonical
    names (a wrapper's own segment, as FSDP1's ``_fsdp_wrapped_module``, is not).

    Raises:
        ShardInitError: naming the model, the path and the ``only=`` to use instead.
    """
    path: list[str] = []
    root, seen = module, {id(module)}
    while (found := holder_of(root)) is not None and id(found[0]) not in seen:
        root, name = found
        seen.add(id(root))
        path.append(name)
    prefix = canonical_name(".".join(reversed(path)))  # wrapper segments dropped
    if not prefix:
        return
    first = next((name for name, _ in module.named_parameters()), "weight")
    raise ShardInitError(
        f"materialize: module ({type(module).__name__}) is part of a larger model: a "
        f"{type(root).__name__} holds it as {prefix!r}. Canonical names are paths from the "
        f"module passed ({first!r}, not {prefix + '.' + first!r}), so parts of one shape "
        "would get equal values. Materialize the whole model; to fill part of it, pass "
        f"only: materialize(model, seed=..., only=lambda name: name.startswith({prefix + '.'!r}))"
    )
