"""Where a parameter's values go, and what they are.

A *target* is the part of one parameter this rank holds, with the methods that
materialize calls in its phases: :meth:`~Target.is_filled` (checked before anything is
allocated), :meth:`~Target.module_pass_tensor` / :meth:`~Target.after_module_pass` (the
one ``Module._apply`` pass over the root), :meth:`~Target.allocate` and
:meth:`~Target.fill`. Four kinds exist:

* :class:`LocalTarget` (here): a DTensor's local shard (a product of per-dim runs of
  global indices) or a plain parameter (the whole tensor);
* :class:`FlatTarget` (here): a flat element range of the parameter inside a 1-D shard
  that holds several parameters with zero padding (FSDP1's flat parameter);
* ``Zero3Target`` (``zero3.py``): DeepSpeed ZeRO-3's padded flat partitions of one
  parameter, a flat element range each;
* ``MegatronTarget`` (``megatron.py``): a Megatron-core partition, per-dim runs of the
  global tensor from its partition attributes.

A new sharding wrapper adds one class with the same methods (see :class:`Target`) in
its own module, with the function that builds its targets.
*Values* say what to write: one record per parameter (:class:`Values`), written into
either form of region by the one writer the plan's fill built
(:class:`shardinit._program.Writer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from .._names import ParamSlot
from .._program import ParamRecord, Writer
from .._torch_compat import assign_parameter, give_grad_hooks, make_parameter
from .placements import Run, is_dtensor, local_of

# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Values:
    """A parameter's values: the operations of ``record`` (a rule's or torch.nn
    default's one source, the constructor's value, init_fn's captured operations, or
    these in order), from the parameter's stream for ``seed``. Both forms of region are
    written by the one writer (:class:`shardinit._program.Writer`)."""

    record: ParamRecord
    seed: int

    def write_runs(
        self, writer: Writer, runs: Sequence[Sequence[Run]], local: torch.Tensor
    ) -> None:
        """Writes the region ``runs`` (per dim, runs of global indices) into ``local``."""
        writer.write_runs(self.record, self.seed, runs, local)

    def write_flat(self, writer: Writer, start: int, stop: int, out: torch.Tensor) -> None:
        """Writes flat elements ``[start, stop)`` of the row-major parameter into the 1-D
        ``out``."""
        writer.write_flat(self.record, self.seed, start, stop, out)


# --------------------------------------------------------------------------- targets


def empty_like_on(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``torch.empty_like(tensor, device=device)`` of a meta ``tensor``, in its memory
    format. ``empty_like`` of a meta tensor runs torch's Python reference of it (tens of
    microseconds, more than the fill of a small parameter); of a contiguous one (most,
    and so dense without overlaps) it comes to ``empty_strided`` with the tensor's own
    strides (those of its size-1 dims too: a channels_last weight of one channel), made
    here at once. The others keep ``empty_like``'s rules."""
    if tensor.layout is torch.strided and tensor.is_contiguous():
        strides = tensor.stride()
        return torch.empty_strided(tensor.shape, strides, dtype=tensor.dtype, device=device)
    return torch.empty_like(tensor, device=device)


class Target(Protocol):
    """The part of one parameter that this rank holds.

    A new region source (a sharding wrapper that holds parameters in its own layout,
    e.g. DeepSpeed ZeRO-3's padded flat partitions) adds one class with these attributes
    and methods, built by the ``targets`` function of a
    :class:`~shardinit._integration.plan.RegionSource` in
    :data:`shardinit._integration.plan.REGION_SOURCES` (or, when it needs arguments of
    its own, by its entry point, as :func:`shardinit.megatron.materialize`).
    """

    @property
    def name(self) -> str:
        """Canonical name."""
        ...

    @property
    def global_shape(self) -> tuple[int, ...]:
        """The whole parameter's shape."""
        ...

    @property
    def dtype(self) -> torch.dtype:
        """The parameter's dtype."""
        ...

    @property
    def holders(self) -> Sequence[tuple[nn.Module, str]]:
        """Every ``(module, attr)`` holding the parameter, the canonical one first (rules
        and torch.nn defaults are chosen by the first)."""
        ...

    def is_filled(self) -> bool:
        """Whether the region already holds values (then only ``overwrite=True`` refills)."""
        ...

    def module_pass_tensor(self) -> torch.Tensor | None:
        """The tensor still on meta that only the one ``Module._apply`` pass over the root
        may allocate (a DTensor: FSDP2 re-registers its shards in that pass), which runs
        before :meth:`allocate`; None for storage the target allocates itself or has."""
        ...

    def after_module_pass(self) -> None:
        """Called on every target after that pass (when one ran): undoes what it split."""
        ...

    def planned_tensor(self) -> torch.Tensor | None:
        """The model's tensor this target fills, which that pass may allocate (a target
        of a wrapper's own layout: None, the pass never touches its storage)."""
        ...

    def allocate(self, device: torch.device) -> None:
        """Gives a region still on the meta device storage on ``device``."""
        ...

    def fill(self, values: Values, writer: Writer) -> None:
        """Writes ``values`` into the region with ``writer`` (under ``torch.no_grad()``)."""
        ...


class SlotHeld:
    """The :class:`Target` attributes of a parameter in a model's own slot (``slot``):
    its canonical name, dtype and holders."""

    slot: ParamSlot

    @property
    def name(self) -> str:
        return self.slot.name

    @property
    def dtype(self) -> torch.dtype:
        return self.slot.param.dtype

    @property
    def holders(self) -> Sequence[tuple[nn.Module, str]]:
        return self.slot.owners


