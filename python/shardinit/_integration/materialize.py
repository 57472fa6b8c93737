"""``materialize``: fill every parameter of a meta-device or sharded model shard-locally.

Each rank generates exactly the elements its shards hold (DTensor local regions from the
placements, FSDP1 flat-shard ranges, or whole tensors for plain parameters) from stream
format v1, so the gathered model is bit-identical for every world size and layout, and no
rank ever builds a full copy of a sharded parameter. There is no communication.
"""

from __future__ import annotations

import fnmatch
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard

import torch
from torch import nn

from .._names import canonical_name
from .._validate import check_seed
from ..capture import CapturedInit, ParamRecord, capture_init
from ..errors import ShardInitError
from ..init import Initializer, zeros
from ..replay import base_ops, recompute_buffers, replay_flat, replay_runs
from ..shard import _resolve_device, init_box, init_flat
from ..spec import ParamSpec
from . import fsdp1
from .defaults import DefaultInit, default_buffer_value, default_init, parent_overrides
from .placements import Run, local_boxes, local_runs_of

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

__all__ = ["BufferInit", "RuleKey", "Rules", "canonical_name", "materialize"]

#: A rule's key: a glob over the canonical name (``"layers.*.wo.weight"``), a module type
#: (every parameter of such modules), or ``(module type, attribute glob)`` such as
#: ``(nn.Linear, "bias")``.
RuleKey: TypeAlias = str | type[nn.Module] | tuple[type[nn.Module], str]
#: Ordered rules: first match wins.
Rules: TypeAlias = Mapping[RuleKey, Initializer] | Iterable[tuple[RuleKey, Initializer]]
#: ``buffer_init(module, name, tensor)`` fills ``tensor`` (already allocated) in place.
BufferInit: TypeAlias = Callable[[nn.Module, str, torch.Tensor], None]

_MAX_LISTED = 20


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return shown + (f", ... ({more} more)" if more > 0 else "")


# --------------------------------------------------------------------------- rules


def _check_rules(rules: Rules | None) -> list[tuple[RuleKey, Initializer]]:
    if rules is None:
        return []
    if isinstance(rules, Mapping):
        items = list(rules.items())
    elif isinstance(rules, Iterable) and not isinstance(rules, (str, bytes)):
        items = list(rules)
    else:
        raise TypeError(f"rules must be a mapping or a sequence of pairs, got {rules!r}")
    checked: list[tuple[RuleKey, Initializer]] = []
    for index, item in enumerate(items):
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"rules[{index}] must be a (key, initializer) pair, got {item!r}")
        key, initializer = item
        valid_key = (
            isinstance(key, str)
            or (isinstance(key, type) and issubclass(key, nn.Module))
            or (
                isinstance(key, tuple)
                and len(key) == 2
                and isinstance(key[0], type)
                and issubclass(key[0], nn.Module)
                and isinstance(key[1], str)
            )
        )
        if not valid_key:
            raise TypeError(
                f"rules key {key!r} must be a name glob (str), an nn.Module subclass, or "
                "(nn.Module subclass, attribute glob)"
            )
        if not isinstance(initializer, Initializer):
            raise TypeError(
                f"rules[{key!r}] must be a shardinit.init initializer, got "
                f"{type(initializer).__name__} {initializer!r}"
            )
        checked.append((key, initializer))
    return checked


def _rule_matches(key: RuleKey, name: str, owner: nn.Module, attr: str) -> bool:
    if isinstance(key, str):
        return fnmatch.fnmatchcase(name, key)
    if isinstance(key, tuple):
        module_type, attr_glob = key
        return isinstance(owner, module_type) and fnmatch.fnmatchcase(attr, attr_glob)
    return isinstance(owner, key)


def _shadowed_rule(
    name: str, owner: nn.Module, attr: str, rules: Sequence[tuple[RuleKey, Initializer]]
) -> list[str]:
    """``["name (rule key)"]`` for the first rule matching a parameter that init_fn sets
    completely (so the rule can never apply), else ``[]``."""
    for key, _ in rules:
        if _rule_matches(key, name, owner, attr):
            return [f"{name} (rule {key!r})"]
    return []


