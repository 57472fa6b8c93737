"""``materialize``'s plan: one record per parameter (where its values go, what they are)
and per meta buffer, built and checked before any tensor is allocated, then carried out
phase by phase (allocate and fill, buffers).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import torch
from torch import nn

from .._caches import BoundedMap
from .._fill import DeferredFills
from .._names import (
    BufferHolder,
    ModuleWalk,
    buffer_holders,
    holder_names,
    listing,
    qualified,
    refuse_lazy,
    walk_slots,
)
from .._program import CapturedOp, ParamRecord, base_ops
from .._program.cannot import Cannot
from .._torch_compat import apply_to_tensors, is_flat_param
from .._validate import check_name
from ..errors import ShardInitError
from ..init import Initializer, zeros
from ..shard import writer
from ..spec import ParamSpec
from . import fsdp1, zero3
from .capture import (
    CapturedInit,
    ConstructorValue,
    buffer_tensor,
    constructor_buffer,
    constructor_record,
    copied_any,
    copy_source,
    write_buffers,
)
from .defaults import DefaultInit, default_buffer_value, parent_overrides
from .offload import offloaded_devices
from .placements import full_runs, is_dtensor, local_runs_of
from .rules import RuleKey, RuleList, choose_init, first_rule
from .targets import LocalTarget, Target, Values, empty_like_on

#: ``buffer_init(module, name, tensor)`` fills ``tensor`` (already allocated) in place.
BufferInit = Callable[[nn.Module, str, torch.Tensor], None]


def _no_buffers(module: nn.Module) -> set[str]:
    del module
    return set()


def _nothing(module: nn.Module) -> None:
    del module


@dataclass(frozen=True)
class RegionSource:
    """A sharding wrapper whose parameters materialize finds in the model itself.

    Attributes:
        targets: the targets of the parameters the wrapper holds in its own layout, and
            the ``(id(module), attr)`` holders it manages (the generic walk skips them),
            from the model and its walk.
        unset_buffers: a module's buffers that the wrapper allocated off meta and left
            unset (planned like meta buffers).
        buffers_set: called once a module's planned buffers are set.
    """

    targets: Callable[[nn.Module, ModuleWalk], tuple[Sequence[Target], set[tuple[int, str]]]]
    unset_buffers: Callable[[nn.Module], set[str]] = _no_buffers
    buffers_set: Callable[[nn.Module], None] = _nothing


#: materialize's region sources: FSDP1's flat shards and DeepSpeed ZeRO-3's padded flat
#: partitions. (Megatron's partitions need the model's config for their presets: its
#: own entry point builds them, see :func:`shardinit.megatron.materialize`.)
REGION_SOURCES: tuple[RegionSource, ...] = (
    RegionSource(fsdp1.fsdp1_targets, fsdp1.unset_buffers, fsdp1.forget_unset_buffers),
    RegionSource(zero3.zero3_targets),
)


@dataclass(frozen=True)
class ParamPlan:
    """One parameter: where this rank's part of it goes and what its values are."""

    target: Target
    values: Values


@dataclass(frozen=True)
class BufferPlan:
    """One buffer left on the meta device: its constant default (None if unknown),
    whether init_fn computes it (then it gets the value computed during the capture),
    and its constructor's value (:func:`shardinit.record_constructors`), which comes
    before the default."""

    holder: BufferHolder
    default: float | None
    computed: bool
    made: ConstructorValue | None = None

    def known(self) -> bool:
        """Whether materialize knows the value without ``buffer_init``."""
        if self.computed or self.holder.tensor.numel() == 0:
            return True  # computed at capture, or no element to fill (``torch.empty(0)``)
        if self.made is not None:
            return self.made.computable
        return self.default is not None


