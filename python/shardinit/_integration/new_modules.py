"""Submodules that init code puts into the model while it is captured.

A module that init code builds (``seq[0] = nn.Linear(8, 8)``, ``blocks.append(...)``)
holds tensors its constructor filled from torch's global generator: values that are no
function of ``seed`` and differ on each rank, and under FSDP2 a plain module inside a
sharded model (whose fill then fails on a tensor FSDP2 never managed). Such an assignment
is refused when it happens, naming the module path and the caller's line, so nothing has
been allocated yet. Assigning a module the model already holds (tying two paths to one
module), a module without parameters or buffers (an activation), or ``None`` (removing
one) is what eager torch does with it, and is kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from torch import nn
from torch.nn.modules.module import register_module_module_registration_hook

from ..errors import UnsupportedInitOpError

__all__ = ["NewSubmodules"]


class NewSubmodules:
    """Refuses, while :meth:`refused` is active, a new module with tensors assigned into
    ``root``'s tree. ``error`` keeps the refusal: init code that catches it is still
    refused after it returns (:meth:`raise_if_refused`)."""

    def __init__(
        self, root: nn.Module, walk: Iterable[tuple[str, nn.Module]] | None = None
    ) -> None:
        """``walk``: ``root.named_modules(remove_duplicate=False)``, where the caller has it."""
        pairs = root.named_modules(remove_duplicate=False) if walk is None else walk
        self._paths = {id(m): path for path, m in pairs}
        self.error: UnsupportedInitOpError | None = None

    @contextlib.contextmanager
    def refused(self) -> Iterator[None]:
        """torch's global module-registration hook (every thread's ``setattr``,
        ``add_module``, ``register_module``) for the duration."""
        handle = register_module_module_registration_hook(self._on_assign)
        try:
            yield
        finally:
            handle.remove()

    def raise_if_refused(self) -> None:
        if self.error is not None:
            raise self.error

    def _on_assign(self, parent: nn.Module, name: str, value: Any) -> None:
        path = self._paths.get(id(parent))
        if path is None or value is None or id(value) in self._paths:
            return  # a module outside the model, a removal, or one the model holds
        if next(_tensors_of(value), None) is None:
            return  # no values to get wrong: an activation, a container of such
        from .capture.trace import refusal  # the capture imports this module

        target = f"{path}.{name}" if path else name
        old = parent._modules.get(name)
        what = f"replaces the {type(old).__name__}" if old is not None else "adds a module"
        self.error = refusal(
            f"module {target!r}",
            f"init code {what} with a new {type(value).__name__}",
            "its parameters and buffers hold what its constructor drew from torch's global "
            "generator (no function of seed, different on each rank; under FSDP2 a plain "
            "module inside a sharded model)",
            "Build the model with that module in place, then initialize it in place "
            "(torch.nn.init on its parameters)",
        )
        raise self.error


def _tensors_of(module: nn.Module) -> Iterator[Any]:
    yield from module.parameters()
    yield from module.buffers()
