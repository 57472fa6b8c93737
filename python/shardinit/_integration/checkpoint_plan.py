"""What a seed checkpoint holds: one entry per state-dict key of a meta-device model,
with the values ``materialize`` would give it, and the pieces a writer fills from them,
one bounded buffer at a time.

The values come from ``materialize``'s own plan (:func:`~.plan.make_plan` over the
model's :class:`~.targets.LocalTarget` s, which give names, holders and defaults, with
init_fn's capture). Nothing is allocated for a parameter: a writer hands each piece, a
:class:`PieceTarget` (flat elements of one tensor in its buffer), the planned
:class:`~.targets.Values`, which write it with the one writer, as
:class:`~.targets.FlatTarget` writes its range of an FSDP1 shard. Buffers (small,
computed whole by the plan's buffer phase) are held as tensors."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from .._names import ModuleWalk, listing
from .._program import Writer
from ..errors import ShardInitError
from .fingerprint import digest_of_total, flat_range_term
from .targets import Values

if TYPE_CHECKING:  # the planning's: a writer given a plan imports none of it
    from .capture import CapturedInit
    from .plan import BufferInit
    from .rules import RuleList


@dataclass(frozen=True)
class Entry:
    """One tensor of the checkpoint: a state-dict key and where its values come from.

    Attributes:
        key: the state-dict key (what loaders look up).
        shape, dtype: the tensor's.
        values: a parameter's values (its init program and seed), generated in pieces.
        tensor: a persistent buffer's values, computed whole (None for a parameter).
        alias_of: the key of the first holder of a tied parameter (None if this is it).
    """

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    values: Values | None
    tensor: torch.Tensor | None
    alias_of: str | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(eq=False)
class PieceTarget:
    """Flat elements ``[start, stop)`` of one tensor, written into ``out`` (a 1-D view of
    a writer's bounded buffer): the target a checkpoint writer hands the plan's values."""

    entry: Entry
    start: int
    stop: int
    out: torch.Tensor

    @property
    def name(self) -> str:
        return self.entry.key

    @property
    def global_shape(self) -> tuple[int, ...]:
        return self.entry.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.entry.dtype

    def fill(self, values: Values | None, writer: Writer) -> None:
        """Writes the piece: the stream values (by ``writer``), or a buffer's slice."""
        if values is not None:
            values.write_flat(writer, self.start, self.stop, self.out)
        else:
            assert self.entry.tensor is not None
            self.out.copy_(self.entry.tensor.reshape(-1)[self.start : self.stop])


def pieces(
    entry: Entry,
    buffer: torch.Tensor,
    piece_bytes: int,
    writer: Writer,
    start: int = 0,
    stop: int | None = None,
) -> Iterator[PieceTarget]:
    """``entry``'s flat elements ``[start, stop)`` (default: all) in order, in pieces of
    at most ``piece_bytes`` (one element at least), each filled by ``writer`` into the
    start of ``buffer`` (a uint8 tensor of at least that size): a caller uses a piece
    before asking for the next."""
    step = max(1, piece_bytes // entry.dtype.itemsize)
    end = entry.numel if stop is None else stop
    for first in range(start, end, step):
        last = min(end, first + step)
        out = buffer[: (last - first) * entry.dtype.itemsize].view(entry.dtype)
        target = PieceTarget(entry, first, last, out)
        target.fill(entry.values, writer)
        yield target


class Fingerprinter:
    """Adds up one tensor's fingerprint from its pieces (any order, each element once)."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.total = 0

    def add(self, piece: PieceTarget) -> None:
        self.total += flat_range_term(piece.out, piece.start)

    def digest(self) -> str:
        return digest_of_total(self.entry.dtype, self.entry.shape, self.total)


def plan_entries(
    module: nn.Module,
    *,
    seed: int,
    rules: RuleList,
    init_fn: Callable[[], object] | CapturedInit | None,
    buffer_init: BufferInit | None,
    who: str,
) -> list[Entry]:
    """The checkpoint's entries in state-dict order (tied keys included, ``alias_of``
    set), with ``materialize``'s values for ``module`` (meta parameters, not wrapped).
    Persistent meta buffers are allocated on the CPU and set as materialize sets them.

    Raises:
        ShardInitError: parameters that are not on meta (or are sharded), and what
            ``materialize`` raises for the same model.
    """
    from .materialize import _captured
    from .placements import is_dtensor
    from .plan import RulesAndDefaults, copy_sources, local_targets, make_plan, region_targets

    walk = ModuleWalk(module)
    flat, managed = region_targets(module, walk)
    targets = local_targets(module, managed, walk)
    off_meta = [t.name for t in targets if not t.slot.param.is_meta or is_dtensor(t.slot.param)]
    if flat or off_meta:
        names = listing(off_meta or [t.name for t in flat])
        raise ShardInitError(
            f"{who}: model must be built on the meta device and not sharded or wrapped "
            f"(its checkpoint is written from the plan, never from memory); these "
            f"parameters are not plain meta parameters: {names}"
        )
    captured, walk = _captured(walk, init_fn, hides_params=False, device=None)
    built = targets  # the defaults' fans, as materialize reads them
    if captured is not None and captured.changed_params and captured.captured_on(module):
        targets = local_targets(
            module, region_targets(module, walk)[1], walk
        )  # init code added some
    plan = make_plan(
        module,
        targets,
        seed=seed,
        chooser=RulesAndDefaults(rules, module, built, walk),
        captured=captured,
        write_computed=captured is not None and captured.captured_on(module),
        copies=copy_sources(targets),
        walk=walk,
    )
    plan.check(overwrite=False, buffer_init=buffer_init)
    for buffer in plan.buffers:  # small: allocated whole, set as materialize sets them
        holder = buffer.holder
        current = holder.module._buffers[holder.attr]
        assert current is not None
        holder.module._buffers[holder.attr] = torch.empty_like(current, device="cpu")
    plan.fill_buffers(module, buffer_init)
    by_name = {p.target.name: p.values for p in plan.params}
    return _state_dict_entries(module, {id(t.slot.param): by_name[t.name] for t in targets})


def _state_dict_entries(module: nn.Module, values: dict[int, Values]) -> list[Entry]:
    entries: list[Entry] = []
    first_key: dict[int, str] = {}
    for key, tensor in module.state_dict(keep_vars=True).items():
        alias_of = first_key.setdefault(id(tensor), key)
        shape, dtype = tuple(tensor.shape), tensor.dtype
        if id(tensor) in values:
            entry = Entry(key, shape, dtype, values[id(tensor)], None)
        elif tensor.is_meta:
            raise ShardInitError(
                f"save_seed_checkpoint: state-dict entry {key} is neither a parameter nor "
                "a buffer (a state_dict hook computed it, e.g. a fused layer split on "
                "save); only parameters and buffers are written: build the model without "
                "that hook (e.g. unfused)"
            )
        else:
            entry = Entry(key, shape, dtype, None, tensor.detach().contiguous())
        entries.append(entry if alias_of == key else _alias(entry, alias_of))
    return entries


def _alias(entry: Entry, alias_of: str) -> Entry:
    return Entry(entry.key, entry.shape, entry.dtype, entry.values, entry.tensor, alias_of)


def split_bytes(sizes: Sequence[int], writers: int) -> list[int]:
    """The writer of each item of ``sizes`` (bytes): the largest first, each to the
    least loaded writer (ties: the lowest rank), so the work is balanced and the
    assignment depends only on the sizes and the number of writers."""
    load = [0] * writers
    owner = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(writers), key=lambda r: (load[r], r))
        owner[index] = rank
        load[rank] += sizes[index]
    return owner
