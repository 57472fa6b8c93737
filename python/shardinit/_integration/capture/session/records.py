"""What a capture returns: per parameter, the record (:class:`shardinit._program.
ParamRecord`) of the operations ``init_fn`` applied, and the buffers it computed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ...._names import buffer_holders
from ...._program import ParamRecord
from ....errors import ShardInitError

__all__ = ["CapturedInit", "write_buffers"]


@dataclass(frozen=True)
class CapturedInit:
    """The result of :func:`shardinit.capture_init`.

    Attributes:
        params: per canonical parameter name, what ``init_fn`` did to it (parameters it
            never touched are absent).
        buffers: canonical names of the meta buffers ``init_fn`` computed (their values
            are in ``buffer_values``).
        init_fn: the captured callable.
        buffer_values: per name in ``buffers``, the value ``init_fn`` computed for it
            during the capture (on the CPU; buffers were real tensors there).
        module_ref: a weak reference to the module captured on (see
            :meth:`captured_on`).
        aliases: which parameter each name of the module captured on held, as
            :func:`shardinit._names.holder_names` gives it (tied names share a value);
            materialize refuses a model tied differently.
        requires_grad: per canonical name, the ``requires_grad`` flag ``init_fn`` gave
            the parameter, where it changed it (materialize sets it).
        changed_params: canonical names of the parameters ``init_fn`` added, removed or
            gave another shape or dtype (:mod:`.created`): the module captured on holds
            them as eager init code leaves it (new ones on meta, with their records
            here), so materialize reads its parameters again after the capture.
    """

    params: Mapping[str, ParamRecord]
    buffers: tuple[str, ...]
    init_fn: Callable[[], object] = field(repr=False)
    buffer_values: Mapping[str, torch.Tensor] = field(default_factory=dict, repr=False)
    # The module captured on (weakly): its buffers are the ones computed.
    module_ref: Callable[[], nn.Module | None] = field(
        default=lambda: None, repr=False, compare=False
    )
    aliases: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    requires_grad: Mapping[str, bool] = field(default_factory=dict, repr=False)
    changed_params: tuple[str, ...] = field(default=(), repr=False)

    def captured_on(self, module: nn.Module) -> bool:
        """Whether this was captured on ``module`` itself (so the buffer values computed
        are ``module``'s)."""
        return self.module_ref() is module

    def __contains__(self, name: object) -> bool:
        return name in self.params

    def __getitem__(self, name: str) -> ParamRecord:
        return self.params[name]


def write_buffers(module: nn.Module, captured: CapturedInit) -> list[str]:
    """Writes the buffer values ``captured.init_fn`` computed during the capture into
    ``module``'s buffers (allocate them first: this is called after ``materialize``
    allocated the module). A value of another shape or dtype than the buffer it goes to
    (init code assigned a new tensor) replaces it, on the buffer's device.

    Returns:
        The canonical names of the written buffers.

    Raises:
        ShardInitError: a computed buffer is missing from ``module`` (another model).
    """
    written = []
    for holder in buffer_holders(module):
        value = captured.buffer_values.get(holder.name)
        if value is None:
            continue
        old = holder.tensor
        with torch.no_grad():
            if old.shape == value.shape and old.dtype == value.dtype and not old.is_meta:
                old.copy_(value)
            else:
                holder.module._buffers[holder.attr] = value.to(device=old.device).clone()
        written.append(holder.name)
    missing = sorted(set(captured.buffers) - set(written))
    if missing:
        raise ShardInitError(f"buffers {missing} computed by init_fn are not in this model")
    return sorted(set(written))
