"""The capture's closed world below torch functions: a ``TorchDispatchMode`` that sees
every aten operation, ``out=`` variants and in-place metadata changes (``set_``,
``resize_``, ``t_``, ...) included, whatever Python route reached it.

The dispatch (:mod:`.mode`) declares the followed tensors an operation it runs is meant
to write (:meth:`WriteBackstop.expecting`). A write to any other followed tensor is one
the capture did not record: on a parameter's stand-in it is refused, naming the
parameter, the aten operation and the caller's line; a temporary becomes opaque (its
values are not the recorded ones); a buffer's real stand-in counts as written.

Every write to a buffer's stand-in, expected or not, is also checked for random values:
torch draws them from its global generator (no function of ``seed``, different on each
rank, so under FSDP2 each rank would hold another buffer) and no stream draws buffers,
so an operation that draws (``normal_``, ``uniform_``, ``bernoulli_``: aten's
``nondeterministic_seeded`` ops) or that writes values of a random temporary
(``copy_(torch.rand(6))``) is refused, naming the buffer, the operation and the line,
as the constructor path refuses a random buffer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ...._caches import cached
from ...._program.actions import Fill, Opaque
from ...._program.cannot import Cannot
from ...._torch_compat import DispatchMode, torch_function_disabled, tree_leaves
from ....init import Constant
from ..trace import RecordStore, Track

if TYPE_CHECKING:
    from ..trace import Engine

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

    def __init__(self, store: RecordStore, engine: Engine | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.store = store
        self.engine = engine  # tells random temporaries (None: buffers are not checked)
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
        if self.store.in_signal is not None:  # arrived while the dispatch above ran
            self.store.refuse_in_signal(str(func), (args, kwargs))
        written = _written_arguments(func)
        if written:
            for value in _values_at(written, args, kwargs):
                track = self.store.lookup(value)
                if track is not None and track.kind == "buffer":
                    self.refuse_random(track, func, args, kwargs)
                if track is not None and id(track) not in self.expected:
                    self.unexpected(track, value, str(func.name()))
        result = func(*args, **kwargs)
        if self.engine is not None:
            self.derive(func, written, args, kwargs, result)
        return result

    def derive(
        self, func: Any, written: Sequence[tuple[int, str]], args: Sequence[Any],
        kwargs: Mapping[str, Any], result: Any,
    ) -> None:  # fmt: skip
        """The one rule at the floor: a real tensor an aten op makes or writes from
        values the capture does not know (a draw of torch's generator, a random or
        opaque temporary, a tensor marked so before) holds unknown values, whatever
        its layout and whoever asked for the op (a route, torch's own Python code, a
        C++ op's parts): :meth:`.store.RecordStore.mark_unknown`. The routes above
        follow their results as tracks, which take precedence; anything else read as
        a table is refused where it reaches a parameter or buffer."""
        with torch_function_disabled():  # metadata: no Python call of a device mode each
            if isinstance(result, torch.Tensor):  # most ops: no tree to walk
                outs = [] if result.is_meta else [result]
            else:
                outs = [v for v in tree_leaves(result) if isinstance(v, torch.Tensor)]
                outs = [v for v in outs if not v.is_meta]
            outs += [v for v in _values_at(written, args, kwargs) if not v.is_meta]
        if not outs:
            return
        unknown = self.unknown_reason(func, args, kwargs)
        if unknown is not None:
            reason, random = unknown
            for out in outs:
                self.store.mark_unknown(out, reason, random)

    def unknown_reason(
        self, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[str, bool] | None:
        """Why the values ``func`` computes from ``args`` are unknown to the capture (the
        first operand that makes them so), and whether ``func`` draws from torch's
        generator or computes from values drawn so (a random temporary, a tensor marked
        random: a refusal says so); None when they are all known (torch's own result is
        then eager's). One walk of the operands answers both."""
        assert self.engine is not None  # derive's check
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            return (
                f"{_op_name(func)} at {self.store.where()} draws from torch's random generator",
                True,
            )
        looked = [(leaf, self.store.lookup(leaf)) for leaf in _tensor_leaves((args, kwargs))]
        reason: str | None = None
        try:
            for leaf, track in looked:
                if track is None:
                    unknown = self.store.unknown_of(leaf)
                    if unknown is not None:
                        reason = unknown.why
                        break
                elif not self.engine.known(track):
                    reason = (
                        f"{_op_name(func)} at {self.store.where()} computed it from {track.label}, "
                        f"{_UNKNOWN}"
                    )
                    break
        except Cannot as cannot:
            reason = cannot.reason
        if reason is None:
            return None
        return reason, any(self._drawn(leaf, track) for leaf, track in looked)

    def _drawn(self, leaf: torch.Tensor, track: Track | None) -> bool:
        """Whether the operand ``leaf`` (followed as ``track``) holds values drawn from
        torch's generator (:meth:`unknown_reason`)."""
        assert self.engine is not None  # derive's check
        if track is None:
            unknown = self.store.unknown_of(leaf)
            return unknown is not None and unknown.random
        return track.kind == "temp" and self.engine.random(track)

    def refuse_random(
        self, buffer: Track, func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        """Refuses a write of random values into ``buffer`` (module docstring)."""
        if self.engine is None:
            return
        op = str(func.name()).removeprefix("aten::")
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            raise self.store.fail(buffer, op, f"{op} draws {_RANDOM}")
        for leaf in _tensor_leaves((args, kwargs)):
            source = self.store.lookup(leaf)
            if source is not None and source.kind == "temp" and self.engine.random(source):
                raise self.store.fail(
                    buffer, op, f"it writes the values of {source.label}: {_RANDOM}"
                )
            unknown = None if source is not None else self.store.unknown_of(leaf)
            if unknown is not None and unknown.random:
                why = f"it writes values computed from {_RANDOM} ({unknown.why})"
                raise self.store.fail(buffer, op, why)
            if unknown is not None:
                why = f"it writes values shardinit does not know ({unknown.why})"
                raise self.store.fail(buffer, op, why)
            if source is None and _computed_values(leaf) and not self.engine.rng_untouched():
                why = f"it writes values computed after init code drew {_RANDOM}"
                raise self.store.fail(buffer, op, why)

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


#: What a value computed from a tensor whose values the capture does not know is.
_UNKNOWN = (
    "whose values shardinit does not know (random values are drawn at each destination "
    "element's own index at replay; a parameter's do not exist on meta), so torch's "
    "result of this operation is no value of the capture"
)

#: Why random values may not reach a buffer.
_RANDOM = (
    "random values from torch's global generator, no function of seed and different on "
    "each rank; shardinit draws no stream for buffers, so a buffer must be computed "
    "deterministically (or be a parameter)"
)


def _op_name(func: Any) -> str:
    """An aten overload's operation as a refusal names it (``mul``, not ``aten::mul``)."""
    return str(func.name()).removeprefix("aten::")


def _tensor_leaves(tree: Any) -> Iterator[torch.Tensor]:
    return (leaf for leaf in tree_leaves(tree) if isinstance(leaf, torch.Tensor))


def _computed_values(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds values an operation computed (not a number torch wrapped
    as a 0-d tensor, not a meta tensor)."""
    return tensor.dim() > 0 and not tensor.is_meta
