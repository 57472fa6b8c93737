"""What materialize checks about trainer frameworks (docs/trainers.md).

accelerate's ``Accelerator.prepare(model, optimizer)`` under FSDP2 rebuilds the
optimizer's parameter list from a map keyed on each parameter's ``data_ptr()``. Every meta
tensor has ``data_ptr() == 0``, so a model prepared while still on meta leaves the
optimizer with one parameter in every slot, and nothing fails: training then updates
that one parameter only. ``prepare`` marks the model with ``_is_accelerate_prepared``;
a prepared model that still has meta parameters is refused here, before anything is
allocated (the safe order is shard, materialize, then prepare). FSDP1 models are left
alone: accelerate prepares them without an optimizer (``param_init_fn`` allocates, and
materialize fills them afterwards, which is the FSDP1 recipe).
"""

from __future__ import annotations

from torch import nn

from .._names import ModuleWalk, canonical_name, listing
from ..errors import ShardInitError
from .fsdp1 import uses_fsdp1

__all__ = ["refuse_prepared_on_meta"]

# The attribute accelerate sets on every model that Accelerator.prepare returned
# (accelerate 1.15 accelerator.py, end of prepare and of prepare_model).
_ACCELERATE_PREPARED = "_is_accelerate_prepared"


def refuse_prepared_on_meta(module: nn.Module, walk: ModuleWalk | None = None) -> None:
    """Raises if ``module`` (or a submodule) went through accelerate's ``prepare`` while
    some of its parameters are still on the meta device. ``walk``: ``module``'s, where
    the caller has it.

    Raises:
        ShardInitError: naming the meta parameters and the order to use.
    """
    modules = module.modules() if walk is None else walk.modules
    if not any(_prepared(m) for m in modules):
        return
    if uses_fsdp1(module, None if walk is None else walk.modules):
        return
    on_meta = [canonical_name(n) for n, p in module.named_parameters() if p.device.type == "meta"]
    if not on_meta:
        return
    raise ShardInitError(
        f"materialize: the model went through accelerate's Accelerator.prepare while "
        f"{len(on_meta)} parameter(s) were still on the meta device: {listing(on_meta)}. "
        "prepare maps the optimizer's parameters by data_ptr(), which is 0 for every meta "
        "tensor, so its optimizer now holds one parameter in every slot. Shard the model "
        "(fsdp2_prepare_model or fully_shard), materialize it, then create the optimizer "
        "and call prepare (docs/trainers.md)"
    )


def _prepared(module: nn.Module) -> bool:
    """Whether accelerate marked ``module`` as prepared. Read from its ``__dict__``
    (where prepare's assignment puts it) before its class: ``getattr`` of an attribute
    a module lacks goes through ``nn.Module.__getattr__`` and an AttributeError, about 5
    us a module, for every module of every model."""
    marked = vars(module).get(_ACCELERATE_PREPARED, _UNSET)
    if marked is _UNSET:
        marked = getattr(type(module), _ACCELERATE_PREPARED, False)
    return marked is True


#: No value in a module's ``__dict__``.
_UNSET = object()
