"""Stand-ins for a capture: what the model holds while ``init_fn`` runs, and how the
result is read back.

* Every parameter is replaced by a plain meta tensor of its GLOBAL shape (DTensors of
  FSDP2 / tensor parallelism included); the originals are put back afterwards.
* **Ties.** A tied parameter keeps one stand-in for all its holders, so init code writes
  the shared tensor as eager torch does (the last write wins) -- except the holders a
  model *declares* as tie targets, as transformers does (``all_tied_weights_keys``:
  target -> source). transformers builds a model on the CPU untied, initializes it, and
  ties it afterwards, so the source's init wins; those targets get stand-ins of their own,
  and the parameter takes what its source holder holds when ``init_fn`` returns (after
  the model's own ``tie_weights``, or untied). Writes that end up nowhere are reported.
* Every meta buffer is replaced by a real CPU tensor, so the values init code computes
  for it exist when ``init_fn`` returns; they are kept, and the meta buffer put back.
* A buffer that is real already (registered on the CPU in a model built on meta, or
  computed by its constructor) is followed in place: its stand-in is an alias of its own
  storage, so init code's deterministic writes change it as in eager torch, while a
  random one (torch's global generator: another draw on every rank) is refused like a
  meta buffer's (:mod:`.backstop`); the buffer itself is put back after.
* What init code does to the modules themselves (``eval()``, plain attributes it sets,
  changes or deletes, transformers' ``_is_hf_initialized``, hooks it registers) stays as
  eager torch leaves it: only what the capture swapped is put back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...._names import ParamSlot, canonical_name, qualified, refuse_lazy, walk_slots
from ...._torch_compat import give_grad_hooks, is_flat_param, make_parameter
from ....errors import ShardInitError, UnsupportedInitOpError
from ....spec import SUPPORTED_DTYPES
from ..trace import AFTER_INIT_FN, EAGER_LAYOUT, Track, refusal, storage_id
from .threads import CheckedParameter, checked_tensor

__all__ = [
    "BufferStandIn",
    "ParamGroup",
    "buffer_standins",
    "give_buffer_attributes",
    "give_memory_formats",
    "give_parameter_attributes",
    "param_groups",
]

Holder = tuple[nn.Module, str]


@dataclass
class ParamGroup:
    """One distinct parameter: its holders, and the stand-in each was given.

    Attributes:
        name: canonical name.
        original: the parameter object the model held.
        holders: ``(module, attr, path)`` per holder, canonical first.
        tracks: per holder (same order), its stand-in's track (shared unless declared).
        primary: index of the holder whose final stand-in gives the values.
    """

    name: str
    original: nn.Parameter
    holders: list[tuple[nn.Module, str, str]]
    tracks: list[Track] = field(default_factory=list)
    primary: int = 0

    def install(self) -> None:
        for (module, attr, _), track in zip(self.holders, self.tracks, strict=True):
            module._parameters[attr] = track.base  # type: ignore[assignment]

    def restore(self) -> list[str]:
        """Puts the original back everywhere; returns holders init code replaced with
        something other than a stand-in of this parameter."""
        replaced = []
        for module, attr, path in self.holders:
            current = module._parameters.get(attr)
            if current is not self.tracks[0].base and all(
                current is not track.base for track in self.tracks
            ):
                replaced.append(path)
            module._parameters[attr] = self.original
        return replaced

    def distinct_tracks(self) -> list[Track]:
        """Its stand-ins' tracks, each once (a shared one is every holder's)."""
        if len(self.tracks) == 1:  # one holder: nothing to deduplicate
            return self.tracks
        return list({id(track): track for track in self.tracks}.values())

    def winner(self) -> Track:
        if len(self.tracks) == 1:  # one stand-in (most parameters): it gives the values
            return self.tracks[0]
        module, attr, _ = self.holders[self.primary]
        current = module._parameters.get(attr)
        return next((t for t in self.tracks if t.base is current), self.tracks[self.primary])


def _declared_tie_targets(module: nn.Module) -> Mapping[str, str]:
    # transformers >= 5: {target path: source path} of the model's ties (post_init).
    declared = getattr(module, "all_tied_weights_keys", None)
    if not isinstance(declared, Mapping):
        return {}
    return {
        str(k): str(v) for k, v in declared.items() if isinstance(k, str) and isinstance(v, str)
    }


class DTensorStandIn(CheckedParameter):
    """The stand-in of a DTensor parameter: a plain meta tensor of the GLOBAL shape, whose
    DTensor methods refuse (init code that works on a rank's local shard would give
    values that depend on the layout; shardinit fills each rank's shard of the whole)."""

    #: Asked by the dispatch, which does not import this module: a layout init code
    #: gives a sharded parameter is refused (:func:`..dispatch.targets.write_data`).
    sharded = True

    def _refuse(self, what: str) -> UnsupportedInitOpError:
        return refusal(
            f"a DTensor parameter of global shape {tuple(self.shape)}",
            what,
            "during the capture init code sees each parameter whole, as a plain tensor "
            "of its global shape, not as a DTensor",
            "Initialize the parameter itself (shardinit fills each rank's shard of the whole)",
        )

    def to_local(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise self._refuse("to_local()")

    def full_tensor(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise self._refuse("full_tensor()")

    def redistribute(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise self._refuse("redistribute()")

    @property
    def placements(self) -> Any:
        raise self._refuse("placements")

    @property
    def device_mesh(self) -> Any:
        raise self._refuse("device_mesh")


def _standin(param: torch.Tensor) -> nn.Parameter:
    cls = DTensorStandIn if hasattr(param, "device_mesh") else CheckedParameter
    shape = tuple(param.shape)
    # The sizes as numbers, and a device object: torch parses them in about half the
    # time of a tuple and a device name (a model of thousands of small parameters).
    meta = torch.empty(*shape or ((),), dtype=param.dtype, device=_META)
    return make_parameter(cls, meta, param.requires_grad)


_META = torch.device("meta")


def param_groups(
    module: nn.Module, walk: Walk | None = None, slots: list[ParamSlot] | None = None
) -> list[ParamGroup]:
    """One group per distinct parameter, with stand-ins made (not yet installed);
    ``walk`` is ``module.named_modules(remove_duplicate=False)`` and ``slots`` its
    :func:`~shardinit._names.walk_slots`, where the caller has them already (a model of
    thousands of modules: one walk per materialize).

    Raises:
        ShardInitError: FSDP1 flat parameters, or dtypes outside stream format v1.
    """
    declared = _declared_tie_targets(module)
    sources = set(declared.values())
    paths: dict[int, str] | None = None  # module -> its first path, for tied holders
    groups = []
    if walk is None:
        walk = list(module.named_modules(remove_duplicate=False))
    slots = walk_slots(walk) if slots is None else slots
    refuse_lazy(slots, "capture_init")
    for slot in slots:
        if is_flat_param(slot.param):
            raise ShardInitError(
                "capture_init: FSDP1 flat parameters are not supported; capture the "
                "model's init code before wrapping it in FullyShardedDataParallel"
            )
        if slot.param.dtype not in SUPPORTED_DTYPES:
            raise ShardInitError(f"capture_init: parameter {slot.name} has dtype "
                                 f"{slot.param.dtype}, not one of stream format v1")  # fmt: skip
        if len(slot.owners) == 1:  # its one holder's path is the canonical name
            (owner, attr), path = slot.owners[0], slot.name
            group = ParamGroup(slot.name, slot.param, [(owner, attr, path)])
            group.tracks.append(_param_track(slot.param, slot.name, path))
            group.primary = 0
        else:
            if paths is None:
                paths = {id(m): p for p, m in reversed(walk)}
            group = _tied_group(slot, paths, declared, sources)
        groups.append(group)
    return groups


def _param_track(param: nn.Parameter, name: str, holder: str, label: str = "") -> Track:
    return Track("param", _standin(param), label or f"parameter {name!r}", name, holder)


def _tied_group(
    slot: ParamSlot, paths: Mapping[int, str], declared: Mapping[str, str], sources: set[str]
) -> ParamGroup:
    """The group of a parameter several modules hold: one stand-in shared by all, but a
    stand-in of its own for each declared tie target (see the module docstring)."""
    holders = [(m, a, canonical_name(qualified(paths[id(m)], a))) for m, a in slot.owners]
    group = ParamGroup(slot.name, slot.param, holders)
    shared = _param_track(slot.param, slot.name, slot.name)
    for _, _, path in holders:
        if path in declared:
            label = f"parameter {slot.name!r} (tied holder {path!r})"
            group.tracks.append(_param_track(slot.param, slot.name, path, label))
        else:
            group.tracks.append(shared)
    primary = [i for i, (_, _, path) in enumerate(holders) if path in sources]
    group.primary = primary[0] if primary else 0
    return group


@dataclass
class BufferStandIn:
    """A meta buffer's real stand-in, per holder."""

    name: str
    module: nn.Module
    attr: str
    original: torch.Tensor
    track: Track
    real: bool = False  # a real buffer followed in place: its values are its own
    #: It starts from the buffer's constructor value (record_constructors), as eager's
    #: buffer holds it before init_fn: a write of a part of it, or a step, is eager's.
    seeded: bool = False


#: A meta buffer's values before init_fn where no constructor value gives them: a NaN of
#: shardinit's own payload per float dtype (its bits as the same-width integer), which
#: a write keeps where it writes nothing (``put_``) and arithmetic carries (``add_``), so
#: init code's result that holds it read values the capture does not know.
_UNKNOWN_BITS = {
    torch.float64: (torch.int64, 0x7FF8_0000_5EED_0001),
    torch.float32: (torch.int32, 0x7FC0_5EED),
    torch.float16: (torch.int16, 0x7E5D),
    torch.bfloat16: (torch.int16, 0x7FDD),
}


def _real_like(buffer: torch.Tensor, seed: torch.Tensor | None) -> torch.Tensor:
    """The stand-in's values: the constructor's ``seed``, else "unknown" (NaN of
    :data:`_UNKNOWN_BITS` for float dtypes: a read of it shows; 0 for the others)."""
    if seed is not None:
        return checked_tensor(seed)
    shape = tuple(buffer.shape)
    unknown = _UNKNOWN_BITS.get(buffer.dtype)
    if unknown is not None:
        bits = torch.full(shape, unknown[1], dtype=unknown[0])
        return checked_tensor(bits.view(buffer.dtype))
    fill = float("nan") if buffer.is_floating_point() or buffer.is_complex() else 0
    return checked_tensor(torch.full(shape, fill, dtype=buffer.dtype))


def _unknown_values(name: str) -> str:
    """Why the values of the meta buffer ``name`` are unknown at capture (no constructor
    value gives them): what a refusal of init code that computes from them says."""
    return (
        f"the values of buffer {name!r} are unknown (no constructor value was recorded: "
        "build the model inside record_constructors(), or its constructor value cannot be "
        "computed), so an operation on them cannot be followed"
    )


def _holds_unknown(values: torch.Tensor) -> bool:
    """Whether ``values`` (a stand-in after init_fn) hold a value of :data:`_UNKNOWN_BITS`."""
    unknown = _UNKNOWN_BITS.get(values.dtype)
    if unknown is None or values.numel() == 0:
        return False
    return bool((values.detach().view(unknown[0]) == unknown[1]).any())


def _followed_in_place(buffer: torch.Tensor) -> bool:
    """Whether a real buffer is followed through an alias of its own storage: a plain
    tensor with one (a subclass, such as a DTensor, keeps its own dispatch)."""
    return type(buffer) is torch.Tensor and not buffer.requires_grad and not buffer.is_sparse


#: A meta buffer's values before init_fn, ``seed(owner, attr, name, buffer)``: its
#: constructor value on the CPU, or None (:func:`.constructors.constructor_seed`).
Seed = Callable[[nn.Module, str, str, torch.Tensor], "torch.Tensor | None"]


def buffer_standins(
    module: nn.Module, seed_of: Seed | None = None, walk: Walk | None = None
) -> list[BufferStandIn]:
    """Real CPU stand-ins for every meta buffer (its values before init_fn where
    ``seed_of`` gives them), and checked aliases of every real one (one per buffer
    object, and per storage for real ones: two real buffers viewing one storage are one
    followed tensor). ``walk``: as :func:`param_groups` takes it."""
    made: dict[int, Track] = {}
    storages: set[int | None] = set()
    found = []
    for path, owner in module.named_modules() if walk is None else distinct_modules(walk):
        for attr, buffer in owner._buffers.items():
            if buffer is None or not (buffer.is_meta or _followed_in_place(buffer)):
                continue
            name = canonical_name(qualified(path, attr))
            track = made.get(id(buffer))
            if track is None and not buffer.is_meta:
                if storage_id(buffer) in storages:
                    continue  # an alias of a real buffer followed already: its storage is
                storages.add(storage_id(buffer))
            meta = buffer.is_meta and seed_of is not None
            seed = seed_of(owner, attr, name, buffer) if meta and seed_of is not None else None
            if track is None:
                stand_in = _real_like(buffer, seed) if buffer.is_meta else checked_tensor(buffer)
                track = made[id(buffer)] = Track("buffer", stand_in, f"buffer {name!r}", name)
                if buffer.is_meta and seed is None:
                    track.unknown = _unknown_values(name)
            standin = BufferStandIn(name, owner, attr, buffer, track, not buffer.is_meta)
            standin.seeded = seed is not None
            found.append(standin)
    return found


def read_buffers(
    standins: list[BufferStandIn],
) -> tuple[dict[str, torch.Tensor], ShardInitError | None]:
    """The values init code computed, per buffer name, and the error for the buffers
    that cannot be used (returned, not raised: this runs while an error init code
    raised may be on its way out, which it must not hide); puts the meta buffers back.
    The error names buffers written only in part, assigned a meta tensor, or emptied
    by ``to_empty`` and not computed again."""
    values: dict[str, torch.Tensor] = {}
    problems = []
    for standin in standins:
        current = standin.module._buffers.get(standin.attr)
        if standin.real:  # its values are its own; a tensor init code assigned stays
            if current is standin.track.base:
                standin.module._buffers[standin.attr] = standin.original
            continue
        standin.module._buffers[standin.attr] = standin.original
        if current is standin.track.base:
            whole = tuple((0, size) for size in standin.track.shape)
            written = standin.track.written(whole) or standin.seeded
            if written and standin.track.ops and _holds_unknown(current):
                problems.append(
                    f"{standin.name} (init_fn computed it from its values before init_fn, "
                    "which the capture does not know: no constructor value was recorded "
                    "(build the model inside record_constructors()), or it cannot be "
                    "computed)"
                )
            elif written and standin.track.ops:
                values[standin.name] = current
            elif standin.track.ops:
                problems.append(f"{standin.name} (init_fn wrote only part of it)")
            elif standin.track.emptied:
                problems.append(f"{standin.name} (init_fn emptied it with to_empty)")
        elif current is not None and current is not standin.original:
            if current.is_meta:
                problems.append(f"{standin.name} (init_fn computed it on the meta device)")
            else:
                values[standin.name] = current.detach()
    if not problems:
        return values, None
    return values, ShardInitError(
        f"capture_init: buffer(s) {', '.join(problems)} cannot be computed; compute "
        "them on a real device (e.g. from the buffer's own device, which is the CPU "
        "during the capture), or leave them to buffer_init"
    )


def give_parameter_attributes(groups: list[ParamGroup]) -> None:
    """Gives each parameter the Python attributes init code set on its stand-in
    (``p._no_weight_decay = True``) and the gradient hooks it registered there, as eager
    torch leaves them on the parameter."""
    for group in groups:
        for track in group.distinct_tracks():
            given = {k: v for k, v in vars(track.base).items() if k != EAGER_LAYOUT}
            if given:  # shardinit's own note of eager's layout stays on the stand-in
                group.original.__dict__.update(given)
            give_grad_hooks(track.base, group.original)


def give_buffer_attributes(buffers: list[BufferStandIn]) -> None:
    """Gives each buffer the Python attributes init code set on its stand-in
    (``buffer.tag = ...``), as eager torch leaves them on the buffer (the meta buffer
    holds them; materialize's allocation keeps them)."""
    for standin in buffers:
        given = {k: v for k, v in vars(standin.track.base).items() if k != EAGER_LAYOUT}
        if given and standin.module._buffers.get(standin.attr) is standin.original:
            standin.original.__dict__.update(given)


def give_memory_formats(groups: list[ParamGroup], buffers: list[BufferStandIn]) -> None:
    """Gives each meta parameter and buffer the memory format init code gave its stand-in
    (``module.to(memory_format=torch.channels_last)``), as torch's ``Module._apply``
    does: a parameter's ``.data`` is replaced, a buffer is a new tensor. ``materialize``
    allocates meta tensors in their own format (and a DTensor's stand-in refused it)."""
    for group in groups:
        formats = [t.memory_format for t in group.distinct_tracks() if t.memory_format]
        if formats and group.original.is_meta:
            group.original.data = group.original.data.to(memory_format=formats[-1])
        strides = [t.strides for t in group.distinct_tracks() if t.strides is not None]
        if strides:  # init code's tensor.data = value of another dense layout
            _give_strides(group, strides[-1])
    for standin in buffers:
        fmt = standin.track.memory_format
        current = standin.module._buffers.get(standin.attr)
        if fmt is not None and current is standin.original and current.is_meta:
            standin.module._buffers[standin.attr] = current = current.to(memory_format=fmt)
        given = standin.track.strides
        if given is not None and current is not None and current.is_meta:
            standin.module._buffers[standin.attr] = torch.empty_strided(
                current.shape, given, dtype=current.dtype, device="meta"
            )


def _give_strides(group: ParamGroup, strides: tuple[int, ...]) -> None:
    """The meta parameter takes ``strides``, as eager's took its new ``.data``'s; a
    parameter that is not a plain meta tensor (a DTensor's shard, one already
    allocated) cannot take them: refused, naming it."""
    original = group.original
    if not original.is_meta or type(original) not in (torch.Tensor, nn.Parameter):
        raise refusal(
            f"parameter '{group.name}'", "tensor.data = value",
            f"eager's parameter takes the value's strides {strides}, which a "
            f"{type(original).__name__} on {original.device} cannot take",
            "Copy the value in (p.copy_(value)), or make it contiguous first",
            where="in init code",
        )  # fmt: skip
    original.data = torch.empty_strided(
        original.shape, strides, dtype=original.dtype, device="meta"
    )


#: A model's ``named_modules(remove_duplicate=False)``, in its order.
Walk = Sequence[tuple[str, nn.Module]]


def distinct_modules(walk: Walk) -> list[tuple[str, nn.Module]]:
    """``named_modules()`` from ``walk`` (``named_modules(remove_duplicate=False)``):
    each module once, at its first path, in the same order (a module met again is
    met with its subtree, all of which was met the first time)."""
    seen: set[int] = set()
    found = []
    for path, module in walk:
        if id(module) not in seen:
            seen.add(id(module))
            found.append((path, module))
    return found


def iter_tracks(groups: list[ParamGroup]) -> Iterator[Track]:
    seen: set[int] = set()
    for group in groups:
        for track in group.tracks:
            if id(track) not in seen:
                seen.add(id(track))
                yield track


def replaced_error(replaced: list[str]) -> UnsupportedInitOpError:
    return refusal(
        f"parameter(s) {sorted(set(replaced))}",
        "init_fn replaced them with new objects",
        "shardinit fills the parameters the model holds, and the new objects are not theirs",
        "Initialize them in place (e.g. with torch.nn.init) instead",
        where=AFTER_INIT_FN,
    )
