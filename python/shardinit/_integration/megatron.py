"""Megatron-core: fill each tensor-, pipeline- and expert-parallel partition in place.

A Megatron-core model built without initialization holds, on every rank, only its local
partitions. For each parameter this module derives three things, none of which depends
on the TP, PP, VPP or EP sizes, and fills the local partition from stream format v1:

* the REGION: a weight tagged ``tensor_model_parallel`` holds Megatron's stride split
  of the global tensor along ``partition_dim`` over its module's ``tp_group`` (the
  expert-TP group for experts). The global shape is the local one with
  ``partition_dim`` multiplied by the group size. Stride 1 is ``Shard(d)``; stride s > 1
  (a GLU ``linear_fc1`` stores ``[gate_r; up_r]``) is ``_StridedShard(d,
  split_factor=s)`` on the 1-D group: Megatron splits the master into ``world * s``
  pieces and rank r takes pieces ``r, r + world, ...``, which are exactly the chunks
  :func:`~shardinit._integration.placements.local_runs` computes. Untagged parameters
  are replicated (whole).
* the CANONICAL NAME (docs/stream-format.md §5): wrapper ``module.`` segments removed,
  ``decoder.layers.{i}`` renumbered to the global ``layer_number - 1``,
  ``local_experts.{i}`` to the global expert index, and the last pipeline stage's copy
  of a tied output layer (``shared_embedding``) named as the embedding, so both copies
  get the same bits without Megatron's all-reduce.
* the INITIALIZER: a rule, else the ``init_method`` Megatron gave the weight
  (recorded by :func:`deferred_init`), else a preset from the ``TransformerConfig``.
  Megatron's init callables (``functools.partial(torch.nn.init.normal_, ...)`` or any
  ``torch.nn.init`` function) are captured once on a meta tensor of the GLOBAL shape, so
  fan-based ones see global fans, as on Megatron's CPU-initialization path.

Supported: megatron-core 0.16.1 (weights tagged by :func:`deferred_init`) and 0.19.2
(Python 3.12 only; ``make test-zoo312``), which also tags weights built with
``perform_initialization=False``, so that :func:`materialize` needs no
:func:`deferred_init` there.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeAlias, cast

import torch
from torch import nn

from .._caches import cached
from .._names import ParamSlot, listing, qualified, walk_slots
from .._program import ParamRecord, Writer, base_ops
from .._torch_compat import strided_shard
from .._validate import check_seed
from ..errors import ShardInitError
from ..init import Initializer, ones, zeros
from ..spec import SUPPORTED_DTYPES
from .capture import capture_init
from .exclusive import ThreadExclusive
from .placements import Run, full_runs, local_runs
from .plan import make_plan
from .rules import RuleKey, first_rule, rule_pairs
from .targets import OwnLayout, SlotHeld, Target, Values

#: An init callable as Megatron takes it: ``fn(tensor)`` fills ``tensor`` in place.
InitMethod: TypeAlias = Callable[[torch.Tensor], object]
#: Ordered rules, first match wins: keys as in :func:`shardinit.materialize`, values a
#: ``shardinit.init`` initializer or an init callable (captured on the GLOBAL shape).
MegatronRules: TypeAlias = (
    Mapping[RuleKey, Initializer | InitMethod] | Iterable[tuple[RuleKey, Initializer | InitMethod]]
)

#: On a weight tagged by :func:`deferred_init`: the ``init_method`` Megatron passed.
_INIT_METHOD_ATTR = "_shardinit_init_method"
#: One deferred_init() at a time (it patches megatron's module attributes); nested in
#: one thread it is refused (a plain lock would deadlock).
_DEFERRED = ThreadExclusive(
    "shardinit.megatron.deferred_init()",
    "build the whole model inside one deferred_init()",
)


# --------------------------------------------------------------------------- module types


def _layers() -> Any:
    from megatron.core.tensor_parallel import layers

    return layers


def _tp_module_types() -> tuple[type[nn.Module], ...]:
    layers = _layers()
    return (layers.ColumnParallelLinear, layers.RowParallelLinear, layers.VocabParallelEmbedding)


def _wrapper_types() -> tuple[type[nn.Module], ...]:
    """Modules that hold the model as ``.module`` (Float16Module, Megatron's and torch's
    DDP): their ``module.`` segment is not part of a canonical name."""
    from megatron.core.transformer.module import Float16Module

    found: list[type[nn.Module]] = [Float16Module, nn.parallel.DistributedDataParallel]
    try:
        from megatron.core.distributed.data_parallel_base import (
            _BaseDataParallel,
        )
    except ImportError:  # pragma: no cover - layout of older releases
        pass
    else:
        found.append(_BaseDataParallel)
    return tuple(found)


def _unsupported_reason(module: nn.Module) -> str | None:
    """Why shardinit refuses a module type, or None. These are not verified: their
    weights either span local experts only (GroupedMLP's ``weight1`` is EP-dependent)
    or come from Transformer Engine, whose CPU path still allocates full masters."""
    kind = type(module)
    if kind.__name__ == "GroupedMLP":
        return "legacy GroupedMLP (its weights concatenate the local experts); use SequentialMLP"
    if kind.__module__.startswith(("transformer_engine", "megatron.core.extensions")):
        return "Transformer Engine layers are not supported yet; use the local spec"
    return None


# --------------------------------------------------------------------------- deferred init


@contextmanager
def deferred_init() -> Iterator[None]:
    """Build a Megatron-core model without initializing its parallel weights.

    Inside, build with ``perform_initialization=True`` (on CPU or GPU): Megatron's
    ``_initialize_affine_weight_cpu`` / ``_gpu`` only tag each tensor-parallel weight
    with its partition (``partition_dim``, ``partition_stride``) and remember its
    ``init_method``; no full-size master is allocated and nothing is generated. Then
    call :func:`materialize`. This is the route for megatron-core 0.16, whose
    ``perform_initialization=False`` leaves weights untagged; later releases tag them
    themselves.

    Not thread-safe with other model construction in the same process (module
    attributes of ``megatron.core.tensor_parallel.layers`` are patched).

    Example:
        >>> # with shardinit.megatron.deferred_init():
        >>> #     model = GPTModel(config, spec, vocab_size=..., max_sequence_length=...)
        >>> # shardinit.megatron.materialize(model, seed=0, config=config)
    """

    layers = _layers()
    originals = {
        name: getattr(layers, name)
        for name in ("_initialize_affine_weight_cpu", "_initialize_affine_weight_gpu")
    }
    signatures = {name: inspect.signature(function) for name, function in originals.items()}

    def deferred(name: str) -> Callable[..., None]:
        def tag_only(*args: Any, **kwargs: Any) -> None:
            bound = signatures[name].bind(*args, **kwargs).arguments
            if bound.get("skip_set_tensor_parallel_attributes", False):
                return
            weight = bound["weight"]
            stride = bound.get("stride", 1)
            layers.set_tensor_model_parallel_attributes(
                weight, True, bound["partition_dim"], stride
            )
            setattr(weight, _INIT_METHOD_ATTR, bound["init_method"])

        return tag_only

    # Modules that import the functions by name hold their own references: import them
    # now, so that none binds the stand-ins for good by being imported inside.
    holders = [layers, importlib.import_module("megatron.core.transformer.moe.experts")]
    with _DEFERRED.hold():
        saved = [
            (holder, name, getattr(holder, name))
            for holder in holders
            if holder is not None
            for name in originals
            if hasattr(holder, name)
        ]
        for holder, name, _ in saved:
            setattr(holder, name, deferred(name))
        try:
            yield
        finally:
            for holder, name, original in saved:
                setattr(holder, name, original)


# --------------------------------------------------------------------------- names


def _walk(
    module: nn.Module,
    path: str,
    wrappers: tuple[type, ...],
    experts: Sequence[int] = (),
    expert_list: bool = False,
) -> Iterator[tuple[str, nn.Module]]:
    """``(canonical path, module)`` of ``module`` and everything under it, with path
    segments that do not depend on PP, VPP or EP (see the module docstring).

    ``experts`` are the global indices of the nearest MoE layer's local experts;
    ``expert_list`` says that ``module`` is its ``local_experts`` list."""
    yield path, module
    indices = getattr(module, "local_expert_indices", None)
    if indices is not None:
        experts = [int(index) for index in indices]
    for name, child in module.named_children():
        if isinstance(module, wrappers) and name == "module":
            yield from _walk(child, path, wrappers, experts)
            continue
        segment = name
        if name.isdigit() and expert_list and experts:
            segment = str(experts[int(name)])  # local_experts.{i}: global expert index
        elif (
            name.isdigit() and isinstance(module, nn.ModuleList) and hasattr(child, "layer_number")
        ):
            layer_number: Any = child.layer_number
            segment = str(int(layer_number) - 1)  # decoder.layers.{i}: global layer
        child_path = qualified(path, segment)
        is_list = name == "local_experts" and isinstance(child, nn.ModuleList)
        yield from _walk(child, child_path, wrappers, experts, is_list)


_EMBEDDING_NAME = "embedding.word_embeddings.weight"


def _slots(chunks: Sequence[nn.Module]) -> list[tuple[ParamSlot, str]]:
    """Every distinct parameter of the chunks, named by the Megatron walk (the last
    stage's copy of a tied output layer, ``shared_embedding``, named as the embedding),
    with the canonical path of its owner (for presets by module role)."""
    wrappers = _wrapper_types()
    walk = itertools.chain.from_iterable(_walk(chunk, "", wrappers) for chunk in chunks)
    found = []
    for slot in walk_slots(walk):
        attr = slot.owners[0][1]
        owner_path = slot.name[: -len(attr) - 1] if slot.name.endswith("." + attr) else ""
        if getattr(slot.param, "shared_embedding", False):
            slot.name = _EMBEDDING_NAME
        found.append((slot, owner_path))
    return found


def partition_names(model_or_chunks: nn.Module | Sequence[nn.Module]) -> dict[str, str]:
    """``{named_parameters() name: canonical name}`` for this rank's partitions: the
    names :func:`materialize` keys the streams by, equal for every TP/PP/VPP/EP layout.
    """
    chunks = _chunks(model_or_chunks)
    canonical = {id(slot.param): slot.name for slot, _ in _slots(chunks)}
    names: dict[str, str] = {}
    for index, chunk in enumerate(chunks):
        prefix = f"{index}." if len(chunks) > 1 else ""
        for name, param in chunk.named_parameters():
            names[prefix + name] = canonical[id(param)]
    return names


# --------------------------------------------------------------------------- regions


@dataclass(eq=False)
class MegatronTarget(SlotHeld, OwnLayout):
    """One Megatron parameter's local partition: ``runs`` (per dim, runs of global
    indices) of the GLOBAL shape, from its partition attributes (the whole tensor when
    untagged). Implements :class:`~shardinit._integration.targets.Target`.

    Megatron allocated the partitions and their values are not initialized yet (nothing
    tells a filled partition from an unfilled one), so :meth:`is_filled` is False.
    """

    slot: ParamSlot
    owner_path: str  # canonical path of the owner (for presets by module role)
    global_shape: tuple[int, ...]
    runs: list[list[Run]]

    def is_filled(self) -> bool:
        return False

    def allocate(self, device: torch.device) -> None:
        del device  # Megatron allocated the partitions (meta ones are refused)

    def fill(self, values: Values, writer: Writer) -> None:
        values.write_runs(writer, self.runs, self.slot.param.data)


def _region(slot: ParamSlot) -> tuple[tuple[int, ...], list[list[Run]]]:
    """The GLOBAL shape and the local runs of ``slot`` (see the module docstring)."""
    param, owner = slot.param, slot.owners[0][0]
    local_shape = tuple(int(size) for size in param.shape)
    if not getattr(param, "tensor_model_parallel", False):
        return local_shape, full_runs(local_shape)
    group = getattr(owner, "tp_group", None)
    if group is None:
        raise ShardInitError(
            f"{slot.name}: tagged tensor_model_parallel but its module "
            f"{type(owner).__name__} has no tp_group to say which partition it holds"
        )
    rank, world = int(group.rank()), int(group.size())
    dim = int(getattr(param, "partition_dim")) % len(local_shape)  # noqa: B009
    stride = int(getattr(param, "partition_stride", 1))
    global_shape = tuple(size * world if d == dim else size for d, size in enumerate(local_shape))
    from torch.distributed.tensor.placement_types import Shard

    placement = Shard(dim) if stride == 1 else strided_shard(dim, stride)
    runs = local_runs(global_shape, (world,), (rank,), [placement], name=slot.name)
    held = tuple(sum(stop - start for start, stop in dim_runs) for dim_runs in runs)
    if held != local_shape or global_shape[dim] % (world * stride):
        raise ShardInitError(
            f"{slot.name}: partition_dim {dim}, stride {stride} over {world} ranks of "
            f"global shape {global_shape} does not give the local shape {local_shape}"
        )
    return global_shape, runs


def _refusal(slot: ParamSlot) -> str | None:
    """Why ``slot`` cannot be filled, or None."""
    param, (owner, attr) = slot.param, slot.owners[0]
    reason = _unsupported_reason(owner)
    if reason is not None:
        return f"{slot.name}: {reason}"
    if type(param.data) is not torch.Tensor or param.dtype not in SUPPORTED_DTYPES:
        return (
            f"{slot.name}: a quantized or fp8 parameter ({type(param.data).__name__}, "
            f"{param.dtype}); shardinit fills fp32/bf16/fp16 weights only"
        )
    if hasattr(param, "main_param"):
        return (
            f"{slot.name}: a Megatron optimizer (DistributedOptimizer or the float16 "
            "optimizer) already copied this parameter into its fp32 main params; fill "
            "before get_megatron_optimizer"
        )
    if param.is_meta:
        return f"{slot.name}: on the meta device; Megatron partitions must be allocated"
    sizes = getattr(param, "partition_sizes", None)
    if sizes is not None and getattr(param, "tensor_model_parallel", False):
        return (
            f"{slot.name}: packs blocks that are split over TP each on its own "
            f"(partition_sizes {list(sizes)}, as megatron-core 0.19's Mamba in_proj and "
            "conv1d); shardinit places one stride split along partition_dim only"
        )
    if (
        attr == "weight"
        and isinstance(owner, _tp_module_types())
        and not hasattr(param, "tensor_model_parallel")
    ):
        return (
            f"{slot.name}: {type(owner).__name__} weight without partition "
            "attributes (megatron-core <= 0.16 does not tag weights under "
            "perform_initialization=False); build the model inside "
            "shardinit.megatron.deferred_init() with perform_initialization=True"
        )
    return None


def megatron_targets(chunks: Sequence[nn.Module]) -> list[MegatronTarget]:
    """Megatron's region source: every distinct parameter of the chunks, with its
    canonical name and this rank's partition of it.

    Raises:
        ShardInitError: parameters that cannot be filled (untagged tensor-parallel
            weights, ones a Megatron optimizer already copied, fp8/quantized ones,
            unsupported module types), or partition attributes that do not fit.
    """
    slots = _slots(chunks)
    refused = [reason for slot, _ in slots if (reason := _refusal(slot)) is not None]
    if refused:
        raise ShardInitError(
            f"shardinit.megatron.materialize: {len(refused)} parameter(s) cannot be "
            f"filled: {listing(refused)}"
        )
    return [MegatronTarget(slot, owner_path, *_region(slot)) for slot, owner_path in slots]


# --------------------------------------------------------------------------- initializers


@dataclass(frozen=True)
class _Choice:
    """Where a parameter's initializer comes from: a shardinit initializer or an init
    callable to capture, and a description for error messages."""

    initializer: Initializer | None
    method: InitMethod | None
    source: str


def _preset(target: MegatronTarget, config: Any) -> _Choice | None:
    """Megatron's own choice for ``target`` (what its CPU init path applies)."""
    owner, attr = target.holders[0]
    if target.name == _EMBEDDING_NAME or target.owner_path.startswith("embedding."):
        return _Choice(None, config.embedding_init_method, "config.embedding_init_method")
    if isinstance(owner, (nn.LayerNorm, nn.RMSNorm)) or type(owner).__name__.endswith("Norm"):
        if attr == "bias" or getattr(config, "layernorm_zero_centered_gamma", False):
            return _Choice(zeros(), None, "norm preset")
        return _Choice(ones(), None, "norm preset")
    if isinstance(owner, _tp_module_types()):
        if attr == "bias":
            return _Choice(zeros(), None, "zero bias")
        if target.owner_path.endswith(("linear_proj", "linear_fc2")):
            method = config.output_layer_init_method
            return _Choice(None, method, "config.output_layer_init_method")
        return _Choice(None, config.init_method, "config.init_method")
    if type(owner).__name__.endswith("Router") and attr in ("weight", "bias"):
        return _Choice(None, config.init_method, "config.init_method")
    return None


def _check_init_method(method: object, source: str, allowed: str) -> InitMethod:
    """``method`` if it is an init callable ``fn(tensor)``, else a TypeError that names
    ``source`` (``config.init_method``, ``rules['*']``) and what is ``allowed``: a class
    (``shardinit.init.Normal`` itself), a non-callable, or a callable whose signature does
    not take one tensor (which would fail inside the user's code, naming nothing)."""
    if isinstance(method, type):
        example = ""
        if issubclass(method, Initializer):
            example = " (an instance, e.g. shardinit.init.normal(0.0, 0.02), not the class)"
        raise TypeError(f"{source} must be {allowed}, got the class {method.__qualname__}{example}")
    if not callable(method):
        raise TypeError(f"{source} must be {allowed}, got {type(method).__name__} {method!r}")
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):  # no signature to read (some builtins): called as is
        return cast(InitMethod, method)
    try:
        signature.bind(torch.empty(0))
    except TypeError as error:
        name = getattr(method, "__qualname__", type(method).__qualname__)
        bare = signature.replace(
            parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
            return_annotation=signature.empty,
        )
        raise TypeError(
            f"{source} must be {allowed}: it is called with one tensor, but {name} takes "
            f"{bare} ({error})"
        ) from None
    return cast(InitMethod, method)