@dataclass(frozen=True)
class Plan:
    """Everything materialize will do, found before anything is allocated.

    Attributes:
        params: one plan per parameter that gets values.
        buffers: one plan per buffer left on meta.
        missing: parameters with no rule and no known default (or preset).
        missing_error: the choice hook's error message for them.
        retied: tie groups that differ between the model and the module init_fn was
            captured on (see :func:`tie_differences`).
        shadowed: parameters init_fn sets completely although a rule matches them.
        unmatched: names of captured records that match no parameter.
        captured: init_fn's capture, if any.
        write_computed: whether the buffer values init_fn computed are written.
    """

    params: list[ParamPlan]
    buffers: list[BufferPlan]
    missing: list[str]
    missing_error: str
    retied: list[str]
    shadowed: list[str]
    unmatched: list[str]
    captured: CapturedInit | None
    write_computed: bool

    def check(self, *, overwrite: bool, buffer_init: BufferInit | None) -> None:
        """Raises for everything that would go wrong later; warns about shadowed rules."""
        if self.unmatched:
            raise ShardInitError(
                f"materialize: init_fn's capture has {len(self.unmatched)} record(s) that "
                f"match no parameter of the model: {listing(self.unmatched)}. Capture the "
                "same model that is materialized (canonical names must agree)"
            )
        if self.retied:
            raise ShardInitError(
                f"materialize: {len(self.retied)} parameter(s) are tied differently than "
                f"in the model init_fn was captured on: {listing(self.retied)}. A model "
                "built without its library's post-init (e.g. under transformers' "
                "no_init_weights) is not tied yet: tie it as the library does before "
                "materialize (transformers: model.tie_weights(); shardinit.deepspeed.Init "
                "does it for transformers models), or capture a copy tied the same way"
            )
        if self.missing:
            raise ShardInitError(self.missing_error)
        if self.shadowed:
            # Not an error: the outcome is defined (init_fn wins, as documented), but a
            # rule that can never apply is most likely a mistake in the caller's setup.
            warnings.warn(
                f"materialize: init_fn sets {len(self.shadowed)} parameter(s) completely, "
                f"so the rules matching them are not used: {listing(self.shadowed)}",
                UserWarning,
                stacklevel=4,  # materialize's caller (via carry_out)
            )
        filled = [] if overwrite else [p for p in self.params if p.target.is_filled()]
        stray = [p for p in filled if _made_off_meta(p, self.params)]
        filled = [p for p in filled if p not in stray or not self.init_fn_sets(p)]
        if filled:
            raise ShardInitError(
                f"materialize: {len(filled)} parameter(s) are already materialized: "
                f"{listing([p.target.name for p in filled])}. materialize fills "
                "meta-device models (and FSDP1 units allocated by "
                "shardinit.fsdp1_param_init_fn); pass overwrite=True to replace existing "
                f"values{_STRAY_HINT if any(p in stray for p in filled) else ''}"
            )
        unknown = [b for b in self.buffers if not b.known()]
        if unknown and buffer_init is None:
            _raise_uncomputable(unknown)
            names = [b.holder.name for b in unknown]
            raise ShardInitError(
                f"materialize: {len(names)} buffer(s) on the meta device have no known "
                f"default: {listing(names)}. Pass buffer_init=fn, called as "
                "fn(module, name, tensor) to fill each one in place"
            )

    def init_fn_sets(self, param: ParamPlan) -> bool:
        """Whether init_fn's capture writes every element of ``param``."""
        record = None if self.captured is None else self.captured.params.get(param.target.name)
        return record is not None and record.covers_all()

    def carry_out(
        self,
        root: nn.Module,
        *,
        overwrite: bool,
        buffer_init: BufferInit | None,
        device: torch.device | None,
        walk: ModuleWalk | None = None,
    ) -> None:
        """The phases after planning, for every region source: check (raises before
        anything is allocated), allocate, fill, buffers. Each target is allocated just
        before it is filled, so the core writes the first parameters while the next
        ones are allocated; the buffers are set while it writes the last ones, unless
        ``buffer_init`` (the user's code, which may read parameters) sets some.
        ``walk``: ``root``'s, where the caller has it."""
        _refuse_shared_storage(ModuleWalk(root) if walk is None else walk)
        self.check(overwrite=overwrite, buffer_init=buffer_init)
        self.allocate_dtensors(root, device)
        plain_device = device if device is not None else torch.device("cpu")
        with DeferredFills() as deferred:
            self.allocate_and_fill(plain_device, deferred)
            if buffer_init is None:
                self.allocate_buffers(plain_device)
                self.fill_buffers(root, buffer_init)
        self._bump_versions()
        if buffer_init is not None:
            self.allocate_buffers(plain_device)
            self.fill_buffers(root, buffer_init)

    def allocate_dtensors(self, root: nn.Module, device: torch.device | None) -> None:
        """Gives every DTensor shard still on meta storage on ``device`` (default the
        mesh's device), in one pass over the root (the rest is allocated per target)."""
        pending = [t for p in self.params if (t := p.target.module_pass_tensor()) is not None]
        if pending:
            mesh_device = _dtensor_device(pending[0], device)
            # FSDP2's CPU offload: those shards on the CPU (raises before allocating).
            offloaded = offloaded_devices(root, device)
            # The parameters of planned targets (materialize(only=...) plans some only).
            planned = {id(t) for p in self.params if (t := p.target.planned_tensor()) is not None}

            def allocate(tensor: torch.Tensor) -> torch.Tensor:
                # A parameter with no plan (materialize(only=...)) stays as it is.
                unplanned = isinstance(tensor, nn.Parameter) and id(tensor) not in planned
                if not tensor.is_meta or unplanned:
                    return tensor
                return torch.empty_like(tensor, device=offloaded.get(id(tensor), mesh_device))

            # One pass over the root, not per parameter: FSDP2 re-registers its sharded
            # parameters in its Module._apply override.
            apply_to_tensors(root, allocate)
            for plan in self.params:
                plan.target.after_module_pass()

    def allocate_buffers(self, device: torch.device) -> None:
        """Gives every buffer still on meta storage on ``device``."""
        for buffer in self.buffers:
            module, attr = buffer.holder.module, buffer.holder.attr
            current = module._buffers[attr]
            assert current is not None
            if current.is_meta:
                allocated = empty_like_on(current, device)
                # Its attributes, as eager keeps them (shardinit's own notes stay behind).
                allocated.__dict__.update(
                    {k: v for k, v in vars(current).items() if not k.startswith("_shardinit")}
                )
                module._buffers[attr] = allocated

    def allocate_and_fill(self, device: torch.device, deferred: DeferredFills) -> None:
        """Gives each target still on meta storage on ``device``, then writes its values,
        leaving fills to ``deferred`` (they are all written when its block ends)."""
        # Fills into CPU tensors are written by the core while the next parameters are
        # allocated and planned (no target reads what it wrote before the block ends,
        # where they are all written; a target's allocation touches no other's memory).
        with torch.no_grad():
            fills = writer(deferred)
            for plan in self.params:
                plan.target.allocate(device)
                plan.target.fill(plan.values, fills)

    def _bump_versions(self) -> None:
        """Bumps the version of every parameter filled, once they are all written."""
        # The targets write through .data (a tensor with its own version counter): bump
        # each parameter's, as torch's in-place init does, so that a graph that saved one
        # (materialize with overwrite=True on a model in use) refuses to backward.
        held: dict[int, torch.Tensor] = {}  # a tied parameter once
        for plan in self.params:
            for owner, attr in plan.target.holders:
                tensor = owner._parameters.get(attr)
                if tensor is not None:
                    held[id(tensor)] = tensor
        torch.autograd.graph.increment_version(list(held.values()))

    def fill_buffers(self, root: nn.Module, buffer_init: BufferInit | None) -> None:
        """Sets each meta buffer to its default or by ``buffer_init``; then writes the
        values init_fn computed during the capture."""
        with torch.no_grad():
            for buffer in self.buffers:
                module, attr = buffer.holder.module, buffer.holder.attr
                value = module._buffers[attr]
                assert value is not None
                if buffer.computed or value.numel() == 0:
                    continue  # written below from the capture, or nothing to write
                if buffer.known() and buffer.made is not None:
                    made = buffer_tensor(buffer.made, buffer.holder.name, value.shape, value.dtype)
                    value.copy_(made)
                elif buffer.default is not None:
                    value.fill_(buffer.default)
                else:
                    assert buffer_init is not None
                    buffer_init(module, attr, value)
                for source in REGION_SOURCES:
                    source.buffers_set(module)
        if self.captured is not None and self.write_computed and self.captured.buffers:
            write_buffers(root, self.captured)  # (a walk of the model: only when some are)


