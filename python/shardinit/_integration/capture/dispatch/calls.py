"""What the dispatch's handlers are given and return: one routed :class:`Call`, the
:class:`Mode` they act through (the capture's components, as :class:`.mode.CaptureMode`
holds them), and :data:`NOT_MINE`, the one answer of a handler that leaves a call to
the next (:mod:`.families`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from ..trace import Concrete, Coordinates, Copies, Engine, RecordStore, Steps, Track
from .backstop import WriteBackstop
from .writes import Writes

__all__ = ["NOT_MINE", "Call", "Handler", "Mode", "Route"]

#: The routes of the op families (:data:`.families.FAMILIES`), one per family.
Route = Literal[
    "device", "flag", "grad_hook", "metadata", "collective", "foreach", "dropout", "normal",
    "resize", "translated", "view",
    "factory", "concat", "copy", "source", "pointwise", "coordinate", "inplace", "cast",
    "set_data", "copy_into", "pad", "setitem", "other",
]  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One torch call the mode routes: its name, route (:func:`.families.family_of`),
    the followed tensor it is called on (its first argument; None when that is none),
    and the call itself."""

    name: str
    route: Route
    target: Track | None
    func: Any
    args: Sequence[Any]
    kwargs: dict[str, Any]


class Mode(Protocol):
    """What a handler reaches of the mode: its components, the devices its parameters
    will be on, and the mode's own dispatch (for calls a handler splits into calls)."""

    store: RecordStore
    engine: Engine
    backstop: WriteBackstop
    steps: Steps
    copies: Copies
    coordinates: Coordinates
    concrete: Concrete
    writes: Writes

    @property
    def devices(self) -> Mapping[int, torch.device]: ...

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any: ...


#: What a handler returns when the call is not its to take (the next handler is asked).
NOT_MINE: Any = object()
#: A family's handler: the call's result, or :data:`NOT_MINE`.
Handler = Callable[[Mode, Call], Any]
