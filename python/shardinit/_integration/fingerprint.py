"""Layout-independent fingerprints of (sharded) parameters, computed without gathering.

The fingerprint of a parameter is

    sum over elements e of H(global_flat_index(e), bits(e))   (mod 2^64)
    H(i, b) = mix64((i * 0x9E3779B97F4A7C15 + 0x5348415244494E49) xor b)   (mod 2^64)

hashed together with the dtype and the GLOBAL shape, where ``mix64`` is the SplitMix64
finalizer and ``bits(e)`` is the element's raw bit pattern. Each rank sums
the elements it holds; the partial sums are added across ranks with one
``all_reduce(SUM)``. Addition is commutative, so the result is the same for every world
size, mesh shape and placement (FSDP1-style flat shards, FSDP2 ``Shard(0)``, FSDP2 + TP
``_StridedShard``, replicated copies) and two runs on different clusters can compare
their starting weights by exchanging 16 hex digits. ``H`` is a bijection of the bits
for a fixed index, so changing any single element always changes the sum.

Format "fp1" (this module); a change of any rule here is a new format name.

Example:
    >>> import torch, shardinit
    >>> w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    >>> shardinit.fingerprint(w) == shardinit.fingerprint(w.clone())
    True
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist

from .. import _core
from .._names import canonical_name
from .._torch_compat import is_strided_shard
from ..errors import ShardInitError
from .fsdp1 import fsdp1_targets
from .placements import Run, is_dtensor, local_runs
from .targets import FlatTarget
from .zero3 import flat_partition_of

__all__ = ["fingerprint", "fingerprint_model", "model_digest"]

#: Name of the fingerprint format; part of every digest.
FINGERPRINT_FORMAT = "fp1"

# Elements hashed per step: bounds the uint64 temporaries to a few tens of MB.
_CHUNK = 1 << 20
_MASK64 = (1 << 64) - 1
_MASK32 = (1 << 32) - 1

# numpy's uint64 arithmetic wraps mod 2^64 and shifts logically: exactly the hash's
# arithmetic, and about 10x faster than emulating it with torch's int64 ops on CPU.
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_INDEX_SALT = np.uint64(0x5348415244494E49)  # "SHARDINI"
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)

# What fingerprint() returns: model_digest accepts nothing else.
_FINGERPRINT_RE = re.compile(r"[0-9a-f]{16}")

_BITS_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

U64Array = npt.NDArray[np.uint64]


def _mix64_(z: U64Array) -> U64Array:
    """The SplitMix64 finalizer (a bijection of 64-bit words), in place."""
    z ^= z >> _S30
    z *= _MIX1
    z ^= z >> _S27
    z *= _MIX2
    z ^= z >> _S31
    return z


def _element_hash_(index: U64Array, bits: U64Array) -> U64Array:
    """``H(i, b) = mix64((i * golden + salt) xor b)``, overwriting ``index``. For a fixed
    index it is a bijection of ``b``: changing one element always changes the sum."""
    index *= _GOLDEN
    index += _INDEX_SALT
    index ^= bits
    return _mix64_(index)


def _sum_mod64(hashes: U64Array) -> int:
    """Sum of the words mod 2^64 (numpy's uint64 sum wraps)."""
    return int(hashes.sum(dtype=np.uint64))


def _bits_of(values: torch.Tensor) -> U64Array:
    """Raw bit patterns of ``values`` (1-D) as uint64, on the host, in a new array.

    Always a copy: handing the parameter's own storage to numpy would make it
    non-resizable, and FSDP resizes storages (``summon_full_params``, resharding).
    """
    if values.dtype.is_complex:
        raise ShardInitError(f"fingerprint does not support complex dtype {values.dtype}")
    if values.dtype == torch.bool:
        values = values.to(torch.uint8)
    size = values.element_size()
    widened = values.contiguous().view(_BITS_DTYPE[size]).to("cpu", torch.int64, copy=True)
    raw: U64Array = widened.numpy().view(np.uint64)
    if size < 8:
        raw &= np.uint64((1 << (8 * size)) - 1)  # sign extension -> the unsigned pattern
    return raw


def _partial_sum(
    local: torch.Tensor,
    global_shape: Sequence[int],
    dim_indices: Sequence[torch.Tensor],
) -> int:
    """Sum of H over the local elements, mod 2^64.

    ``local`` holds the global elements whose index along dim d is ``dim_indices[d]``
    (a cartesian product, as for every DTensor Shard / _StridedShard / Replicate layout).
    """
    ndim = len(global_shape)
    if local.numel() == 0:
        return 0
    if ndim == 0:
        index = np.zeros(1, dtype=np.uint64)
        return _sum_mod64(_element_hash_(index, _bits_of(local.reshape(1))))
    global_strides = [math.prod(global_shape[d + 1 :]) for d in range(ndim)]
    # contribution of dim d's local position to the global flat index
    contributions = [
        idx.cpu().numpy().astype(np.uint64) * np.uint64(stride)
        for idx, stride in zip(dim_indices, global_strides, strict=True)
    ]
    local_shape = list(local.shape)
    # Split the dims into outer [0, k) and inner [k, ndim) with an inner block <= _CHUNK.
    split = ndim
    while split > 0 and math.prod(local_shape[split - 1 :]) <= _CHUNK:
        split -= 1
    inner = np.zeros((), dtype=np.uint64)
    for d in range(split, ndim):
        shape = [1] * (ndim - split)
        shape[d - split] = local_shape[d]
        inner = inner + contributions[d].reshape(shape)
    inner_flat = inner.reshape(-1)
    inner_numel = math.prod(local_shape[split:])
    outer_numel = math.prod(local_shape[:split])
    values = local.detach().contiguous().reshape(outer_numel, inner_numel)
    batch = max(1, _CHUNK // inner_numel)
    total = 0
    for start in range(0, outer_numel, batch):
        stop = min(outer_numel, start + batch)
        position = np.arange(start, stop, dtype=np.int64)
        outer = np.zeros(stop - start, dtype=np.uint64)
        for d in range(split - 1, -1, -1):
            outer += contributions[d][position % local_shape[d]]
            position //= local_shape[d]
        index = (outer[:, None] + inner_flat[None, :]).reshape(-1)
        bits = _bits_of(values[start:stop].reshape(-1))
        total = (total + _sum_mod64(_element_hash_(index, bits))) & _MASK64
    return total


def _digest(dtype: torch.dtype, global_shape: Sequence[int], total: int) -> str:
    header = f"shardinit-{FINGERPRINT_FORMAT}\0{dtype}\0{tuple(int(s) for s in global_shape)}\0"
    payload = header.encode() + total.to_bytes(8, "little")
    return hashlib.sha256(payload).hexdigest()[:16]


def _dtensor_layout(
    tensor: Any,
) -> tuple[torch.Tensor, list[torch.Tensor], bool, Any]:
    """For a DTensor: (local tensor, per-dim global indices, contributes?, mesh).

    The global indices come from :func:`placements.local_runs`, the geometry materialize
    fills by (checked against torch's own splitting in the placements tests).
    """
    from torch.distributed.tensor.placement_types import Replicate, Shard

    mesh = tensor.device_mesh
    placements = tuple(tensor.placements)
    global_shape = tuple(tensor.shape)
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        # This rank is not in the mesh: it holds nothing and contributes nothing.
        empty = torch.empty(0, dtype=tensor.dtype, device="cpu")
        return empty, [torch.empty(0, dtype=torch.int64, device="cpu")], False, mesh
    for placement in placements:
        if not (isinstance(placement, (Shard, Replicate)) or is_strided_shard(placement)):
            raise ShardInitError(
                f"fingerprint supports Shard, _StridedShard and Replicate placements, got "
                f"{placement} (reduce Partial tensors first)"
            )
    # Replicated copies are counted once: by coordinate 0 along each replicated mesh dim.
    contributes = all(
        coordinate[mesh_dim] == 0
        for mesh_dim, placement in enumerate(placements)
        if isinstance(placement, Replicate)
    )
    runs = local_runs(global_shape, tuple(mesh.shape), tuple(coordinate), placements)
    local = tensor.to_local()
    local_sizes = tuple(sum(stop - start for start, stop in dim_runs) for dim_runs in runs)
    if tuple(local.shape) != local_sizes:
        raise ShardInitError(
            f"local shard has shape {tuple(local.shape)} but its placements {placements} "
            f"give {local_sizes} (padded shards are not supported)"
        )
    dim_indices = [_indices(dim_runs) for dim_runs in runs]
    return local, dim_indices, contributes, mesh


def _indices(runs: Sequence[Run]) -> torch.Tensor:
    """The global indices that ``runs`` spell out, in local order."""
    parts = [torch.arange(start, stop, dtype=torch.int64, device="cpu") for start, stop in runs]
    return torch.cat(parts) if parts else torch.empty(0, dtype=torch.int64, device="cpu")


def _reduce_group(mesh: Any, group: Any) -> Any:
    if group is not None:
        return group
    if not hasattr(mesh, "ndim"):  # a process group already (ZeRO-3 partitions)
        return mesh
    if mesh.ndim == 1:
        return mesh.get_group()
    if mesh.size() == dist.get_world_size():
        return dist.group.WORLD
    raise ShardInitError(
        f"the DTensor's {mesh.ndim}-d mesh does not span the world; pass group= covering "
        "every rank of the mesh"
    )


def _dense_values(tensor: torch.Tensor, what: str) -> torch.Tensor:
    """``tensor`` as a strided tensor whose elements are its values (a negative view
    resolved: ``_neg_view(x)`` holds the values of ``-x``), or a refusal naming ``what``:
    the bits of a quantized, sparse or nested tensor are not its values, and reading them
    as if they were has killed the interpreter (a quantized tensor viewed as integers).

    Raises:
        ShardInitError: a quantized, nested or non-strided (sparse, mkldnn) tensor.
    """
    if tensor.is_nested:
        raise ShardInitError(
            f"fingerprint: {what} is a nested tensor ({tensor.layout}); fingerprint each of "
            "its tensors (tensor.unbind())"
        )
    if tensor.is_quantized:
        raise ShardInitError(
            f"fingerprint: {what} is quantized ({tensor.dtype}): its elements are integers "
            "with a scale, not values; fingerprint tensor.dequantize() or tensor.int_repr()"
        )
    if tensor.layout != torch.strided:
        raise ShardInitError(
            f"fingerprint: {what} has layout {tensor.layout}; only dense (torch.strided) "
            "tensors are fingerprinted: pass tensor.to_dense()"
        )
    return tensor.resolve_neg()


def _flat_part(tensor: Any) -> tuple[torch.Tensor, int, Any, tuple[int, ...]] | None:
    """For a flat part of a parameter (an FSDP1 unit's, a ZeRO-3 partition): (the local
    elements, the flat index of the first, the group holding the other parts or None,
    the GLOBAL shape); else None."""
    if isinstance(tensor, FlatTarget):
        count = tensor.stop - tensor.start
        local = tensor.shard.tensor.detach()[tensor.offset : tensor.offset + count]
        return local, tensor.start, tensor.shard.group, tensor.global_shape
    return flat_partition_of(tensor) if isinstance(tensor, torch.Tensor) else None


def _local_part(
    tensor: Any, what: str
) -> tuple[int, Any, torch.device, torch.dtype, tuple[int, ...]]:
    """(this rank's partial sum, group to reduce over or None, device, dtype, global shape);
    ``what`` names ``tensor`` in errors."""
    flat_part = _flat_part(tensor)
    if flat_part is not None:  # flat elements [start, start + count) of the parameter
        local, start, group, shape = flat_part
        local = _dense_values(local, what)
        flat = [torch.arange(start, start + local.numel(), dtype=torch.int64, device="cpu")]
        partial = _partial_sum(local, (math.prod(shape),), flat)
        return partial, group, local.device, local.dtype, shape
    if is_dtensor(tensor):
        local, dim_indices, contributes, mesh = _dtensor_layout(tensor)
        if local.is_meta:
            raise ShardInitError("fingerprint: the tensor is on the meta device (no values)")
        local = _dense_values(local, what)
        partial = _partial_sum(local, tensor.shape, dim_indices) if contributes else 0
        device = torch.device("cpu") if mesh.device_type == "cpu" else local.device
        return partial, mesh, device, tensor.dtype, tuple(tensor.shape)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"fingerprint needs a torch.Tensor or DTensor, got {type(tensor).__name__}")
    if tensor.is_meta:
        raise ShardInitError("fingerprint: the tensor is on the meta device (no values)")
    tensor = _dense_values(tensor, what)
    shape = tuple(tensor.shape)
    indices = [torch.arange(size, dtype=torch.int64, device="cpu") for size in shape]
    return _partial_sum(tensor, shape, indices), None, tensor.device, tensor.dtype, shape


def _all_reduce_sums(sums: list[int], group: Any, device: torch.device) -> list[int]:
    """Adds each 64-bit sum across ``group`` (as two 32-bit halves: no overflow for any
    world size below 2^31)."""
    halves = torch.tensor(
        [half for value in sums for half in (value & _MASK32, value >> 32)],
        dtype=torch.int64,
        device=device,
    )
    dist.all_reduce(halves, op=dist.ReduceOp.SUM, group=group)
    values = halves.tolist()
    return [(values[2 * i] + (values[2 * i + 1] << 32)) & _MASK64 for i in range(len(sums))]


def _fingerprint_many(named: Sequence[tuple[str, Any]], group: Any) -> list[str]:
    """The fingerprints of the ``(what, tensor)`` pairs of ``named`` (``what`` names the
    tensor in errors)."""
    parts = [_local_part(tensor, what) for what, tensor in named]
    totals = [part[0] for part in parts]
    # One all_reduce per (mesh or group, device) instead of one per parameter.
    batches: dict[tuple[int, str], list[int]] = {}
    reduce_args: dict[tuple[int, str], tuple[Any, torch.device]] = {}
    for position, (_, mesh, device, _, _) in enumerate(parts):
        if mesh is None:
            continue
        reduce_group = _reduce_group(mesh, group)
        batch_key = (id(reduce_group), str(device))
        batches.setdefault(batch_key, []).append(position)
        reduce_args[batch_key] = (reduce_group, device)
    for batch_key, positions in batches.items():
        reduce_group, device = reduce_args[batch_key]
        reduced = _all_reduce_sums([totals[p] for p in positions], reduce_group, device)
        for position, value in zip(positions, reduced, strict=True):
            totals[position] = value
    return [
        _digest(dtype, shape, total)
        for total, (_, _, _, dtype, shape) in zip(totals, parts, strict=True)
    ]


@torch.no_grad()
def fingerprint(tensor: Any, *, group: Any = None) -> str:
    """A 16-hex-digit digest of a tensor's values that does not depend on its layout.

    A plain tensor is taken as the whole parameter (no communication). For a DTensor,
    each rank hashes only its local elements at their GLOBAL flat indices (replicated
    copies are counted once) and the partial sums are added with one ``all_reduce``, so
    every rank of the mesh must call this. The digest is identical for the full tensor
    and for any Shard / _StridedShard / Replicate layout of it, on any world size, and it
    changes if any single element's bits change.

    Args:
        tensor: a ``torch.Tensor`` or ``torch.distributed.tensor.DTensor``.
        group: process group to reduce over; default the DTensor's 1-d mesh group, or the
            world for a multi-dimensional mesh spanning all ranks.

    Returns:
        16 lowercase hex digits (format "fp1": dtype, global shape and contents).

    Raises:
        TypeError: not a tensor.
        ShardInitError: a meta tensor, a complex dtype, a quantized, sparse or nested
            tensor, a Partial placement, or a multi-dimensional mesh smaller than the world
            without ``group``.

    Example:
        >>> import torch, shardinit
        >>> w = torch.zeros(4, 4)
        >>> a = shardinit.fingerprint(w)
        >>> w[3, 1] = 1e-30
        >>> a != shardinit.fingerprint(w)
        True
    """
    return _fingerprint_many([("tensor", tensor)], group)[0]


@torch.no_grad()
def fingerprint_model(
    module: torch.nn.Module, *, group: Any = None, buffers: bool = False
) -> dict[str, str]:
    """Fingerprints of every parameter of ``module`` (collective over its meshes).

    Args:
        module: a plain, FSDP2 (DTensor), FSDP2 + TP, FSDP1 or ZeRO-3 model with
            materialized weights (an FSDP1 unit's parameters are read from this rank's
            flat shard, outside ``summon_full_params``).
        group: see :func:`fingerprint`.
        buffers: also fingerprint the module's buffers.

    Returns:
        Canonical parameter name -> 16-hex-digit fingerprint, in ``named_parameters()``
        order (tied parameters once, under their first name).

    Raises:
        TypeError: ``module`` is not an ``nn.Module`` or ``buffers`` not a bool.
        ShardInitError: see :func:`fingerprint`.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(buffers, bool):
        raise TypeError(f"buffers must be a bool, got {type(buffers).__name__}")
    named = _named_parameter_parts(module)
    described = [f"parameter {name!r}" for name, _ in named]
    if buffers:
        held = [(canonical_name(name), buf) for name, buf in module.named_buffers()]
        named += held
        described += [f"buffer {name!r}" for name, _ in held]
    tensors = [tensor for _, tensor in named]
    digests = _fingerprint_many(list(zip(described, tensors, strict=True)), group)
    return dict(zip((name for name, _ in named), digests, strict=True))


def _named_parameter_parts(module: torch.nn.Module) -> list[tuple[str, Any]]:
    """(canonical name, what to fingerprint) for every parameter of ``module``, in
    ``named_parameters()`` order: the tensor itself, or for a parameter an FSDP1 unit
    holds, this rank's part of it (its :class:`FlatTarget`), at the place of the unit's
    flat parameter or of the original parameter (``use_orig_params``). A flat parameter
    read as a whole parameter would give every rank its own, wrong, fingerprint.

    Raises:
        ShardInitError: an FSDP1 unit unsharded right now (``summon_full_params``).
    """
    parts_of: dict[int, list[FlatTarget]] = {}
    for target in fsdp1_targets(module)[0]:
        parts_of.setdefault(id(target.shard.tensor), []).append(target)
        held = getattr(target.owner, target.attr, None)
        if isinstance(held, torch.Tensor):  # use_orig_params: a view into the flat shard
            parts_of.setdefault(id(held), []).append(target)
    named: list[tuple[str, Any]] = []
    done: set[int] = set()
    for name, param in module.named_parameters():
        if id(param) not in parts_of:
            named.append((canonical_name(name), param))
            continue
        for target in parts_of[id(param)]:
            if id(target) not in done:
                done.add(id(target))
                named.append((target.name, target))
    return named


def model_digest(fingerprints: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """One 16-hex-digit digest of a per-parameter summary (names and fingerprints).

    Raises:
        TypeError: not a mapping or iterable of (str name, str fingerprint) pairs.
        ShardInitError: a fingerprint that is not 16 lowercase hex digits, or a name
            that appears twice.

    Example:
        >>> model_digest({"w": "0" * 16}) == model_digest([("w", "0" * 16)])
        True
    """
    hasher = hashlib.sha256(f"shardinit-{FINGERPRINT_FORMAT}-model\0".encode())
    for name, digest in sorted(_checked_pairs(fingerprints)):
        hasher.update(f"{name}\0{digest}\n".encode())
    return hasher.hexdigest()[:16]


def _checked_pairs(fingerprints: Any) -> list[tuple[str, str]]:
    """The (name, fingerprint) pairs of ``fingerprints``, each checked: a name is a str,
    a fingerprint is what :func:`fingerprint` returns (16 lowercase hex digits)."""
    if isinstance(fingerprints, Mapping):
        items: Iterable[Any] = fingerprints.items()
    elif isinstance(fingerprints, Iterable) and not isinstance(fingerprints, (str, bytes)):
        items = fingerprints
    else:
        raise TypeError(
            "fingerprints must be a mapping or an iterable of (name, fingerprint) pairs, "
            f"got {type(fingerprints).__name__}"
        )
    pairs = []
    seen: dict[str, str] = {}
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(f"fingerprints must hold (name, fingerprint) pairs, got {item!r}")
        name, digest = item
        if not isinstance(name, str):
            raise TypeError(f"fingerprints: name must be a str, got {type(name).__name__} {name!r}")
        if not isinstance(digest, str):
            raise TypeError(
                f"fingerprints[{name!r}] must be a str, got {type(digest).__name__} {digest!r}"
            )
        if not _FINGERPRINT_RE.fullmatch(digest):
            raise ShardInitError(
                f"fingerprints[{name!r}] must be 16 lowercase hex digits (a "
                f"shardinit.fingerprint), got {digest!r}"
            )
        if name in seen:
            # Two entries for one parameter: not the summary of a model, whose names are
            # unique (fingerprint_model's), and the digest would count the name twice.
            raise ShardInitError(
                f"fingerprints: name {name!r} appears twice (with {seen[name]!r} and "
                f"{digest!r}); a model's summary holds each parameter once"
            )
        seen[name] = digest
        pairs.append((name, digest))
    return pairs


def shard_term(
    local: torch.Tensor, global_shape: Sequence[int], runs: Sequence[Sequence[Run]]
) -> int:
    """One shard's term of its parameter's fingerprint: the sum of ``H`` over the elements
    ``local`` holds, whose global indices along dim d are the runs ``runs[d]`` (local
    order). The terms of shards that hold every element once add up (mod 2^64) to the
    total that :func:`digest_of_total` turns into the :func:`fingerprint` digest.
    """
    return _partial_sum(local, global_shape, [_indices(dim_runs) for dim_runs in runs])


def digest_of_total(dtype: torch.dtype, global_shape: Sequence[int], total: int) -> str:
    """The fingerprint digest of a parameter whose shard terms add up to ``total``."""
    return _digest(dtype, global_shape, total & _MASK64)


def flat_range_term(values: torch.Tensor, start: int) -> int:
    """The term of the 1-D contiguous CPU ``values``, flat elements ``[start, start +
    len)`` of their tensor, as :func:`shard_term` gives it for that range (a checkpoint
    writer's piece): hashed by the core (``shardinit_core::fingerprint``, the same
    ``H``) in one pass over the bytes, with the GIL released, so the thread that writes
    a piece hashes it while the next piece is generated."""
    size = values.element_size()
    unsigned = values.view(_BITS_DTYPE[size]).numpy().view(f"u{size}")
    return int(_core.flat_range_term(unsigned, start)) & _MASK64