def _choose_init(
    name: str,
    owner: nn.Module,
    attr: str,
    shapes: Mapping[str, tuple[int, ...]],
    rules: Sequence[tuple[RuleKey, Initializer]],
    overrides: Mapping[tuple[int, str], DefaultInit],
) -> DefaultInit | None:
    for key, initializer in rules:
        if _rule_matches(key, name, owner, attr):
            return DefaultInit(initializer)
    override = overrides.get((id(owner), attr))
    if override is not None:
        return override
    return default_init(owner, attr, shapes)


def _check_record(record: ParamRecord, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """A captured record must describe the parameter it is replayed into (a CapturedInit
    passed in may come from another model)."""
    if tuple(record.shape) != tuple(shape) or record.dtype != dtype:
        raise ShardInitError(
            f"materialize: init_fn's capture of {record.name} is {tuple(record.shape)} "
            f"{record.dtype}, but the parameter is {tuple(shape)} {dtype}; capture the "
            "same model (same shapes and dtypes) that is materialized"
        )


def _make_spec(
    name: str, shape: tuple[int, ...], dtype: torch.dtype, choice: DefaultInit, seed: int
) -> ParamSpec:
    try:
        return ParamSpec(name, shape, dtype, choice.init, seed=seed)
    except ShardInitError as error:
        raise ShardInitError(f"parameter {name}: {error}") from None


# --------------------------------------------------------------------------- collection


@dataclass
class _Slot:
    """One distinct parameter of the generic (non-FSDP1) path."""

    name: str
    owners: list[tuple[nn.Module, str]]

    def tensor(self) -> torch.Tensor:
        module, attr = self.owners[0]
        param = module._parameters[attr]
        assert param is not None
        return param


@dataclass
class _Plan:
    slot: _Slot
    spec: ParamSpec
    choice: DefaultInit
    runs: list[list[Run]]
    is_dtensor: bool
    # What init_fn did to it (capture_init); replayed instead of ``choice``, which is
    # then only what the parameter held before init_fn (if init_fn covers part of it).
    record: ParamRecord | None = None


@dataclass
class _BufferSlot:
    name: str
    module: nn.Module
    attr: str
    default: float | None


def _collect_slots(root: nn.Module, managed: set[tuple[int, str]]) -> list[_Slot]:
    # named_modules(remove_duplicate=False) visits parameters in named_parameters() order,
    # so the first path seen for a tied parameter is its canonical one (stream-format.md §5).
    slots: dict[int, _Slot] = {}
    for path, module in root.named_modules(remove_duplicate=False):
        for attr, param in module._parameters.items():
            if param is None or (id(module), attr) in managed:
                continue
            if getattr(param, "_is_flat_param", False):
                # FSDP1's flat parameter (a plain Parameter marked by torch's
                # FlatParameter metaclass): filled through fsdp1.flat_regions.
                continue
            slot = slots.get(id(param))
            if slot is None:
                raw = f"{path}.{attr}" if path else attr
                slots[id(param)] = _Slot(canonical_name(raw), [(module, attr)])
            elif (module, attr) not in [(m, a) for m, a in slot.owners]:
                slot.owners.append((module, attr))
    return list(slots.values())


def _collect_meta_buffers(root: nn.Module) -> list[_BufferSlot]:
    found: list[_BufferSlot] = []
    seen: set[int] = set()
    for path, module in root.named_modules():
        pending = fsdp1.peek_meta_buffers(module)
        for attr, buffer in module._buffers.items():
            if buffer is None or id(buffer) in seen:
                continue
            if buffer.is_meta or attr in pending:
                seen.add(id(buffer))
                raw = f"{path}.{attr}" if path else attr
                found.append(
                    _BufferSlot(
                        canonical_name(raw), module, attr, default_buffer_value(module, attr)
                    )
                )
    return found


def _is_dtensor(tensor: torch.Tensor) -> TypeGuard[DTensor]:
    # No tensor is a DTensor unless torch.distributed.tensor was imported: checking
    # sys.modules keeps that import (seconds) off the plain-model path.
    module = sys.modules.get("torch.distributed.tensor")
    dtensor_type = getattr(module, "DTensor", None)
    return dtensor_type is not None and isinstance(tensor, dtensor_type)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    if _is_dtensor(tensor):
        local = tensor.to_local()
        assert isinstance(local, torch.Tensor)
        return local
    return tensor


def _is_filled(tensor: torch.Tensor) -> bool:
    local = _local(tensor)
    return not local.is_meta and local.numel() > 0


def _full_runs(shape: Sequence[int]) -> list[list[Run]]:
    return [[(0, size)] if size > 0 else [] for size in shape]


# --------------------------------------------------------------------------- filling


def _fill_local(
    spec: ParamSpec, choice: DefaultInit, runs: list[list[Run]], local: torch.Tensor
) -> None:
    """Writes the region ``runs`` of ``spec`` into ``local`` (the tensor holding it)."""
    boxes = local_boxes(runs)
    if len(boxes) == 1 and local.is_contiguous():
        init_box(spec, boxes[0].global_box, out=local)
    else:
        for box in boxes:
            index = tuple(
                slice(begin, begin + stop - start)
                for begin, (start, stop) in zip(box.local_start, box.global_box, strict=True)
            )
            local[index].copy_(init_box(spec, box.global_box, device=local.device))
    for row in choice.zero_rows:
        position = 0
        for start, stop in runs[0] if runs else []:
            if start <= row < stop:
                local[position + row - start].zero_()
                break
            position += stop - start


def _fill_flat_region(region: fsdp1.FlatRegion, spec: ParamSpec, choice: DefaultInit) -> None:
    count = region.stop - region.start
    if count == 0:
        return
    out = region.flat_param.data[region.offset : region.offset + count]
    init_flat(spec, region.start, region.stop, out=out)
    row_size = 1
    for size in region.global_shape[1:]:
        row_size *= size
    for row in choice.zero_rows:
        low = max(row * row_size, region.start)
        high = min((row + 1) * row_size, region.stop)
        if low < high:
            out[low - region.start : high - region.start].zero_()


def _dtensor_device(tensor: DTensor, device: torch.device | None) -> torch.device:
    if device is not None:
        return device
    device_type = tensor.device_mesh.device_type
    if device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device_type)