def _dtensor_device(tensor: torch.Tensor, device: torch.device | None) -> torch.device:
    if device is not None:
        return device
    assert is_dtensor(tensor)
    device_type = tensor.device_mesh.device_type
    if device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device_type)


# --------------------------------------------------------------------------- planning


def region_targets(
    root: nn.Module, walk: ModuleWalk | None = None
) -> tuple[list[Target], set[tuple[int, str]]]:
    """The targets of every region source, and the holders they manage. ``walk``:
    ``root``'s, where the caller has it."""
    walk = ModuleWalk(root) if walk is None else walk
    targets: list[Target] = []
    managed: set[tuple[int, str]] = set()
    for source in REGION_SOURCES:
        found, held = source.targets(root, walk)
        targets += found
        managed |= held
    return targets, managed


def local_targets(
    root: nn.Module, managed: set[tuple[int, str]], walk: ModuleWalk | None = None
) -> list[LocalTarget]:
    """A target for every parameter no region source manages: DTensor shards and plain
    parameters, tied ones once. ``walk``: ``root``'s, where the caller has it.

    Raises:
        ShardInitError: a DTensor layout that is not supported; uninitialized lazy
            parameters (``nn.LazyLinear`` before its first forward), whose shape is unknown.
    """

    def skip(module: nn.Module, attr: str, param: nn.Parameter) -> bool:
        # A region source's flat parameter is filled through that source's targets.
        return (id(module), attr) in managed or is_flat_param(param)

    walk = ModuleWalk(root) if walk is None else walk
    if managed:
        slots = walk_slots(walk.pairs, skip=skip)
    else:  # no holder skipped but flat parameters, whose holders all are: the walk's slots
        slots = [slot for slot in walk.slots if not is_flat_param(slot.param)]
    refuse_lazy(slots, "materialize")
    return [
        LocalTarget(
            slot,
            (
                local_runs_of(slot.param, name=slot.name)
                if is_dtensor(slot.param)
                else full_runs(slot.param.shape)
            ),
        )
        for slot in slots
    ]


