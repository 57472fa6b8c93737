"""Collectives in init code on a followed tensor (``torch.distributed``'s functions,
which hand themselves to the dispatch): peft's LoRA on a tensor-parallel base
broadcasts its unsharded weights from the group's first rank, after every rank has
initialized them.

Under shardinit every rank records the same operations for such a tensor from the same
init code, and draws its random values from the stream at each element's own index, so
every rank holds the same values, and the broadcast changes nothing. That holds only
where the records are the same: each rank's record of the tensor is compared (a digest,
:func:`..._program.actions.ops_digest`, gathered over the collective's own group, as
every rank calls it), and the collective is followed as the identity where they agree;
where they differ (values computed from the rank), it is refused on every rank, naming
the tensor, the op and the line. ``all_reduce`` is the identity on equal values only
for ``MAX`` and ``MIN`` (a sum is W times the value; an average of W equal values,
summed in the backend's order, may round), or in a group of one. Any other collective
on a followed tensor moves other ranks' values in: refused, named."""

from __future__ import annotations

import inspect
from typing import Any

import torch.distributed as dist

from ...._program.actions import ops_digest
from .calls import NOT_MINE, Call, Mode

__all__ = ["COLLECTIVES", "follow_collective"]

#: The collectives followed as the identity on rank-invariant values.
_FOLLOWED = frozenset({"broadcast", "all_reduce"})
#: Every ``torch.distributed`` collective the dispatch routes here.
COLLECTIVES = _FOLLOWED | frozenset(
    {
        "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
        "all_to_all", "all_to_all_single", "reduce", "scatter", "gather", "send", "recv",
        "isend", "irecv",
    }
)  # fmt: skip
_IDENTITIES = ("MAX", "MIN")


def follow_collective(mode: Mode, call: Call) -> Any:
    """A collective on a parameter's stand-in or a temporary (module docstring), as its
    tensor or in its list of tensors; on buffers (their real values) or no followed
    tensor, left to torch."""
    followed = [t for t in mode.store.followed((call.args, call.kwargs)) if t.kind != "buffer"]
    if not followed:
        return NOT_MINE
    target = next((track for track in followed if track.kind == "param"), followed[0])
    if call.name not in _FOLLOWED:
        raise mode.store.fail(target, call.name, "it moves other ranks' values into the tensor")
    if getattr(type(target.base), "sharded", False):
        raise mode.store.fail(
            target, call.name, "a collective on a sharded (DTensor) parameter's stand-in"
        )
    bound = _bound(call)
    if bound.get("async_op", False):
        raise mode.store.fail(target, call.name, "async_op=True (call it synchronously)")
    group = bound.get("group")
    size = dist.get_world_size(group)
    op = bound.get("op", dist.ReduceOp.SUM)
    if call.name == "all_reduce" and size > 1 and not _is_identity(op):
        raise mode.store.fail(
            target, f"all_reduce(op={op})",
            f"on the {size} ranks' equal values it is not the value (a sum is {size} "
            "times it; an average, summed in the backend's order, may round): only "
            "MAX and MIN (or a group of one) leave equal values as they are",
        )  # fmt: skip
    digests: list[str | None] = [None] * size
    dist.all_gather_object(digests, ops_digest(target.ops), group=group)
    if len(set(digests)) > 1:
        raise mode.store.fail(
            target, call.name,
            f"its values are not the same on every rank of the group (init code "
            f"computed them differently on {len(set(digests))} kinds of rank), so "
            "the collective would change them, which shardinit's programs do not follow",
        )  # fmt: skip
    return None


def _bound(call: Call) -> dict[str, Any]:
    """The collective's arguments by name (as ``torch.distributed``'s signature binds
    them)."""
    function = getattr(dist, call.name)
    return dict(inspect.signature(function).bind(*call.args, **call.kwargs).arguments)


def _is_identity(op: Any) -> bool:
    return any(op == getattr(dist.ReduceOp, name) for name in _IDENTITIES)
