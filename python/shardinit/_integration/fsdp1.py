"""FSDP1 (``FullyShardedDataParallel``) support: allocate-only ``param_init_fn`` and the
per-rank flat-parameter regions.

FSDP1 flattens each wrapped unit's parameters into one ``FlatParameter`` and keeps only
this rank's slice of it. Its ``_shard_param_infos`` say, per original parameter, whether
the slice holds part of it, where (``offset_in_shard``, ``numel_in_shard``) and which
flat element range of the parameter that is (``intra_param_start_idx`` to
``intra_param_end_idx``, inclusive). shardinit fills exactly those ranges with
``init_flat``; alignment and end padding stay zero.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import ShardInitError

__all__ = [
    "FlatRegion",
    "flat_regions",
    "fsdp1_param_init_fn",
    "is_fsdp1",
    "is_unfilled",
    "managed_params",
    "mark_filled",
    "peek_meta_buffers",
    "take_meta_buffers",
    "ties_split_across_units",
    "uses_fsdp1",
]

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


def _fsdp_class() -> type[nn.Module]:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel


def is_fsdp1(module: nn.Module) -> bool:
    """Whether ``module`` is an FSDP1 ``FullyShardedDataParallel`` wrapper."""
    return isinstance(module, _fsdp_class())


def uses_fsdp1(module: nn.Module) -> bool:
    """Whether ``module`` or any submodule is an FSDP1 wrapper."""
    return any(is_fsdp1(child) for child in module.modules())


def _default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def fsdp1_param_init_fn(module: nn.Module, device: Any = None) -> None:
    """FSDP1 ``param_init_fn`` that only allocates: ``module``'s own meta parameters and
    buffers get uninitialized storage on ``device``; :func:`shardinit.materialize` fills
    the local flat shards afterwards. Parameters shared between modules stay shared.

    Args:
        module: the module FSDP1 is about to wrap (FSDP1 calls this once per module).
        device: where to allocate; default the current CUDA device if CUDA is available,
            else the CPU. Bind it with ``functools.partial`` to choose.

    Raises:
        TypeError: ``module`` is not an ``nn.Module``.

    Example:
        >>> import functools, torch, shardinit
        >>> init_fn = functools.partial(shardinit.fsdp1_param_init_fn, device="cpu")
        >>> # FSDP(model, param_init_fn=init_fn, device_id=torch.device("cpu"), ...)
        >>> # shardinit.materialize(fsdp_model, seed=0)
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    target = _default_device() if device is None else torch.device(device)
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
                _TIES.append(owners)
        module._parameters[attr] = new
        allocated = True
    for attr, buffer in list(module._buffers.items()):
        if buffer is not None and buffer.is_meta:
            module._buffers[attr] = torch.empty_like(buffer, device=target)
            _META_BUFFERS.setdefault(module, set()).add(attr)
    if allocated:
        _UNFILLED.add(module)


def take_meta_buffers(module: nn.Module) -> set[str]:
    """Names of ``module``'s buffers that fsdp1_param_init_fn allocated from meta and
    that are still unset; forgets them."""
    return _META_BUFFERS.pop(module, set())


def peek_meta_buffers(module: nn.Module) -> set[str]:
    """Like :func:`take_meta_buffers` without forgetting."""
    return set(_META_BUFFERS.get(module, set()))


def is_unfilled(module: nn.Module) -> bool:
    """Whether fsdp1_param_init_fn allocated ``module``'s parameters and they are not
    filled yet."""
    return module in _UNFILLED


def mark_filled(module: nn.Module) -> None:
    """Records that ``module``'s parameters have been filled."""
    _UNFILLED.discard(module)


@dataclass(frozen=True)
class FlatRegion:
    """One original parameter's part of this rank's flat-parameter shard.

    Attributes:
        name: canonical name.
        module: the module that owns the original parameter.
        attr: its attribute name on ``module``.
        global_shape: the original parameter's (global) shape.
        flat_param: the local flat parameter (the padded shard).
        offset: where the part starts in ``flat_param``.
        start: the first flat element of the original parameter held here.
        stop: one past the last (``start == stop`` when none is held).
    """

    name: str
    module: nn.Module
    attr: str
    global_shape: tuple[int, ...]
    flat_param: torch.Tensor
    offset: int
    start: int
    stop: int