class Chooser(Protocol):
    """A choice hook: where a parameter's values come from when init_fn's capture does
    not set all of it. :class:`RulesAndDefaults` serves ``materialize``; a wrapper whose
    parameters have other presets (Megatron's recorded ``init_method`` and config) adds
    one class with these methods."""

    def rule_for(self, target: Target) -> RuleKey | None:
        """The key of the first rule matching ``target``, or None."""
        ...

    def values(self, target: Target, record: ParamRecord | None, seed: int) -> Values | None:
        """``target``'s values (after what ``record`` covers, if any), or None if
        nothing is known for it.

        Raises:
            ShardInitError: an initializer that does not fit the parameter.
        """
        ...

    def missing_error(self, missing: Sequence[str]) -> str:
        """The error message for parameters without values (``"name (OwnerType)"``)."""
        ...


class RulesAndDefaults:
    """``materialize``'s choice: the first matching rule, else the value the constructor
    computed (recorded by :func:`shardinit.record_constructors`), else a parent module's
    override, else torch.nn's default for the owning module's type. ``walk``: ``root``'s,
    where the caller has it."""

    def __init__(
        self,
        rules: RuleList,
        root: nn.Module,
        targets: Sequence[Target],
        walk: ModuleWalk | None = None,
    ) -> None:
        self.rules = rules
        self.root = root
        self.targets = targets
        self.walk = walk

    @cached_property
    def shapes(self) -> dict[int, dict[str, tuple[int, ...]]]:
        """Global parameter shapes per module: a bias bound depends on the weight's
        fan-in. Made at the first default asked for (init_fn or the constructors'
        records set most models' parameters: then never)."""
        shapes: dict[int, dict[str, tuple[int, ...]]] = {}
        for target in self.targets:
            for module, attr in target.holders:
                shapes.setdefault(id(module), {})[attr] = target.global_shape
        return shapes

    @cached_property
    def overrides(self) -> Mapping[tuple[int, str], DefaultInit]:
        """The parent modules' overrides of the defaults (a walk of the model), made at
        the first default asked for, during planning: the model is as it was built."""
        return parent_overrides(self.root, None if self.walk is None else self.walk.modules)

    def rule_for(self, target: Target) -> RuleKey | None:
        owner, attr = target.holders[0]
        return first_rule(self.rules, target.name, owner, attr)

    def values(self, target: Target, record: ParamRecord | None, seed: int) -> Values | None:
        # The order: a rule, then the constructor's recorded value, then the defaults.
        if self.rule_for(target) is None:
            made = _constructed(target, record, seed)
            if made is not None:
                return made
        owner, attr = target.holders[0]
        choice = choose_init(self.rules, target.name, owner, attr, self.shapes, self.overrides)
        return None if choice is None else _values(target, choice, record, seed)

    def missing_error(self, missing: Sequence[str]) -> str:
        return (
            f"materialize: no rule and no torch.nn default initializer for "
            f"{len(missing)} parameter(s): {listing(missing)}. Pass rules "
            "(ordered, first match wins), e.g. rules={'blocks.*.scale': "
            "shardinit.init.ones(), MyModule: shardinit.init.normal(0.0, 0.02), "
            "(MyModule, 'bias'): shardinit.init.zeros()}"
        )