#: What a rule's value may be.
_RULE_VALUES = "a shardinit.init initializer or an init callable fn(tensor)"
#: What the TransformerConfig's init methods may be.
_CONFIG_METHODS = (
    "an init callable fn(tensor), as TransformerConfig sets from init_method_std "
    "(e.g. functools.partial(torch.nn.init.normal_, mean=0.0, std=0.02))"
)


def _check_rule_value(key: RuleKey, value: object) -> None:
    if not isinstance(value, Initializer):
        _check_init_method(value, f"rules[{key!r}]", _RULE_VALUES)


class MegatronChooser:
    """Megatron's choice hook (see :class:`~shardinit._integration.plan.Chooser`): the
    first matching rule, else the ``init_method`` Megatron gave the weight (recorded
    by :func:`deferred_init`), else a preset from the ``TransformerConfig``."""

    def __init__(self, config: Any, rules: MegatronRules | None) -> None:
        self.config = config
        self.rules = rule_pairs(rules, _check_rule_value)

    def rule_for(self, target: Target) -> RuleKey | None:
        owner, attr = target.holders[0]
        return first_rule(self.rules, target.name, owner, attr)

    def _choose(self, target: MegatronTarget) -> _Choice | None:
        key = self.rule_for(target)
        if key is not None:
            value = next(value for rule, value in self.rules if rule is key)
            if isinstance(value, Initializer):
                return _Choice(value, None, f"rule {key!r}")
            return _Choice(None, cast(InitMethod, value), f"rule {key!r}")  # checked callable
        recorded = getattr(target.slot.param, _INIT_METHOD_ATTR, None)
        if recorded is not None and target.name != _EMBEDDING_NAME:
            return _Choice(None, recorded, "recorded init_method")
        return _preset(target, self.config)

    def values(self, target: Target, record: ParamRecord | None, seed: int) -> Values | None:
        assert isinstance(target, MegatronTarget) and record is None
        choice = self._choose(target)
        if choice is None:
            return None
        return Values(_record(choice, target.name, target.global_shape, target.dtype), seed)

    def missing_error(self, missing: Sequence[str]) -> str:
        return (
            f"shardinit.megatron.materialize: no rule and no Megatron preset for "
            f"{len(missing)} parameter(s): {listing(missing)}. Pass rules, e.g. "
            "rules={'decoder.layers.*.mlp.foo.weight': shardinit.init.normal(0.0, 0.02)}"
        )