@dataclass(eq=False)
class LocalTarget(SlotHeld):
    """A DTensor's local shard (``runs`` from its placements) or a whole plain parameter.

    DTensor shards on meta are allocated by one pass over the module before
    :meth:`allocate` (:meth:`module_pass_tensor`): FSDP2 must see that pass to
    re-register its sharded parameters.
    """

    slot: ParamSlot
    runs: list[list[Run]]
    #: The whole parameter's shape (asked at every phase: read once).
    global_shape: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.global_shape = tuple(self.slot.param.shape)

    def local(self) -> torch.Tensor:
        return local_of(self.slot.current())

    def is_filled(self) -> bool:
        local = self.local()
        return not local.is_meta and local.numel() > 0

    def allocate(self, device: torch.device) -> None:
        tensor = self.slot.current()
        if tensor.is_meta and not is_dtensor(tensor):
            # Without nn.Parameter's __new__: materialize allocates every parameter, in
            # the meta tensor's memory format (a channels_last Conv2d stays one, as
            # torch's to_empty keeps it); the Writer fills strided tensors by strides.
            empty = empty_like_on(tensor, device)
            # Its own class: a Parameter subclass stays one, as in eager construction.
            cls = type(tensor) if isinstance(tensor, nn.Parameter) else nn.Parameter
            new = make_parameter(cls, empty, tensor.requires_grad)
            noted = vars(tensor)
            if noted:
                # The attributes code set on the parameter (Mamba's ``_no_weight_decay``,
                # Megatron's tensor-parallel ones), which torch's to_empty keeps on the
                # same object; shardinit's own notes on the meta parameter stay behind.
                new.__dict__.update(
                    {k: v for k, v in noted.items() if not k.startswith("_shardinit")}
                )
            give_grad_hooks(tensor, new)  # registered on the meta parameter, as to_empty keeps
            for owner, attr in self.slot.owners:
                assign_parameter(owner, attr, new)

    def module_pass_tensor(self) -> torch.Tensor | None:
        tensor = self.slot.current()
        return tensor if is_dtensor(tensor) and self.local().is_meta else None

    def planned_tensor(self) -> torch.Tensor | None:
        return self.slot.current()

    def after_module_pass(self) -> None:
        """Module._apply gives each module its own new Parameter: tie the other holders
        back to the canonical one."""
        primary = self.slot.current()
        for module, attr in self.slot.owners[1:]:
            if module._parameters[attr] is not primary:
                setattr(module, attr, primary)

    def fill(self, values: Values, writer: Writer) -> None:
        values.write_runs(writer, self.runs, self.local())


@dataclass(eq=False)
class FlatShard:
    """A 1-D local tensor holding parts of several parameters, with zero padding between
    and after them (FSDP1's flat parameter).

    Attributes:
        tensor: the local flat tensor.
        group: the process group the flat parameter is split over (the one whose ranks
            hold the other parts), or None where each rank holds all of it (NO_SHARD).
        cleared: whether :meth:`clear_once` ran.
    """

    tensor: torch.Tensor
    group: Any = None
    cleared: bool = False

    def clear_once(self) -> None:
        """Zeroes the whole shard once, so padding no parameter covers is zero."""
        if not self.cleared:
            self.tensor.data.zero_()
            self.cleared = True


class OwnLayout:
    """The module-pass hooks of :class:`Target` for a target of a wrapper's own layout
    (a flat shard or partition the wrapper allocated): the one ``Module._apply`` pass
    over the root never touches its storage."""

    def module_pass_tensor(self) -> torch.Tensor | None:
        return None

    def after_module_pass(self) -> None:
        pass

    def planned_tensor(self) -> torch.Tensor | None:
        return None


@dataclass(eq=False)
class FlatTarget(OwnLayout):
    """Flat elements ``[start, stop)`` of one parameter, at ``offset`` in ``shard``.

    Attributes:
        name: canonical name.
        owner: the module that owns the original parameter; attr: its name there.
        global_shape, dtype: the original parameter's.
        shard: the flat shard holding it.
        offset: where the part starts in the shard.
        start, stop: the flat element range held (``start == stop`` when none is).
        fresh: the shard was allocated for shardinit to fill (not filled yet).
        on_filled: called after :meth:`fill` (marks the region filled).
    """

    name: str
    owner: nn.Module
    attr: str
    global_shape: tuple[int, ...]
    dtype: torch.dtype
    shard: FlatShard
    offset: int
    start: int
    stop: int
    fresh: bool
    on_filled: Callable[[], None] = field(default=lambda: None)

    @property
    def holders(self) -> Sequence[tuple[nn.Module, str]]:
        return [(self.owner, self.attr)]

    def is_filled(self) -> bool:
        tensor = self.shard.tensor
        return not self.fresh and tensor.numel() > 0 and not tensor.is_meta

    def allocate(self, device: torch.device) -> None:
        # The wrapper allocated the shard (fsdp1_param_init_fn); only padding is left.
        del device
        self.shard.clear_once()

    def fill(self, values: Values, writer: Writer) -> None:
        if self.stop > self.start:
            out = self.shard.tensor.data[self.offset : self.offset + self.stop - self.start]
            values.write_flat(writer, self.start, self.stop, out)
        self.on_filled()