#: Why a CPU parameter of a meta model is refused, and when it is not.
_STRAY_HINT = (
    ". A parameter off meta in a model built on meta (torch.Tensor(n) and the other "
    "legacy constructors ignore torch.device('meta')) is filled, as eager init code "
    "fills it, when init_fn writes all of it; else its eager value is the "
    "constructor's (uninitialized memory, or torch's draw)"
)


def _made_off_meta(param: ParamPlan, params: Sequence[ParamPlan]) -> bool:
    """Whether ``param`` holds values in a model whose other parameters are on meta:
    made in a constructor by a legacy ``torch.Tensor(n)``, which ignores the default
    device (transformers' ``masked_spec_embed``, ``level_embed``; on the CPU, or a
    DTensor after ``fully_shard`` moved it to the mesh). init_fn that writes all of it
    gives it eager's values: the constructor's are overwritten there too."""
    tensor = param.target.planned_tensor()
    if tensor is None or is_flat_param(tensor):
        return False  # a wrapper's own layout (FSDP1, ZeRO-3): its units say what is filled
    return any(not other.target.is_filled() for other in params)


def make_plan(
    root: nn.Module,
    targets: Sequence[Target],
    *,
    seed: int,
    chooser: Chooser,
    captured: CapturedInit | None,
    write_computed: bool,
    left_alone: frozenset[str] = frozenset(),
    copies: Mapping[str, Target] | None = None,
    captured_here: bool = False,
    walk: ModuleWalk | None = None,
) -> Plan:
    """One plan per parameter of ``targets`` (init_fn's capture, then ``chooser``) and per
    meta buffer. Nothing is allocated or written. ``left_alone``: the names of the
    model's other parameters (``materialize(only=...)``), which get no plan; init_fn's
    records of them are not used. ``copies`` (:func:`copy_sources`): a copy is planned
    as its source (the source's constructor value, rule or default), then init_fn's
    writes to the copy itself, all named by the source's canonical name; unless a rule
    other than the source's matches the copy. ``captured_here``: ``captured`` was taken
    on ``root`` by the caller just before, with nothing run since: its ties are
    ``root``'s (``holder_names`` of the same model, read at the capture's end), so they
    are not walked again to compare. ``walk``: ``root``'s, where the caller has it.

    Raises:
        ShardInitError: a capture that does not fit its parameter, or an initializer
            that does not fit (see :class:`~shardinit.ParamSpec`).
    """
    params: list[ParamPlan] = []
    missing: list[str] = []
    shadowed: list[str] = []
    copies = copies or {}
    records = captured.params if captured is not None else {}
    matched: set[str] = set()  # the names of records a target matches
    for target in targets:
        name = target.name
        source = copies.get(name)
        if source is not None and chooser.rule_for(target) != chooser.rule_for(source):
            source = None  # a rule of the copy's own says what it holds
        record = records.get(name)
        if record is not None:
            matched.add(name)
            _check_record(record, target)
            if source is not None:  # values are named by the source: equal name, equal values
                record = dataclasses.replace(record, name=source.name)
            if record.covers_all():
                key = chooser.rule_for(target)
                shadowed += [] if key is None else [f"{target.name} (rule {key!r})"]
                params.append(ParamPlan(target, Values(record, seed)))
                continue
        values = chooser.values(target if source is None else source, record, seed)
        if values is None and 0 in target.global_shape:
            # No element to fill (init_fn's normal_ on it recorded nothing): every
            # initializer gives the same empty tensor, so it needs no rule.
            empty = base_ops(zeros(), target.global_shape)
            values = Values(
                ParamRecord(target.name, target.global_shape, target.dtype, empty), seed
            )
        if values is None:
            detail = ""
            try:
                if record is not None:
                    record.check_views_set_all()
            except Cannot as why:
                detail = f", init_fn writes part of it: {why}"
            missing.append(f"{target.name} ({type(target.holders[0][0]).__name__}{detail})")
            continue
        params.append(ParamPlan(target, values))
    unmatched: list[str] = []
    if len(matched) < len(records):
        names = {target.name for target in targets} | left_alone
        unmatched = [name for name in records if name not in names]
    computed = set(captured.buffers) if captured is not None and write_computed else set()
    walk = ModuleWalk(root) if walk is None else walk
    retied: list[str] = []
    if captured is not None and not captured_here:
        retied = tie_differences(root, captured.aliases, walk)
    return Plan(
        params,
        _buffer_plans(walk, computed),
        missing,
        chooser.missing_error(missing) if missing else "",
        retied,
        shadowed,
        unmatched,
        captured,
        write_computed,
    )


