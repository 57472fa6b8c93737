"""The tensors a seed checkpoint saves, as ``save_pretrained`` saves them by default: for
a transformers model, its tied weights removed and its weight conversions reverted
(transformers 5 fuses MoE experts into ``mlp.experts.gate_up_proj`` in memory and saves
the Hub's per-expert ``mlp.experts.{i}.gate_proj.weight``), by transformers' own code;
for any other model, each state-dict key once (a tied parameter under its first key).

transformers' reverse conversions are run on meta tensors twice: once plainly (the
saved names, their order, and which of them share storage, which decide the split into
files exactly as in ``save_pretrained``), and once traced, to learn where in the
model's tensor each saved tensor's elements are. A saved tensor must be a view of one
model tensor (chunks, splits, selections, transposes): anything else is refused by
name, never written differently.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._layout import Run
from .._torch_compat import SUBCLASS_FUNCTION_DISABLED, is_alias_of, tree_leaves, tree_map
from ..errors import ShardInitError
from .checkpoint_plan import Entry


@dataclass(frozen=True)
class Saved:
    """One tensor of the files: its key and where its elements are in the model's.

    Attributes:
        key: the key in the file (the Hub's name).
        shape: its shape.
        source: the model's tensor it holds elements of.
        box: the region of ``source`` (a run per source dim), None for all of it.
        order: the source dims in the saved tensor's dim order (the dims of length 1
            left out), None when they keep the source's order.
        storage: what ``save_pretrained``'s split groups by (tensors sharing storage
            go in one file), None for a storage of its own.
        storage_bytes: the size the split counts for it.
    """

    key: str
    shape: tuple[int, ...]
    source: Entry
    box: tuple[Run, ...] | None = None
    order: tuple[int, ...] | None = None
    storage: object | None = None
    storage_bytes: int = 0

    @property
    def dtype(self) -> torch.dtype:
        return self.source.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def flat_start(self) -> int | None:
        """The first flat element of ``source`` if the saved tensor is one contiguous
        flat range of it in order (the whole source, or e.g. one expert), else None."""
        if self.box is None:
            return 0
        if self.order is not None and list(self.order) != sorted(self.order):
            return None
        shape = self.source.shape
        partial = False
        for (start, stop), size in reversed(list(zip(self.box, shape, strict=True))):
            if partial and stop - start != 1:
                return None
            if stop - start != size:
                partial = True
        strides = _strides(shape)
        return sum(start * stride for (start, _), stride in zip(self.box, strides, strict=True))


def saved_tensors(model: nn.Module, entries: Sequence[Entry]) -> list[Saved]:
    """The tensors ``save_pretrained`` would save for ``model`` (any other model: the
    entries that are not aliases), in its order.

    Raises:
        ShardInitError: a reverse conversion that is not a view of one model tensor,
            or that leaves elements of a model tensor out.
    """
    by_key = {entry.key: entry for entry in entries}
    if not _is_transformers_model(model):
        return [Saved(e.key, e.shape, e) for e in entries if e.alias_of is None]
    plain = _reverted(model, _meta_state(model, traced=False))
    traced = _reverted(model, _meta_state(model, traced=True))
    saved: list[Saved] = []
    for key, tensor in plain.items():
        view = traced[key]
        source_key = getattr(view, "source_key", None)
        if source_key is None or source_key not in by_key:
            op = getattr(view, "made_by", "an operation on several tensors")
            raise ShardInitError(
                f"save_seed_checkpoint: {key}: transformers' reverse weight conversion of "
                f"{type(model).__name__} makes it with {op}, not as a view of one model "
                "tensor; seed checkpoints of this model cannot be written in the Hub's layout"
            )
        saved.append(_located(key, view, by_key[source_key], tensor))
    _check_covered(saved, entries)
    return saved


def _located(key: str, view: torch.Tensor, source: Entry, plain: torch.Tensor) -> Saved:
    storage = plain.untyped_storage()
    storage_id = (storage._cdata, storage.nbytes())  # meta storages differ by their impl
    shape = tuple(view.shape)
    if shape == source.shape and view.is_contiguous() and view.storage_offset() == 0:
        return Saved(key, shape, source, storage=storage_id, storage_bytes=storage.nbytes())
    box, order = _box_of(key, source.shape, int(view.storage_offset()), view.stride(), shape)
    return Saved(key, shape, source, box, order, storage_id, storage.nbytes())


def _box_of(
    key: str,
    source_shape: tuple[int, ...],
    offset: int,
    strides: Sequence[int],
    shape: Sequence[int],
) -> tuple[tuple[Run, ...], tuple[int, ...] | None]:
    """The region of a contiguous tensor of ``source_shape`` that the view (``offset``,
    ``strides``, ``shape``) selects, and the source dims in the view's order."""
    source_strides = _strides(source_shape)
    starts = []
    rest = offset
    for stride in source_strides:
        starts.append(rest // stride if stride else 0)
        rest -= starts[-1] * stride
    lengths = [1] * len(source_shape)
    order: list[int] = []
    for size, stride in zip(shape, strides, strict=True):
        if size == 1:
            continue
        dims = [
            d
            for d, s in enumerate(source_strides)
            if s == stride and source_shape[d] > 1 and d not in order
        ]
        if len(dims) != 1 or starts[dims[0]] + size > source_shape[dims[0]]:
            raise ShardInitError(
                f"save_seed_checkpoint: {key}: transformers' reverse weight conversion gives "
                "a view this writer cannot place in its model tensor"
            )
        order.append(dims[0])
        lengths[dims[0]] = size
    box = tuple((start, start + length) for start, length in zip(starts, lengths, strict=True))
    return box, (None if order == sorted(order) else tuple(order))


def _check_covered(saved: Sequence[Saved], entries: Sequence[Entry]) -> None:
    """Every element of every saved model tensor is saved once."""
    counts: dict[str, int] = {}
    for tensor in saved:
        counts[tensor.source.key] = counts.get(tensor.source.key, 0) + tensor.numel
    wrong = [e.key for e in entries if e.key in counts and counts[e.key] != e.numel]
    if wrong:
        raise ShardInitError(
            f"save_seed_checkpoint: transformers' reverse weight conversion saves "
            f"{', '.join(wrong)} in parts that do not add up to the whole tensor; seed "
            "checkpoints of this model cannot be written in the Hub's layout"
        )


def _strides(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[d + 1 :]) for d in range(len(shape))]