def flat_regions(root: nn.Module, canonical: Any) -> list[FlatRegion]:
    """Every original parameter of every FSDP1 unit under ``root``, with the part of it
    this rank's flat shard holds.

    Args:
        root: the (FSDP1-wrapped) model.
        canonical: function mapping a raw dotted path to the canonical name.

    Raises:
        ShardInitError: a unit that is not sharded as expected (e.g. its parameters are
            currently unsharded, inside ``summon_full_params``).
    """
    regions: list[FlatRegion] = []
    for path, wrapper in root.named_modules():
        if not is_fsdp1(wrapper):
            continue
        handle = getattr(wrapper, "_handle", None)
        if handle is None:
            continue  # a unit without parameters
        flat_param = handle.flat_param
        if handle.uses_sharded_strategy and not handle.is_sharded(flat_param):
            raise ShardInitError(
                f"FSDP unit {path or '<root>'} is not sharded right now (called inside "
                "summon_full_params or a forward?); call materialize outside of them"
            )
        for fqn, info, shape, shard in zip(
            flat_param._fqns,
            flat_param._param_infos,
            flat_param._shapes,
            flat_param._shard_param_infos,
            strict=True,
        ):
            raw = f"{path}.{fqn}" if path else fqn
            if shard.in_shard:
                offset = int(shard.offset_in_shard)
                start = int(shard.intra_param_start_idx)
                stop = int(shard.intra_param_end_idx) + 1
            else:
                offset, start, stop = 0, 0, 0
            regions.append(
                FlatRegion(
                    name=canonical(raw),
                    module=info.module,
                    attr=info.param_name,
                    global_shape=tuple(int(size) for size in shape),
                    flat_param=flat_param,
                    offset=offset,
                    start=start,
                    stop=stop,
                )
            )
    return regions


def ties_split_across_units(root: nn.Module, canonical: Any) -> list[str]:
    """Parameters that fsdp1_param_init_fn saw shared by modules of ``root`` that are
    in different FSDP1 units (or partly outside every unit), as ``"a = b (units X, Y)"``
    lines. FSDP1 supports a shared parameter only inside one unit: across units the tie
    the model declared does not survive wrapping."""
    unit_of: dict[int, tuple[int, str]] = {}  # module -> (id of its unit, unit name)
    path_of: dict[int, str] = {}
    outside = (0, "<no FSDP1 unit>")

    def walk(module: nn.Module, path: str, unit: tuple[int, str]) -> None:
        if is_fsdp1(module):
            unit = (id(module), canonical(path) if path else "<root>")
        path_of[id(module)] = path
        unit_of[id(module)] = unit
        for name, child in module.named_children():
            walk(child, f"{path}.{name}" if path else name, unit)

    walk(root, "", outside)
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
            names = [canonical(f"{path_of[id(m)]}.{a}" if path_of[id(m)] else a) for m, a in held]
            unit_names = ", ".join(name for _, name in units)
            split.append(f"{' = '.join(names)} (units {unit_names})")
    return split


def managed_params(root: nn.Module) -> set[tuple[int, str]]:
    """``(id(module), attr)`` of every original parameter that an FSDP1 unit under
    ``root`` manages (including shared ones), so the generic path leaves them alone."""
    managed: set[tuple[int, str]] = set()
    for wrapper in root.modules():
        handle = getattr(wrapper, "_handle", None) if is_fsdp1(wrapper) else None
        if handle is None:
            continue
        flat_param = handle.flat_param
        for info in flat_param._param_infos:
            managed.add((id(info.module), info.param_name))
        for shared in flat_param._shared_param_infos:
            managed.add((id(shared.module), shared.param_name))
    return managed