def copy_sources(targets: Sequence[Target]) -> dict[str, Target]:
    """``{copy's name: source's target}`` for the parameters deep-copied from another
    parameter of the same model while it was built inside
    :func:`shardinit.record_constructors` (same shape and dtype; a copy of a copy
    names the first source)."""
    if not copied_any():  # most models: no copy recorded, no weak lookup per parameter
        return {}
    by_holder = {(id(m), attr): t for t in targets for m, attr in t.holders}

    def source_of(target: Target) -> Target | None:
        module, attr = target.holders[0]
        found = copy_source(module, attr)
        source = None if found is None else by_holder.get((id(found[0]), found[1]))
        if source is None or source is target:
            return None
        alike = (source.global_shape, source.dtype) == (target.global_shape, target.dtype)
        return source if alike else None

    sources: dict[str, Target] = {}
    for target in targets:
        source = source_of(target)
        if source is None:  # most parameters: no set of the names seen
            continue
        seen = {target.name}
        while source is not None and source.name not in seen:
            seen.add(source.name)
            sources[target.name] = source
            source = source_of(source)
    return sources


def tie_differences(
    root: nn.Module, captured: Mapping[str, str], walk: ModuleWalk | None = None
) -> list[str]:
    """Tie groups that differ between ``root`` and the module a capture was taken on
    (``captured``: its :func:`~shardinit._names.holder_names`), over the names both
    have, e.g. ``"transformer.wte.weight = lm_head.weight (tied in the capture, not in
    the model)"``. Holders of flat parameters (FSDP1) are not compared: their original
    parameters are hidden. ``walk``: ``root``'s, where the caller has it."""
    model = holder_names(root, skip=_holds_flat_param, walk=walk)
    common = [name for name in captured if name in model]
    found: list[str] = []
    directions = (
        (captured, model, "tied in the capture, not in the model"),
        (model, captured, "tied in the model, not in the capture"),
    )
    for ours, theirs, how in directions:
        if all(ours[name] == name for name in common):
            continue  # every name holds its own parameter here: no group of two to split
        groups: dict[str, list[str]] = {}
        for name in common:
            groups.setdefault(ours[name], []).append(name)
        for names in groups.values():
            if len({theirs[name] for name in names}) > 1:
                found.append(f"{' = '.join(names)} ({how})")
    return found


def _holds_flat_param(module: nn.Module, attr: str, param: nn.Parameter) -> bool:
    """A holder of FSDP1's flat parameter (a :data:`~shardinit._names.SkipHolder`)."""
    return is_flat_param(param)


def _constructed(target: Target, record: ParamRecord | None, seed: int) -> Values | None:
    """The constructor's value (:func:`shardinit.record_constructors`), if one was
    recorded: before init_fn's record (which it starts, where init_fn covers part)."""
    owner, attr = target.holders[0]
    made = constructor_record(owner, attr, target.name, target.global_shape, target.dtype)
    if made is None:
        return None
    return Values(made if record is None else _after(made.ops, record), seed)


def _values(target: Target, choice: DefaultInit, record: ParamRecord | None, seed: int) -> Values:
    """The rule's or default's one-source program (then its zero rows), with init_fn's
    record after it where init_fn covers part of the parameter."""
    shape = target.global_shape
    _check_fits(target.name, shape, target.dtype, choice.init, seed)
    start = base_ops(choice.init, shape, choice.zero_rows)
    if record is None:
        return Values(ParamRecord(target.name, shape, target.dtype, start), seed)
    return Values(_after(start, record), seed)


