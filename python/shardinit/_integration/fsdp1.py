"""FSDP1 (``FullyShardedDataParallel``) support: allocate-only ``param_init_fn`` and the
per-rank flat-parameter regions.

FSDP1 flattens each wrapped unit's parameters into one ``FlatParameter`` and keeps only
this rank's slice of it. Its ``_shard_param_infos`` say, per original parameter, whether
the slice holds part of it, where (``offset_in_shard``, ``numel_in_shard``) and which
flat element range of the parameter that is (``intra_param_start_idx`` to
``intra_param_end_idx``, inclusive). shardinit writes exactly those ranges of each
parameter's program (the one writer's flat ranges); alignment and end padding stay
zero. :func:`fsdp1_targets` (with :func:`unset_buffers` / :func:`forget_unset_buffers`)
is FSDP1's region source for materialize.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable

import torch
from torch import nn

from .._names import ModuleWalk, canonical_name, listing, qualified
from .._torch_compat import FlatEntry, fsdp1_unit
from .._validate import DeviceLike, resolve_device
from ..errors import ShardInitError
from .targets import FlatShard, FlatTarget

__all__ = ["fsdp1_param_init_fn"]

# Modules whose parameters fsdp1_param_init_fn allocated and materialize has not filled
# yet: materialize fills them without overwrite=True.
_UNFILLED: weakref.WeakSet[nn.Module] = weakref.WeakSet()
# On a meta parameter, the attribute naming the tensor allocated for it, so a parameter
# shared by two modules (tied weights) stays one tensor after allocation.
_ALLOCATED_ATTR = "_shardinit_allocated"
# On a meta parameter, the attribute listing the (module, attr) pairs that hold it.
_OWNERS_ATTR = "_shardinit_owners"
# Owner lists of parameters held by two or more modules (tied weights): FSDP1 keeps a
# tie only when every holder is in one unit, which materialize checks.
_TIES: list[list[tuple[weakref.ref[nn.Module], str]]] = []
# Buffers fsdp1_param_init_fn allocated (they were on meta): materialize sets them.
_META_BUFFERS: weakref.WeakKeyDictionary[nn.Module, set[str]] = weakref.WeakKeyDictionary()


def _live_ties() -> list[list[tuple[weakref.ref[nn.Module], str]]]:
    """The ties in :data:`_TIES` whose holders all still exist (a model that was freed
    leaves its ties behind otherwise, one list per tie, for the life of the process)."""
    return [owners for owners in _TIES if all(ref() is not None for ref, _ in owners)]


def _fsdp_class() -> type[nn.Module]:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel


def is_fsdp1(module: nn.Module) -> bool:
    """Whether ``module`` is an FSDP1 ``FullyShardedDataParallel`` wrapper."""
    return isinstance(module, _fsdp_class())


def uses_fsdp1(module: nn.Module, modules: Iterable[nn.Module] | None = None) -> bool:
    """Whether ``module`` or any submodule is an FSDP1 wrapper (``modules``:
    ``module.modules()``, where the caller has them)."""
    wrapper = _fsdp_class()
    children = module.modules() if modules is None else modules
    return any(isinstance(child, wrapper) for child in children)


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def fsdp1_param_init_fn(module: nn.Module, device: DeviceLike = None) -> nn.Module:
    """FSDP1 ``param_init_fn`` that only allocates: ``module``'s own meta parameters and
    buffers get uninitialized storage on ``device``; :func:`shardinit.materialize` fills
    the local flat shards afterwards. Parameters shared between modules stay shared.

    Returns ``module`` (allocated in place): FSDP1 ignores the return value, but
    accelerate's ``ensure_weights_retied`` wrapper, applied to every ``param_init_fn`` of a
    model with tied weights, continues with it (docs/trainers.md).

    Args:
        module: the module FSDP1 is about to wrap (FSDP1 calls this once per module).
        device: where to allocate; default the current CUDA device if CUDA is available,
            else the CPU. Bind it with ``functools.partial`` to choose.

    Returns:
        ``module`` itself.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``, or ``device`` not a device.
        ShardInitError: ``device`` is not 'cpu' or an available CUDA device.

    Example:
        >>> import functools, torch, shardinit
        >>> init_fn = functools.partial(shardinit.fsdp1_param_init_fn, device="cpu")
        >>> # FSDP(model, param_init_fn=init_fn, device_id=torch.device("cpu"), ...)
        >>> # shardinit.materialize(fsdp_model, seed=0)
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    target = _default_device() if device is None else resolve_device(device)
    allocated = False
    for attr, param in list(module._parameters.items()):
        if param is None or not param.is_meta:
            continue
        new = getattr(param, _ALLOCATED_ATTR, None)
        if new is None:
            new = nn.Parameter(
                torch.empty_like(param, device=target), requires_grad=param.requires_grad
            )
            setattr(param, _ALLOCATED_ATTR, new)
            setattr(param, _OWNERS_ATTR, [(weakref.ref(module), attr)])
        else:
            owners = getattr(param, _OWNERS_ATTR)
            owners.append((weakref.ref(module), attr))
            if len(owners) == 2:
                _TIES[:] = [*_live_ties(), owners]
        module._parameters[attr] = new
        allocated = True
    for attr, buffer in list(module._buffers.items()):
        if buffer is not None and buffer.is_meta:
            module._buffers[attr] = torch.empty_like(buffer, device=target)
            _META_BUFFERS.setdefault(module, set()).add(attr)
    if allocated:
        _UNFILLED.add(module)
    return module


