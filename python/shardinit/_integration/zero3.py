"""DeepSpeed ZeRO-3: padded flat partitions as a region source, and a build context.

ZeRO-3 partitions every parameter on its own. ``ds_shape`` / ``ds_numel`` keep the
GLOBAL shape; the row-major flattened tensor is padded to a multiple of the partition
group's size ``W`` and rank ``r`` holds flat elements ``[r * ps, r * ps + ps)`` in
``ds_tensor`` (``ps = ds_tensor.ds_numel``), of which ``[r * ps, ds_numel)`` are real
and the rest is padding that DeepSpeed leaves uninitialized. hpZ's
``ds_secondary_tensor`` is the same over ``ds_zero_param_process_group``. shardinit
fills the real part like FSDP1's flat shards and zeroes the padding.

The fill must happen before ``deepspeed.initialize``: the ZeRO-3 optimizer copies
``ds_tensor`` into its fp32 partitions there, and a later fill would leave the optimizer
stepping from the unfilled values.

Every DeepSpeed attribute read here was checked against deepspeed 0.19.8
(``runtime/zero/partition_parameters.py``, ``stage3.py``); this module is their one home.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._names import ModuleWalk, ParamSlot, listing
from .._program import Writer
from .._torch_compat import NN_INIT_FILLS
from ..errors import ShardInitError
from ..spec import SUPPORTED_DTYPES
from .targets import OwnLayout, Target, Values

#: The DeepSpeed release the attributes below were checked against.
CHECKED_DEEPSPEED = "0.19.8"

#: On a parameter partitioned by no_broadcast_init and not filled yet (its partitions
#: hold uninitialized memory): materialize fills it without overwrite=True.
_UNFILLED_ATTR = "_shardinit_unfilled"


def is_zero3_param(param: torch.Tensor) -> bool:
    """Whether ``param`` was converted by ``deepspeed.zero.Init`` (ZeRO-3)."""
    return hasattr(param, "ds_tensor") and hasattr(param, "ds_shape")


# --------------------------------------------------------------------------- partitions


@dataclass(eq=False)
class FlatPartition:
    """This rank's padded flat partition of one parameter.

    Attributes:
        tensor: the 1-D partition (``ds_tensor`` or ``ds_secondary_tensor``).
        start: the first flat element of the parameter it holds.
        count: how many real elements it holds; the rest of ``tensor`` is padding.
    """

    tensor: torch.Tensor
    start: int
    count: int

    def fill(self, values: Values, writer: Writer) -> None:
        data = self.tensor.data
        if self.count > 0:
            values.write_flat(writer, self.start, self.start + self.count, data[: self.count])
        data[self.count :].zero_()  # DeepSpeed leaves the padding uninitialized


def _partition(tensor: torch.Tensor, group: Any, numel: int) -> FlatPartition:
    import torch.distributed as dist

    size = int(getattr(tensor, "ds_numel"))  # noqa: B009 - a DeepSpeed attribute
    start = size * int(dist.get_rank(group=group))
    return FlatPartition(tensor, start, max(0, min(numel - start, size)))


@dataclass(eq=False)
class Zero3Target(OwnLayout):
    """One ZeRO-3 parameter: its primary (and hpZ secondary) flat partition on this rank.
    Implements :class:`~shardinit._integration.targets.Target`."""

    slot: ParamSlot
    partitions: tuple[FlatPartition, ...]
    global_shape: tuple[int, ...]
    dtype: torch.dtype
    holders: Sequence[tuple[nn.Module, str]] = field(default=())

    @property
    def name(self) -> str:
        return self.slot.name

    def is_filled(self) -> bool:
        # A partition made by stock zero.Init holds the module's own init values.
        return not getattr(self.slot.param, _UNFILLED_ATTR, False)

    def allocate(self, device: torch.device) -> None:
        del device  # DeepSpeed allocated the partitions

    def fill(self, values: Values, writer: Writer) -> None:
        for partition in self.partitions:
            partition.fill(values, writer)
        if hasattr(self.slot.param, _UNFILLED_ATTR):
            delattr(self.slot.param, _UNFILLED_ATTR)


def _refusal(name: str, param: Any, owner: nn.Module) -> str | None:
    """Why the ZeRO-3 parameter ``param`` cannot be filled now, or None."""
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum
    from deepspeed.runtime.zero.partition_parameters import (
        ZeroParamStatus,
    )

    # The engine's parameter hooks number every module (``ds_id``); zenflow's optimizer
    # also tags parameters (``group_id``).
    if hasattr(owner, "ds_id") or hasattr(param, "group_id"):
        return (
            f"{name}: deepspeed.initialize already ran: its ZeRO-3 optimizer copied the "
            "partitions into its fp32 state, which a fill now would not reach; fill "
            "before deepspeed.initialize"
        )
    if param.ds_status != ZeroParamStatus.NOT_AVAILABLE:
        return (
            f"{name}: gathered right now ({param.ds_status.name}); fill outside "
            "GatheredParameters and forward passes"
        )
    tensors = [param.ds_tensor, getattr(param, "ds_secondary_tensor", None)]
    for tensor in (t for t in tensors if t is not None):
        if getattr(tensor, "final_location", None) == OffloadDeviceEnum.nvme:
            return f"{name}: offloaded to NVMe; shardinit fills partitions in memory only"
        if hasattr(tensor, "ds_quant_scale") or tensor.dtype != param.dtype:
            return (
                f"{name}: a quantized partition ({tensor.dtype}); shardinit fills "
                "unquantized weights only"
            )
    if param.ds_tensor is None:
        return f"{name}: not partitioned (no ds_tensor)"
    if param.dtype not in SUPPORTED_DTYPES:
        return f"{name}: dtype {param.dtype} is not one of stream format v1"
    return None


def zero3_targets(
    root: nn.Module, walk: ModuleWalk | None = None
) -> tuple[list[Target], set[tuple[int, str]]]:
    """The ZeRO-3 parameters under ``root`` as targets (tied ones once), and their
    holders. A region source of :func:`shardinit.materialize`. ``walk``: ``root``'s,
    where the caller has it.

    Raises:
        ShardInitError: ``root`` is a DeepSpeed engine or a parameter cannot be filled
            now (after ``deepspeed.initialize``, gathered, NVMe-offloaded, quantized).
    """
    if type(root).__name__ == "DeepSpeedEngine":
        raise ShardInitError(
            "materialize: this is a DeepSpeedEngine: deepspeed.initialize already copied "
            "the unfilled partitions into the optimizer; fill the model before it"
        )
    walk = ModuleWalk(root) if walk is None else walk
    # The walk's slots: whether a holder is skipped depends on its parameter only.
    slots = [slot for slot in walk.slots if is_zero3_param(slot.param)]
    if not slots:
        return [], set()
    refused = [
        reason for slot in slots if (reason := _refusal(slot.name, slot.param, slot.owners[0][0]))
    ]
    if refused:
        raise ShardInitError(
            f"materialize: {len(refused)} ZeRO-3 parameter(s) cannot be filled: {listing(refused)}"
        )
    targets: list[Target] = []
    managed: set[tuple[int, str]] = set()
    for slot in slots:
        param: Any = slot.param
        numel = int(param.ds_numel)
        partitions = [_partition(param.ds_tensor, param.ds_process_group, numel)]
        if getattr(param, "ds_secondary_tensor", None) is not None:
            group = param.ds_zero_param_process_group
            partitions.append(_partition(param.ds_secondary_tensor, group, numel))
        shape = tuple(int(size) for size in param.ds_shape)
        targets.append(Zero3Target(slot, tuple(partitions), shape, param.dtype, slot.owners))
        managed |= {(id(module), attr) for module, attr in slot.owners}
    return targets, managed


def flat_partition_of(param: torch.Tensor) -> tuple[torch.Tensor, int, Any, tuple[int, ...]] | None:
    """For a partitioned ZeRO-3 parameter: (the real elements of this rank's partition,
    the flat index of the first, the partition group, the GLOBAL shape); else None
    (not ZeRO-3, or gathered right now: then the parameter itself is whole)."""
    if not is_zero3_param(param) or param.numel() == int(param.ds_numel):  # type: ignore[attr-defined]
        return None
    holder: Any = param
    part = _partition(holder.ds_tensor, holder.ds_process_group, int(holder.ds_numel))
    shape = tuple(int(size) for size in holder.ds_shape)
    return part.tensor.detach()[: part.count], part.start, holder.ds_process_group, shape


# --------------------------------------------------------------------------- build context

#: torch.nn.init functions made no-ops while modules are built (as transformers'
#: ``no_init_weights``): shardinit fills every partition afterwards. Every fill function
#: of torch.nn.init (the names capture translates too).
_SKIPPED_INIT = NN_INIT_FILLS


@contextlib.contextmanager
def skipped_torch_init() -> Iterator[None]:
    """``torch.nn.init``'s fill functions return their tensor untouched (not
    thread-safe with other code using ``torch.nn.init`` in the process)."""

    def skip(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor

    saved = {name: getattr(torch.nn.init, name) for name in _SKIPPED_INIT}
    for name in saved:
        setattr(torch.nn.init, name, skip)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)


def tie_as_transformers(module: nn.Module) -> None:
    """Ties ``module`` as transformers' post-init does, if it is a transformers model.

    transformers ties a model's weights (``tie_word_embeddings``) in ``post_init``'s
    ``init_weights``, which ``no_init_weights`` turns off; its own ZeRO-3 path
    (``from_config``) calls ``model.tie_weights()`` afterwards. Called as each module's
    construction ends (zero.Init's post-init hook), this keeps a model built under
    ``no_init_weights()`` and :func:`shardinit.deepspeed.Init` tied like the library's
    (idempotent when post-init already tied it). transformers is not imported here.
    """
    modeling = sys.modules.get("transformers.modeling_utils")
    pretrained = getattr(modeling, "PreTrainedModel", None)
    if isinstance(pretrained, type) and isinstance(module, pretrained):
        model: Any = module
        model.tie_weights()


_INIT_CLASS: list[type] = []


def _no_broadcast_class() -> type:
    """A ``deepspeed.zero.Init`` subclass whose partitioning skips the broadcast from
    rank 0 (made once, on first use: deepspeed is imported lazily)."""
    if _INIT_CLASS:
        return _INIT_CLASS[0]
    import deepspeed

    class NoBroadcastInit(deepspeed.zero.Init):  # type: ignore[misc]
        """``zero.Init`` that partitions each parameter without broadcasting it from
        rank 0 (every rank's values are filled by shardinit afterwards), with
        ``torch.nn.init`` a no-op while modules are built."""

        def _zero_init_param(self, param: nn.Parameter) -> None:
            # deepspeed 0.19.8: convert, broadcast from rank 0, partition. No broadcast.
            self._convert_to_deepspeed_param(param)
            param.partition()  # type: ignore[attr-defined]
            setattr(param, _UNFILLED_ATTR, True)

        def _post_init_method(self, module: nn.Module) -> None:
            super()._post_init_method(module)
            tie_as_transformers(module)

        def __enter__(self) -> None:
            self._shardinit_skip = skipped_torch_init()
            self._shardinit_skip.__enter__()
            super().__enter__()

        def __exit__(self, *exc_info: Any) -> Any:
            try:
                return super().__exit__(*exc_info)
            finally:
                self._shardinit_skip.__exit__(*exc_info)

    _INIT_CLASS.append(NoBroadcastInit)
    return NoBroadcastInit


#: ``deepspeed.zero.Init``'s leading parameters in order (0.19.8), up to its two config
#: arguments: a config given positionally is checked like one given by keyword.
_ZERO_INIT_LEADING = (
    "module",
    "data_parallel_group",
    "mem_efficient_linear",
    "remote_device",
    "pin_memory",
    "config_dict_or_path",
    "config",  # deprecated by DeepSpeed in favour of config_dict_or_path
)
_CONFIG_ARGS = ("config_dict_or_path", "config")


def _is_base64_text(text: str) -> bool:
    """Whether DeepSpeed would read ``text`` as a base64-encoded config (its third form)."""
    try:
        base64.urlsafe_b64decode(text).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def _checked_config(arg: str, config: Any) -> Any:
    """``config`` as DeepSpeed reads it: a dict, None, a base64 str, or the path of an
    existing file as a str (``os.fspath``: DeepSpeed's ``in`` test fails on a Path)."""
    if config is None or isinstance(config, dict):
        return config
    if not isinstance(config, (str, os.PathLike)):
        raise TypeError(
            f"{arg} must be a dict, a path (str or os.PathLike) or None, "
            f"got {type(config).__name__}"
        )
    path = os.fspath(config)
    if os.path.isfile(path):
        return path
    if isinstance(config, str) and _is_base64_text(config):
        return config
    raise ShardInitError(
        f"{arg}: no file at {path!r} (DeepSpeed takes a dict, the path of an existing "
        "JSON config file, or a base64-encoded config)"
    )


def no_broadcast_init(*args: Any, **kwargs: Any) -> Any:
    """``deepspeed.zero.Init(*args, **kwargs)`` without the full-size init and the
    broadcast: see :func:`shardinit.deepspeed.Init`.

    Raises:
        TypeError: ``config_dict_or_path`` (or DeepSpeed's deprecated ``config``), by
            keyword or position, that is not a dict, a path or None (checked before
            deepspeed is imported; DeepSpeed checks the rest).
        ShardInitError: a path to no file (that is not a base64-encoded config either).
    """
    positional = list(args)
    for arg in _CONFIG_ARGS:
        index = _ZERO_INIT_LEADING.index(arg)
        if index < len(positional):
            positional[index] = _checked_config(arg, positional[index])
        elif arg in kwargs:
            kwargs[arg] = _checked_config(arg, kwargs[arg])
    init_class: Callable[..., Any] = _no_broadcast_class()
    return init_class(*positional, **kwargs)