class _MetaHolder(nn.Module):
    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(shape, dtype=dtype, device="meta"))


@cached
def _captured_method(method: InitMethod, shape: tuple[int, ...], dtype: torch.dtype) -> ParamRecord:
    """What ``method`` does to a tensor of GLOBAL ``shape``, captured once on meta."""
    holder = _MetaHolder(shape, dtype)
    record = capture_init(holder, lambda: method(holder.weight)).params.get("weight")
    if record is None:
        raise ShardInitError(f"init method {method!r} did not write the tensor it was given")
    return record


def _record(choice: _Choice, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> ParamRecord:
    if choice.initializer is not None:
        ops = base_ops(choice.initializer, shape)
        return ParamRecord(name, shape, dtype, ops)
    allowed = _CONFIG_METHODS if choice.source.startswith("config.") else _RULE_VALUES
    method = _check_init_method(choice.method, choice.source, allowed)
    try:
        record = _captured_method(method, shape, dtype)
    except TypeError:  # an unhashable callable: capture it without the cache
        record = _captured_method.__wrapped__(method, shape, dtype)
    if not record.covers_all():
        raise ShardInitError(
            f"{name}: {choice.source} {choice.method!r} sets only part of the tensor; "
            "give the parameter a rule that sets all of it"
        )
    return replace(record, name=name)


# --------------------------------------------------------------------------- public


#: What the presets read of the TransformerConfig.
_CONFIG_ATTRS = ("init_method", "output_layer_init_method", "embedding_init_method")


def _chunks(model_or_chunks: nn.Module | Sequence[nn.Module]) -> list[nn.Module]:
    if isinstance(model_or_chunks, nn.Module):
        return [model_or_chunks]
    chunks = list(model_or_chunks) if isinstance(model_or_chunks, Iterable) else []
    if not chunks or not all(isinstance(chunk, nn.Module) for chunk in chunks):
        raise TypeError(
            "model_or_chunks must be an nn.Module or a non-empty list of them (virtual "
            f"pipeline chunks), got {model_or_chunks!r}"
        )
    return chunks


def materialize(
    model_or_chunks: nn.Module | Sequence[nn.Module],
    *,
    seed: int,
    config: Any,
    rules: MegatronRules | None = None,
) -> nn.Module | list[nn.Module]:
    """Fills every local partition of a Megatron-core model in place, from stream v1.

    The gathered values are bit-identical for every TP, PP, VPP and EP size, and equal
    ``shardinit.full(ParamSpec(canonical name, global shape, dtype, initializer))``
    (see :func:`partition_names`). No rank allocates a full tensor of a partitioned
    parameter; there is no communication.

    Args:
        model_or_chunks: the model, or this rank's list of virtual-pipeline chunks, built
            inside :func:`deferred_init` (megatron-core 0.16) or with
            ``perform_initialization=False`` (releases that tag weights), on CPU or CUDA,
            before any Megatron optimizer is built.
        seed: the run's seed, an int in [0, 2^64).
        config: the ``TransformerConfig`` the model was built with: the preset uses its
            ``init_method``, ``output_layer_init_method`` (``linear_proj``,
            ``linear_fc2``), ``embedding_init_method`` and
            ``layernorm_zero_centered_gamma``.
        rules: ordered ``{key: initializer}``, first match wins, over the recorded init
            methods and the preset. Keys as in :func:`shardinit.materialize` (canonical
            name globs, module types, ``(module type, attribute glob)``); values a
            ``shardinit.init`` initializer or an init callable ``fn(tensor)``.

    Returns:
        ``model_or_chunks``, filled in place.

    Raises:
        TypeError: arguments of the wrong type (``config`` without the init methods).
        ShardInitError: untagged tensor-parallel weights, parameters a Megatron
            optimizer already copied, fp8/quantized parameters, unsupported module
            types (GroupedMLP, Transformer Engine), parameters with no rule and no
            preset. Raised before any value is written.
        UnsupportedInitOpError: an init callable that cannot be replayed shard-locally.
    """
    chunks = _chunks(model_or_chunks)
    seed = check_seed(seed)
    if not all(hasattr(config, attr) for attr in _CONFIG_ATTRS):
        raise TypeError(
            "config must be the model's TransformerConfig (with "
            f"{', '.join(_CONFIG_ATTRS)}), got {type(config).__name__}"
        )
    chooser = MegatronChooser(config, rules)
    if getattr(config, "fp8_param", False):
        raise ShardInitError(
            "config.fp8_param is set: fp8 primary weights are quantized; shardinit fills "
            "fp32/bf16/fp16 weights only"
        )
    targets = megatron_targets(chunks)
    root = chunks[0] if len(chunks) == 1 else nn.ModuleList(chunks)
    plan = make_plan(root, targets, seed=seed, chooser=chooser, captured=None, write_computed=False)
    plan.carry_out(root, overwrite=False, buffer_init=None, device=None)
    return model_or_chunks if isinstance(model_or_chunks, nn.Module) else chunks