def _check_fits(
    name: str, shape: tuple[int, ...], dtype: torch.dtype, init: Initializer, seed: int
) -> None:
    """Raises where ``init`` does not fit the parameter (:class:`~shardinit.ParamSpec`'s
    checks). What passed is remembered by all but the name (checked on its own), which
    the other checks read for their messages only: a model's many parameters of one
    shape and default cost one check."""
    key: tuple[object, ...] | None = None
    try:
        known = _FITTING.get((shape, dtype, init, seed)) is not None
        key = (shape, dtype, init, seed)
    except TypeError:  # an initializer of unhashable fields: checked each time
        known = False
    try:
        if known:
            check_name("name", name)
        else:
            ParamSpec(name, shape, dtype, init, seed=seed)
    except ShardInitError as error:
        raise ShardInitError(f"parameter {name}: {error}") from None
    if key is not None and not known:
        _FITTING.put(key, True)


#: ``(shape, dtype, initializer, seed)`` that :func:`_check_fits` saw fit.
_FITTING: BoundedMap[tuple[object, ...], bool] = BoundedMap()


def _after(start: tuple[CapturedOp, ...], record: ParamRecord) -> ParamRecord:
    """``record`` with the operations ``start`` in front of its own (what the parameter
    held before them)."""
    if not start:
        return record
    return ParamRecord(record.name, record.shape, record.dtype, (*start, *record.ops))


def _check_record(record: ParamRecord, target: Target) -> None:
    """A captured record must describe the parameter it is replayed into (a CapturedInit
    passed in may come from another model)."""
    if tuple(record.shape) != target.global_shape or record.dtype != target.dtype:
        raise ShardInitError(
            f"materialize: init_fn's capture of {record.name} is {tuple(record.shape)} "
            f"{record.dtype}, but the parameter is {target.global_shape} {target.dtype}; "
            "capture the same model (same shapes and dtypes) that is materialized"
        )


def _buffer_plans(walk: ModuleWalk, computed: set[str]) -> list[BufferPlan]:
    plans: list[BufferPlan] = []
    seen: set[int] = set()
    for holder in buffer_holders(walk.root, walk):
        if id(holder.tensor) in seen:
            continue
        if not holder.tensor.is_meta and not any(
            holder.attr in source.unset_buffers(holder.module) for source in REGION_SOURCES
        ):
            continue  # set already (a meta buffer is planned whatever the sources say)
        seen.add(id(holder.tensor))
        default = default_buffer_value(holder.module, holder.attr)
        made = constructor_buffer(holder.module, holder.attr)
        plans.append(BufferPlan(holder, default, holder.name in computed, made))
    return plans


def _raise_uncomputable(unknown: Sequence[BufferPlan]) -> None:
    """Raises the error for the first buffer whose constructor computed what cannot be
    replayed (naming it and the line that registered it), if any."""
    for buffer in unknown:
        if buffer.made is not None:
            shape, dtype = tuple(buffer.holder.tensor.shape), buffer.holder.tensor.dtype
            buffer_tensor(buffer.made, buffer.holder.name, shape, dtype)  # raises


def _refuse_shared_storage(walk: ModuleWalk) -> None:
    """Raises when two distinct meta parameters or buffers view one storage (built as
    views of one tensor, ``p = Parameter(base[:4]); q = Parameter(base[4:])``): in
    eager torch they share memory, a write to one shows in the other, where
    materialize gives each its own. A parameter held twice (tied) is one tensor, and
    fine."""
    seen: dict[int, tuple[str, str, torch.Tensor, object]] = {}
    visited: set[int] = set()
    # named_parameters() then named_buffers(), each tensor once, from the one walk of
    # the modules (named_parameters' own costs several microseconds per parameter).
    for registry in ("_parameters", "_buffers"):
        for path, module in walk.distinct:
            for attr, tensor in getattr(module, registry).items():
                if tensor is None or id(tensor) in visited:
                    continue
                visited.add(id(tensor))
                if not tensor.is_meta or is_dtensor(tensor):
                    continue
                storage = tensor.untyped_storage()  # held in seen: its id is not reused
                first = seen.setdefault(id(storage), (path, attr, tensor, storage))
                if first[2] is not tensor:
                    raise ShardInitError(
                        f"materialize: '{qualified(first[0], first[1])}' and "
                        f"'{qualified(path, attr)}' are views of one meta storage: in "
                        "eager torch they share memory (a write to one shows in the "
                        "other), which materialize, allocating each on its own, would "
                        "not keep. Make each its own tensor, or tie them as one Parameter"
                    )