def _is_transformers_model(model: nn.Module) -> bool:
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(model, transformers.PreTrainedModel)


class _Traced(torch.Tensor):
    """A meta tensor that knows which model tensor it views (``source_key``), or which
    operation made it from something else (``made_by``). ``contiguous``/``clone`` keep
    the view: the values are the same, and the view says where they are."""

    source_key: str | None = None
    made_by: str | None = None

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, _Traced)]
        if func in (torch.Tensor.contiguous, torch.Tensor.clone, torch.clone) and inputs:
            return inputs[0]
        with SUBCLASS_FUNCTION_DISABLED():
            out = func(*args, **kwargs)
        sources = {t.source_key for t in inputs}
        name = getattr(func, "__name__", str(func))

        def wrap(value: Any) -> Any:
            if not isinstance(value, torch.Tensor) or not inputs:
                return value
            traced = value.as_subclass(_Traced)
            aliased = any(is_alias_of(value, t) for t in inputs)
            if len(sources) == 1 and aliased:
                traced.source_key = next(iter(sources))
            else:
                traced.made_by = f"torch.{name}"
            return traced

        return tree_map(wrap, out)


def _meta_state(model: nn.Module, traced: bool) -> dict[str, torch.Tensor]:
    """``save_pretrained``'s state dict before the revert, on meta: the model's state
    dict without its tied weights (transformers' own function)."""
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state: dict[str, torch.Tensor] = {}
    for key, tensor in model.state_dict(keep_vars=True).items():
        meta = torch.empty(tensor.shape, dtype=tensor.dtype, device="meta")
        if traced:
            meta = meta.as_subclass(_Traced)
            meta.source_key = key
        state[key] = meta
    # The ties are read from the model: give the state dict the model's own sharing.
    first: dict[int, str] = {}
    for key, tensor in model.state_dict(keep_vars=True).items():
        state[key] = state[first.setdefault(id(tensor), key)]
    hf_model: Any = model
    result: dict[str, torch.Tensor] = remove_tied_weights_from_state_dict(state, hf_model)
    return result


def _reverted(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from transformers.core_model_loading import revert_weight_conversion

    hf_model: Any = model
    reverted: dict[str, torch.Tensor] = revert_weight_conversion(hf_model, state)
    return reverted


def config_files_as_save_pretrained(model: nn.Module) -> dict[str, bytes]:
    """What ``save_pretrained`` writes beside a transformers model's weights, by name:
    ``config.json`` (with its ``dtype`` and ``architectures``) and, for a model that
    generates, ``generation_config.json`` (its own steps, in its order, into a
    temporary directory: the bytes are its). Nothing for other models."""
    if not _is_transformers_model(model):
        return {}
    hf_model: Any = model
    config = hf_model.config
    config.dtype = str(hf_model.dtype).split(".")[1]
    config.architectures = [type(model).__name__.removeprefix("FSDP")]
    with tempfile.TemporaryDirectory(prefix="shardinit-config-") as scratch:
        config.save_pretrained(scratch)
        if hf_model.can_generate():
            hf_model.generation_config.save_pretrained(scratch)
        return {path.name: path.read_bytes() for path in sorted(Path(scratch).iterdir())}
