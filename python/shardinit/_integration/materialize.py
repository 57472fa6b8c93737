"""``materialize``: fill every parameter of a meta-device or sharded model shard-locally.

Each rank generates exactly the elements its shards hold (DTensor local regions from the
placements, FSDP1 flat-shard ranges, ZeRO-3 padded flat partitions, or whole tensors for
plain parameters) from stream
format v1, so the gathered model is bit-identical for every world size and layout, and no
rank ever builds a full copy of a sharded parameter. There is no communication.

It runs in phases, each written once for every kind of target (plan.py, targets.py):
plan (one record per parameter) -> check (everything that can fail, before anything is
allocated) -> allocate and fill, target by target -> buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from .._names import ModuleWalk, listing
from .._validate import DeviceLike, check_seed, resolve_device
from ..errors import ShardInitError
from .capture import CapturedInit, capture_walked
from .collector import collector_paused
from .meta_attributes import check_meta_attributes
from .only import Only, check_only, chosen_names
from .parents import refuse_part_of_model
from .plan import (
    BufferInit,
    RulesAndDefaults,
    copy_sources,
    local_targets,
    make_plan,
    region_targets,
)
from .rules import RuleList, Rules, check_rules
from .targets import Target
from .trainers import refuse_prepared_on_meta

__all__ = ["materialize"]


def materialize(
    module: nn.Module,
    *,
    seed: int,
    device: DeviceLike = None,
    rules: Rules | None = None,
    buffer_init: BufferInit | None = None,
    overwrite: bool = False,
    init_fn: Callable[[], object] | CapturedInit | None = None,
    only: Only | None = None,
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
    * DeepSpeed ZeRO-3 parameters (built under ``deepspeed.zero.Init`` or
      :func:`shardinit.deepspeed.Init`, before ``deepspeed.initialize``): each rank
      fills the real elements of its padded flat partition (and hpZ's secondary one);
      padding is zero.

    Megatron-core models have their own entry point,
    :func:`shardinit.megatron.materialize` (its presets need the model's config), over
    the same plan.

    A parameter's values come from the first of: ``init_fn`` (where it sets all of the
    parameter), the first matching rule, its constructor value (recorded when the model
    was built inside :func:`shardinit.record_constructors`), the torch.nn default of its
    module type (bounds from the GLOBAL shape, as ``reset_parameters``). Where
    ``init_fn`` sets only part of it, the rest comes from the others, in that order.
    The canonical name (stream-format.md §5) drops wrapper segments; a tied parameter is
    named by its first name in ``named_parameters()`` order and initialized once. Buffers
    left on meta are set as torch sets them for normalization layers, else by
    ``buffer_init``.

    Args:
        module: the model (meta-device, FSDP2/TP-sharded, FSDP1-wrapped, or built
            under DeepSpeed ZeRO-3).
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
            before, where init_fn covers part of it); buffers it computes get the
            values it computed during the capture, written after allocation. Or a
            ``CapturedInit`` from ``capture_init``: required for FSDP1, whose flat
            parameters hide the original ones, so capture on the meta model before
            wrapping. Buffers are written only when it was captured on ``module``
            itself and not under FSDP1; otherwise they need defaults or
            ``buffer_init``. See docs/capturing-init.md.
        only: fill just these parameters, e.g. what a checkpoint lacks (fine-tuning,
            docs/capturing-init.md): the ``missing_keys`` of
            ``load_state_dict(ckpt, strict=False, assign=True)`` as they come (module
            paths; buffer names among them are accepted), or a predicate
            ``only(canonical_name) -> bool``. Each
            gets exactly the values it gets when the whole model is materialized
            (init_fn still runs over the whole model); every other parameter is left as
            it is (loaded, or still on meta), neither checked nor touched. Meta buffers
            are filled as always; other buffers are left alone.

    Returns:
        ``module``, filled in place.

    Raises:
        TypeError: arguments of the wrong type.
        ShardInitError: ``module`` is part of a larger model (its names would be
            relative to it: fill part of a model with ``only``), names in ``only``
            that match no parameter, ``only`` with FSDP1 or ZeRO-3 parameters, a copy
            ``only`` fills whose source it leaves alone, parameters with no rule and
            no known default, meta buffers with no default and no ``buffer_init``,
            already materialized parameters without ``overwrite=True``, unsupported
            placements or dtypes, tied parameters split
            across FSDP1 units, records of a ``CapturedInit`` that match no parameter,
            ties that differ from those of the model a ``CapturedInit`` was captured on,
            ZeRO-3 parameters that cannot be filled now (after ``deepspeed.initialize``,
            gathered, NVMe-offloaded, quantized),
            a model that accelerate's ``prepare`` saw on meta (its optimizer is
            already wrong; materialize before ``prepare``, docs/trainers.md).
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
    seed = _check_arguments(module, seed, overwrite, buffer_init, init_fn)
    target_device = None if device is None else resolve_device(device)
    rule_list = check_rules(rules)
    check_only(only)
    with collector_paused():  # why: collector.py
        # One walk of the modules for every phase up to init_fn (which may change the
        # tree: then one more, after it), instead of a walk each.
        walk = ModuleWalk(module)
        refuse_prepared_on_meta(module, walk)
        refuse_part_of_model(module)
        return _plan_and_fill(
            walk, seed, target_device, rule_list, buffer_init, overwrite, init_fn, only
        )


def _plan_and_fill(
    walk: ModuleWalk,
    seed: int,
    target_device: torch.device | None,
    rule_list: RuleList,
    buffer_init: BufferInit | None,
    overwrite: bool,
    init_fn: Callable[[], object] | CapturedInit | None,
    only: Only | None,
) -> nn.Module:
    """``materialize`` after its arguments are checked, over ``walk`` of the model."""
    # 1. Plan every name, region and initializer before touching any tensor, so an error
    #    leaves the model as it was.
    module = walk.root
    flat, managed = region_targets(module, walk)
    targets = [*local_targets(module, managed, walk), *flat]
    if only is not None and flat:
        raise ShardInitError(
            "materialize: only fills plain and DTensor parameters (meta-device, FSDP2, "
            "TP); not FSDP1 flat shards (zeroed whole before they are filled) or DeepSpeed "
            "ZeRO-3 partitions. There, materialize the whole model, then load the checkpoint"
        )
    chosen = targets if only is None else _chosen(walk, targets, only)
    copies = _copies(targets, chosen)
    captured, walk = _captured(walk, init_fn, hides_params=bool(flat), device=target_device)
    # torch.nn's defaults read the fans of the parameters as the model was built (a bias
    # bound is the constructor's weight's), whatever init code did to them since.
    built = targets
    if captured is not None and captured.changed_params and captured.captured_on(module):
        # init code added or removed parameters, as eager init code leaves the model
        flat, managed = region_targets(module, walk)
        targets = [*local_targets(module, managed, walk), *flat]
        chosen = targets if only is None else _chosen(walk, targets, only)
        copies = _copies(targets, chosen)
    # The buffer values init_fn computed are written if it computed them on this very
    # model and no wrapper flattened its parameters (flat parameters cannot be swapped
    # for stand-ins); otherwise those buffers need defaults or buffer_init.
    write_computed = captured is not None and not flat and captured.captured_on(module)
    plan = make_plan(
        module,
        chosen,
        seed=seed,
        chooser=RulesAndDefaults(rule_list, module, built, walk),
        captured=captured,
        write_computed=write_computed,
        left_alone=frozenset(t.name for t in targets) - {t.name for t in chosen},
        copies=copies,
        # init_fn captured on module just now (not a CapturedInit passed in): the
        # capture's ties are module's own, read at its end.
        captured_here=captured is not None and captured is not init_fn,
        walk=walk,
    )
    flags = _checked_flags(walk, captured, hides_params=bool(flat))
    flags = {name: flag for name, flag in flags.items() if any(t.name == name for t in chosen)}
    rebind_aliases = check_meta_attributes(module, target_device, walk)  # none stays on meta
    # 2. Check, 3. allocate, 4. fill, 5. buffers.
    plan.carry_out(
        module, overwrite=overwrite, buffer_init=buffer_init, device=target_device, walk=walk
    )
    rebind_aliases()
    for slot in walk.slots if flags else ():  # their new Parameters, which the holders hold now
        if slot.name in flags:
            slot.current().requires_grad_(flags[slot.name])
    return module


def _checked_flags(
    walk: ModuleWalk, captured: CapturedInit | None, *, hides_params: bool
) -> dict[str, bool]:
    """The ``requires_grad`` flags init_fn set, per canonical name, checked before
    anything is allocated: each names a parameter materialize can set it on."""
    flags = dict(captured.requires_grad) if captured is not None else {}
    if not flags:  # nothing to check: no walk of the model for the names
        return flags
    if hides_params:
        raise ShardInitError(
            f"materialize: init_fn sets requires_grad of {listing(sorted(flags))}, which "
            "FSDP1's flat parameters and ZeRO-3's partitions cannot carry per original "
            "parameter; set it on the model before wrapping it"
        )
    missing = sorted(set(flags) - {slot.name for slot in walk.slots})
    if missing:
        raise ShardInitError(
            f"materialize: init_fn's capture sets requires_grad of {listing(missing)}, "
            "which the model does not have"
        )
    return flags


def _check_arguments(
    module: object, seed: int, overwrite: object, buffer_init: object, init_fn: object
) -> int:
    """The checked seed, after the arguments' types (in the order of the signature)."""
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    seed = check_seed(seed)
    if not isinstance(overwrite, bool):
        raise TypeError(f"overwrite must be a bool, got {type(overwrite).__name__}")
    if buffer_init is not None and not callable(buffer_init):
        raise TypeError(f"buffer_init must be callable, got {type(buffer_init).__name__}")
    if init_fn is not None and not (callable(init_fn) or isinstance(init_fn, CapturedInit)):
        raise TypeError(f"init_fn must be callable or a CapturedInit, got {type(init_fn).__name__}")
    return seed