def unset_buffers(module: nn.Module) -> set[str]:
    """Names of ``module``'s buffers that fsdp1_param_init_fn allocated from meta and
    that are still unset (materialize plans them as meta buffers)."""
    return set(_META_BUFFERS.get(module, set()))


def forget_unset_buffers(module: nn.Module) -> None:
    """Records that ``module``'s buffers have been set."""
    _META_BUFFERS.pop(module, None)


def is_unfilled(module: nn.Module) -> bool:
    """Whether fsdp1_param_init_fn allocated ``module``'s parameters and they are not
    filled yet."""
    return module in _UNFILLED


def mark_filled(module: nn.Module) -> None:
    """Records that ``module``'s parameters have been filled."""
    _UNFILLED.discard(module)


def fsdp1_targets(
    root: nn.Module, walk: ModuleWalk | None = None
) -> tuple[list[FlatTarget], set[tuple[int, str]]]:
    """FSDP1's region source for materialize: every original parameter of every FSDP1
    unit under ``root``, with the part of it this rank's flat shard holds, and the
    ``(id(module), attr)`` holders the units manage (the generic walk skips them).
    ``walk``: ``root``'s, where the caller has it.

    Raises:
        ShardInitError: a unit that is not sharded right now (inside
            ``summon_full_params``), or tied parameters split across units.
    """
    walk = ModuleWalk(root) if walk is None else walk
    if not uses_fsdp1(root, walk.modules):
        return [], set()
    targets: list[FlatTarget] = []
    for path, wrapper in walk.distinct:
        unit = fsdp1_unit(wrapper) if is_fsdp1(wrapper) else None
        if unit is None:
            continue  # not a unit, or a unit without parameters
        if not unit.sharded_now:
            raise ShardInitError(
                f"FSDP unit {path or '<root>'} is not sharded right now (called inside "
                "summon_full_params or a forward?); call materialize and fingerprint_model "
                "outside of them"
            )
        shard = FlatShard(unit.flat_param, unit.shard_group)
        targets += [_flat_target(path, entry, shard) for entry in unit.entries]
    if not targets:
        return [], set()
    split = ties_split_across_units(root)
    if split:
        raise ShardInitError(
            f"materialize: {len(split)} tied parameter(s) are split across FSDP1 units: "
            f"{listing(split)}. FSDP1 supports a shared parameter only inside one unit "
            "(across units it is flattened more than once, and the tie is gone); wrap the "
            "modules that share it in one unit (leave them out of auto_wrap_policy), or "
            "with FSDP2 pass them to one fully_shard call"
        )
    return targets, managed_params(root, walk.modules)


def _flat_target(path: str, entry: FlatEntry, shard: FlatShard) -> FlatTarget:
    return FlatTarget(
        name=canonical_name(qualified(path, entry.path)),
        owner=entry.module,
        attr=entry.attr,
        global_shape=entry.shape,
        dtype=shard.tensor.dtype,
        shard=shard,
        offset=entry.offset,
        start=entry.start,
        stop=entry.stop,
        fresh=is_unfilled(entry.module),
        on_filled=functools.partial(mark_filled, entry.module),
    )


def ties_split_across_units(root: nn.Module) -> list[str]:
    """Parameters that fsdp1_param_init_fn saw shared by modules of ``root`` that are
    in different FSDP1 units (or partly outside every unit), as ``"a = b (units X, Y)"``
    lines. FSDP1 supports a shared parameter only inside one unit: across units the tie
    the model declared does not survive wrapping."""
    unit_of: dict[int, tuple[int, str]] = {}  # module -> (id of its unit, unit name)
    path_of: dict[int, str] = {}
    outside = (0, "<no FSDP1 unit>")

    def walk(module: nn.Module, path: str, unit: tuple[int, str]) -> None:
        if is_fsdp1(module):
            unit = (id(module), canonical_name(path) if path else "<root>")
        path_of[id(module)] = path
        unit_of[id(module)] = unit
        for name, child in module.named_children():
            walk(child, qualified(path, name), unit)

    walk(root, "", outside)
    _TIES[:] = _live_ties()
    groups = [list(owners) for owners in _TIES]
    # A holder that fsdp1_param_init_fn never saw (outside every unit) still holds the
    # meta parameter the others were allocated from.
    for module in root.modules():
        for attr, param in module._parameters.items():
            owners = getattr(param, _OWNERS_ATTR, None) if param is not None else None
            if owners is not None and param is not None and param.is_meta:
                groups.append([*owners, (weakref.ref(module), attr)])
    split = []
    for owners in groups:
        alive = [(ref(), attr) for ref, attr in owners]
        held = [(m, a) for m, a in alive if m is not None and id(m) in unit_of]
        units = [unit_of[id(m)] for m, _ in held]
        if len({unit_id for unit_id, _ in units}) > 1:
            names = [canonical_name(qualified(path_of[id(m)], a)) for m, a in held]
            unit_names = ", ".join(name for _, name in units)
            split.append(f"{' = '.join(names)} (units {unit_names})")
    return split


def managed_params(
    root: nn.Module, modules: Iterable[nn.Module] | None = None
) -> set[tuple[int, str]]:
    """``(id(module), attr)`` of every original parameter that an FSDP1 unit under
    ``root`` manages (including shared ones), so the generic path leaves them alone
    (``modules``: ``root.modules()``, where the caller has them)."""
    managed: set[tuple[int, str]] = set()
    for wrapper in root.modules() if modules is None else modules:
        unit = fsdp1_unit(wrapper) if is_fsdp1(wrapper) else None
        if unit is None:
            continue
        managed.update((id(entry.module), entry.attr) for entry in unit.entries)
        managed.update((id(module), attr) for module, attr in unit.shared)
    return managed