def _allocate_meta(module: nn.Module, device: torch.device) -> None:
    """``to_empty`` for meta tensors only (others are kept). Goes through ``_apply`` so
    FSDP2 re-registers its sharded parameters (``FSDPModule._apply``)."""

    def allocate(tensor: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(tensor, device=device) if tensor.is_meta else tensor

    module._apply(allocate)  # type: ignore[no-untyped-call]


def _retie(slots: Sequence[_Slot]) -> None:
    # Module._apply gives each module its own new Parameter: tie secondary owners back.
    for slot in slots:
        primary = slot.tensor()
        for module, attr in slot.owners[1:]:
            if module._parameters[attr] is not primary:
                setattr(module, attr, primary)


# --------------------------------------------------------------------------- public


def materialize(
    module: nn.Module,
    *,
    seed: int,
    device: Any = None,
    rules: Rules | None = None,
    buffer_init: BufferInit | None = None,
    overwrite: bool = False,
    init_fn: Callable[[], object] | CapturedInit | None = None,
) -> nn.Module:
    """Fills every parameter of ``module`` with its stream-v1 values, shard-locally.

    * DTensor parameters (FSDP2 ``fully_shard``, tensor parallelism, both): each rank
      computes its local region from the mesh coordinate and placements and writes
      exactly that region into the local tensor, in place (the Parameter objects FSDP2
      holds stay the same). Local tensors on meta are allocated first (``to_empty``).
    * Plain parameters on the meta device: allocated whole on ``device`` as new
      Parameters (same ``requires_grad``; tied parameters stay tied) and filled.
    * FSDP1 ``FullyShardedDataParallel`` units (wrapped with
      ``param_init_fn=shardinit.fsdp1_param_init_fn``): each rank fills the element
      ranges of the original parameters its flat shard holds; padding is zero.

    The initializer of a parameter is the first matching rule, else the torch.nn
    default of its module type (bounds from the GLOBAL shape, as ``reset_parameters``).
    The canonical name (stream-format.md §5) drops wrapper segments; a tied parameter is
    named by its first name in ``named_parameters()`` order and initialized once. Buffers
    left on meta are set as torch sets them for normalization layers, else by
    ``buffer_init``.

    Args:
        module: the model (meta-device, FSDP2/TP-sharded, or FSDP1-wrapped).
        seed: the run's seed, an int in [0, 2^64).
        device: where meta tensors are allocated: default the CPU for plain parameters
            and the mesh's device for DTensors.
        rules: ordered ``{key: initializer}`` (or a sequence of pairs); keys are name
            globs, module types, or ``(module type, attribute glob)``; first match wins.
        buffer_init: ``buffer_init(module, name, tensor)`` fills a buffer that was on
            meta and has no known default (``tensor`` is already allocated).
        overwrite: also refill parameters that are already materialized.
        init_fn: the model's own init code (e.g. ``model.init_weights``), captured once
            on meta stand-ins (:func:`shardinit.capture_init`) before anything is
            allocated and replayed shard-locally: parameters it touches get exactly the
            operations it applied (rules and defaults only give what a parameter held
            before, where init_fn covers part of it); buffers it computes are
            recomputed by running it again for real after allocation. Or a
            ``CapturedInit`` from ``capture_init``: required for FSDP1, whose flat
            parameters hide the original ones, so capture on the meta model before
            wrapping. Buffers are recomputed only when it was captured on ``module``
            itself and not under FSDP1; otherwise they need defaults or
            ``buffer_init``. See docs/capturing-init.md.

    Returns:
        ``module``, filled in place.

    Raises:
        TypeError: arguments of the wrong type.
        ShardInitError: parameters with no rule and no known default, meta buffers with
            no default and no ``buffer_init``, already materialized parameters without
            ``overwrite=True``, unsupported placements or dtypes, tied parameters split
            across FSDP1 units.
        UnsupportedInitOpError: ``init_fn`` does something that cannot be replayed
            shard-locally (raised before anything is allocated).

    Example:
        >>> import torch, shardinit
        >>> from torch import nn
        >>> with torch.device("meta"):
        ...     model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
        >>> model = shardinit.materialize(model, seed=0)
        >>> spec = shardinit.ParamSpec("0.weight", (3, 4), torch.float32,
        ...                            shardinit.init.kaiming_uniform(a=5**0.5), seed=0)
        >>> torch.equal(model[0].weight, shardinit.full(spec))
        True
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    seed = check_seed(seed)
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, got {type(overwrite).__name__}")
    if buffer_init is not None and not callable(buffer_init):
        raise TypeError(f"buffer_init must be callable, got {type(buffer_init).__name__}")
    if init_fn is not None and not (callable(init_fn) or isinstance(init_fn, CapturedInit)):
        raise TypeError(f"init_fn must be callable or a CapturedInit, got {type(init_fn).__name__}")
    target = None if device is None else _resolve_device(device)
    rule_list = _check_rules(rules)
    overrides = parent_overrides(module)

    # 1. Plan everything (names, initializers, regions) before touching any tensor, so
    #    an error leaves the model as it was.
    regions = fsdp1.flat_regions(module, canonical_name) if fsdp1.uses_fsdp1(module) else []
    split = fsdp1.ties_split_across_units(module, canonical_name) if regions else []
    if split:
        raise ShardInitError(
            f"materialize: {len(split)} tied parameter(s) are split across FSDP1 units: "
            f"{_listing(split)}. FSDP1 supports a shared parameter only inside one unit "
            "(across units it is flattened more than once, and the tie is gone); wrap the "
            "modules that share it in one unit (leave them out of auto_wrap_policy), or "
            "with FSDP2 pass them to one fully_shard call"
        )
    managed = fsdp1.managed_params(module) if regions else set()
    slots = _collect_slots(module, managed)
    captured: CapturedInit | None = None
    if isinstance(init_fn, CapturedInit):
        captured = init_fn
    elif init_fn is not None:
        if regions:
            raise ShardInitError(
                "materialize: FSDP1's flat parameters hide the original ones from "
                "init_fn; capture it on the meta model before wrapping, then pass the "
                "result: captured = shardinit.capture_init(model, model.init_weights); "
                "materialize(fsdp_model, seed=..., init_fn=captured)"
            )
        captured = capture_init(module, init_fn)
    missing: list[str] = []
    shadowed: list[str] = []
    plans: list[_Plan] = []
    for slot in slots:
        owner, attr = slot.owners[0]
        tensor = slot.tensor()
        shapes = {
            name: tuple(param.shape)
            for name, param in owner._parameters.items()
            if param is not None
        }
        record = captured.params.get(slot.name) if captured is not None else None
        if record is not None:
            _check_record(record, tuple(tensor.shape), tensor.dtype)
        if record is not None and record.covers_all():
            choice: DefaultInit | None = DefaultInit(zeros())  # unused: replayed instead
            shadowed += _shadowed_rule(slot.name, owner, attr, rule_list)
        else:
            choice = _choose_init(slot.name, owner, attr, shapes, rule_list, overrides)
        if choice is None:
            missing.append(f"{slot.name} ({type(owner).__name__})")
            continue
        spec = _make_spec(slot.name, tuple(tensor.shape), tensor.dtype, choice, seed)
        is_dtensor = _is_dtensor(tensor)
        # _is_dtensor again, not is_dtensor: the TypeGuard narrows `tensor` for mypy.
        runs = (
            local_runs_of(tensor, name=slot.name) if _is_dtensor(tensor) else _full_runs(spec.shape)
        )
        plans.append(_Plan(slot, spec, choice, runs, is_dtensor, record))
    region_plans: list[tuple[fsdp1.FlatRegion, ParamSpec, DefaultInit, ParamRecord | None]] = []
    region_shapes: dict[int, dict[str, tuple[int, ...]]] = {}
    for region in regions:
        region_shapes.setdefault(id(region.module), {})[region.attr] = region.global_shape
    for region in regions:
        record = captured.params.get(region.name) if captured is not None else None
        if record is not None:
            _check_record(record, region.global_shape, region.flat_param.dtype)
        if record is not None and record.covers_all():
            choice = DefaultInit(zeros())  # unused: replayed instead
            shadowed += _shadowed_rule(region.name, region.module, region.attr, rule_list)
        else:
            choice = _choose_init(
                region.name,
                region.module,
                region.attr,
                region_shapes[id(region.module)],
                rule_list,
                overrides,
            )
        if choice is None:
            missing.append(f"{region.name} ({type(region.module).__name__})")
            continue
        spec = _make_spec(region.name, region.global_shape, region.flat_param.dtype, choice, seed)
        region_plans.append((region, spec, choice, record))
    if missing:
        raise ShardInitError(
            f"materialize: no rule and no torch.nn default initializer for {len(missing)} "
            f"parameter(s): {_listing(missing)}. Pass rules (ordered, first match wins), "
            "e.g. rules={'blocks.*.scale': shardinit.init.ones(), "
            "MyModule: shardinit.init.normal(0.0, 0.02), "
            "(MyModule, 'bias'): shardinit.init.zeros()}"
        )

    if shadowed:
        # Not an error: the outcome is defined (init_fn wins, as documented), but a rule
        # that can never apply is most likely a mistake in the caller's setup.
        warnings.warn(
            f"materialize: init_fn sets {len(shadowed)} parameter(s) completely, so the "
            f"rules matching them are not used: {_listing(shadowed)}",
            UserWarning,
            stacklevel=2,
        )

    if not overwrite:
        filled = [plan.spec.name for plan in plans if _is_filled(plan.slot.tensor())]
        filled += [
            region.name
            for region, _, _, _ in region_plans
            if not fsdp1.is_unfilled(region.module)
            and region.flat_param.numel() > 0
            and not region.flat_param.is_meta
        ]
        if filled:
            raise ShardInitError(
                f"materialize: {len(filled)} parameter(s) are already materialized: "
                f"{_listing(filled)}. materialize fills meta-device models (and FSDP1 "
                "units allocated by shardinit.fsdp1_param_init_fn); pass overwrite=True "
                "to replace existing values"
            )

    buffers = _collect_meta_buffers(module)
    # init_fn is rerun for the buffers it computes, if it computes them on this very
    # model and not under FSDP1 (whose flat parameters cannot be swapped for stand-ins);
    # otherwise those buffers need defaults or buffer_init like any other.
    rerun = captured is not None and not regions and captured.captured_on(module)
    computed = set(captured.buffers) if captured is not None and rerun else set()
    unknown = [b.name for b in buffers if b.default is None and b.name not in computed]
    if unknown and buffer_init is None:
        raise ShardInitError(
            f"materialize: {len(unknown)} buffer(s) on the meta device have no known "
            f"default: {_listing(unknown)}. Pass buffer_init=fn, called as "
            "fn(module, name, tensor) to fill each one in place"
        )

    # 2. Allocate meta tensors.
    meta_dtensors = [
        plan for plan in plans if plan.is_dtensor and _local(plan.slot.tensor()).is_meta
    ]
    if meta_dtensors:
        tensor = meta_dtensors[0].slot.tensor()
        assert _is_dtensor(tensor)
        _allocate_meta(module, _dtensor_device(tensor, target))
        _retie(slots)
    plain_device = target if target is not None else torch.device("cpu")
    for plan in plans:
        tensor = plan.slot.tensor()
        if tensor.is_meta and not plan.is_dtensor:
            new = nn.Parameter(
                torch.empty(tensor.shape, dtype=tensor.dtype, device=plain_device),
                requires_grad=tensor.requires_grad,
            )
            for owner, attr in plan.slot.owners:
                setattr(owner, attr, new)
    for buffer in buffers:
        current = buffer.module._buffers[buffer.attr]
        assert current is not None
        if current.is_meta:
            buffer.module._buffers[buffer.attr] = torch.empty_like(current, device=plain_device)

    # 3. Fill.
    with torch.no_grad():
        for plan in plans:
            if plan.record is not None:
                prior = (
                    ()
                    if plan.record.covers_all()
                    else base_ops(plan.choice.init, plan.spec.shape, plan.choice.zero_rows)
                )
                replay_runs(plan.record, seed, plan.runs, _local(plan.slot.tensor()), prior=prior)
                continue
            _fill_local(plan.spec, plan.choice, plan.runs, _local(plan.slot.tensor()))
        for flat_param in {id(region.flat_param): region.flat_param for region in regions}.values():
            flat_param.data.zero_()  # padding between and after parameters stays zero
        for region, spec, choice, record in region_plans:
            if record is None:
                _fill_flat_region(region, spec, choice)
                continue
            count = region.stop - region.start
            if count == 0:
                continue
            prior = (
                ()
                if record.covers_all()
                else base_ops(choice.init, region.global_shape, choice.zero_rows)
            )
            out = region.flat_param.data[region.offset : region.offset + count]
            replay_flat(record, seed, region.start, region.stop, out, prior=prior)
        for region in regions:
            fsdp1.mark_filled(region.module)
        for buffer in buffers:
            value = buffer.module._buffers[buffer.attr]
            assert value is not None
            if buffer.name in computed:
                continue  # recomputed below by running init_fn for real
            if buffer.default is not None:
                value.fill_(buffer.default)
            else:
                assert buffer_init is not None
                buffer_init(buffer.module, buffer.attr, value)
            fsdp1.take_meta_buffers(buffer.module)
    if captured is not None and rerun:
        recompute_buffers(module, captured)
    return module