def _chosen(walk: ModuleWalk, targets: Sequence[Target], only: Only) -> list[Target]:
    names = chosen_names(walk.root, targets, only, walk)
    return [target for target in targets if target.name in names]


def _copies(targets: Sequence[Target], chosen: Sequence[Target]) -> dict[str, Target]:
    """The copy relations of the chosen parameters; a copy whose source ``only`` leaves
    alone (loaded) cannot take the source's values from the stream."""
    copies = copy_sources(targets)
    names = {target.name for target in chosen}
    stranded = [
        f"{name} (a copy of {source.name})"
        for name, source in sorted(copies.items())
        if name in names and source.name not in names
    ]
    if stranded:
        raise ShardInitError(
            f"materialize: only fills {len(stranded)} parameter(s) that were deep-copied "
            f"from a parameter only leaves as it is: {listing(stranded)}. In eager torch a "
            "copy starts equal to its source: load the checkpoint's value of the source "
            "into the copy too (map its key onto both names), or fill both"
        )
    return copies


def _captured(
    walk: ModuleWalk,
    init_fn: Callable[[], object] | CapturedInit | None,
    *,
    hides_params: bool,
    device: torch.device | None,
) -> tuple[CapturedInit | None, ModuleWalk]:
    """init_fn's capture (None without init_fn), and the walk of the model after it: a
    new one where init_fn ran here (it may have changed the module tree), else ``walk``."""
    if init_fn is None or isinstance(init_fn, CapturedInit):
        return init_fn, walk
    if hides_params:
        raise ShardInitError(
            "materialize: FSDP1's flat parameters (and DeepSpeed ZeRO-3's partitions) "
            "hide the original ones from init_fn; capture it on the meta model before "
            "wrapping (ZeRO-3: on a meta copy of the model), then pass the "
            "result: captured = shardinit.capture_init(model, model.init_weights); "
            "materialize(fsdp_model, seed=..., init_fn=captured)"
        )
    return capture_walked(walk, init_fn, device)
