"""The capture's closed world below torch functions: a ``TorchDispatchMode`` that sees
every aten operation, ``out=`` variants and in-place metadata changes (``set_``,
``resize_``, ``t_``, ...) included, whatever Python route reached it.

The dispatch (:mod:`.mode`) declares the followed tensors an operation it runs is meant
to write (:meth:`WriteBackstop.expecting`). A write to any other followed tensor is one
the capture did not record: on a parameter's stand-in it is refused, naming the
parameter, the aten operation and the caller's line; a temporary becomes opaque (its
values are not the recorded ones); a buffer's real stand-in counts as written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from ..._caches import cached
from ..._program.actions import Fill, Opaque
from ..._torch_compat import DispatchMode
from ...init import Constant
from .store import RecordStore
from .tracks import Track

__all__ = ["WriteBackstop"]

# A write into a buffer's real stand-in: only its region matters (the values are real).
_ZERO = Constant(0.0)


@cached
def _written_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    """The positions and names of the arguments the schema of the aten overload ``func``
    marks as written (``Tensor(a!)``), computed once per overload."""
    schema = getattr(func, "_schema", None)
    arguments = [] if schema is None else schema.arguments
    return tuple(
        (index, argument.name)
        for index, argument in enumerate(arguments)
        if argument.alias_info is not None and argument.alias_info.is_write
    )


def _values_at(
    written: Sequence[tuple[int, str]], args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Iterator[torch.Tensor]:
    for index, name in written:
        value = args[index] if index < len(args) else kwargs.get(name)
        values = value if isinstance(value, (list, tuple)) else (value,)
        yield from (v for v in values if isinstance(v, torch.Tensor))


class WriteBackstop(DispatchMode):  # type: ignore[no-untyped-call]
    """Refuses (parameters) or records (temporaries, buffers) writes to followed tensors
    that the dispatch above did not expect."""

    def __init__(self, store: RecordStore) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.store = store
        self.expected: frozenset[int] = frozenset()

    @contextlib.contextmanager
    def expecting(self, *tracks: Track | None) -> Iterator[None]:
        """Writes to ``tracks`` are the operation's own while the block runs."""
        before = self.expected
        self.expected = before | {id(track) for track in tracks if track is not None}
        try:
            yield
        finally:
            self.expected = before

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        written = _written_arguments(func)
        if written:
            for value in _values_at(written, args, kwargs):
                track = self.store.lookup(value)
                if track is not None and id(track) not in self.expected:
                    self.unexpected(track, value, str(func.name()))
        return func(*args, **kwargs)

    def unexpected(self, track: Track, value: torch.Tensor, op: str) -> None:
        """A write capture did not see coming (module docstring).

        Raises:
            UnsupportedInitOpError: the write is to a parameter's stand-in.
        """
        if track.kind == "param":
            raise self.store.fail(
                track, op,
                "this operation writes the parameter (or changes its shape, dtype or "
                "storage) by a route capture does not follow, so its values would be "
                "lost; write it with torch.nn.init or tensor methods instead",
            )  # fmt: skip
        whole = track.base
        if track.kind == "temp":
            why = f"{op} wrote it by a route capture does not follow"
            self.store.append(track, whole, Opaque(why), op)
        else:
            self.store.append(track, whole, Fill(_ZERO), op)
