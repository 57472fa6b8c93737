"""Parameters and buffers that init code creates, replaces or removes while it is
captured (``m.weight = nn.Parameter(torch.empty(32, 16))`` then ``normal_``,
``register_parameter("extra", ...)``, ``setattr(m, "bias", None)``,
``register_buffer("b", torch.rand(4))``).

Their values follow the closed world's one rule: a value comes from shardinit's stream
or from computations shardinit replays, never from torch's global generator.

* **A parameter put in place of one** (a new Parameter of the same shape and dtype): the
  parameter takes the new tensor's values, as a copy of it into the parameter (its
  fills are the parameter's own, at its own indices), and its ``requires_grad``; under
  FSDP2 or tensor parallelism too, where the model keeps its DTensor.
* **A new parameter** (a new name, or one of another shape or dtype in place of one),
  on a plain meta model: the model holds a new meta Parameter under its canonical name,
  with the new tensor's values as its record, so ``materialize`` allocates and fills it
  like any other. Under FSDP2 or tensor parallelism the parameters are fixed when the
  model is sharded: a new one would be a plain tensor inside a sharded model, so it is
  refused.
* **A removed parameter** (``m.bias = None``, ``del m.bias``): stays removed, as in
  eager torch, on a plain meta model (refused under FSDP2, which holds it).
* **A new or replaced buffer**, or a tensor init code sets as a plain attribute,
  holding random values (torch's draws): refused, as the backstop refuses random writes
  into a meta buffer (:mod:`.backstop`); other values are kept, as in eager torch.

A tensor whose values the capture did not follow (made before ``init_fn``), a tie init
code makes between two parameters, or a change to a tied parameter's holder, is
refused. Each refusal names the path, what init code did, and the caller's line (where
the tensor was registered), before anything is allocated; the model is then left as it
was.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import (
    register_module_buffer_registration_hook,
    register_module_parameter_registration_hook,
)

from ...._names import ModuleWalk, canonical_name, qualified
from ...._program.actions import ParamRecord
from ...._program.nodes import bad_reasons
from ...._torch_compat import make_parameter
from ....errors import UnsupportedInitOpError
from ..dispatch import CaptureMode
from ..trace import (
    AFTER_INIT_FN,
    HELP,
    Track,
    give_memory_format,
    memory_format_now,
    memory_format_of,
    read_reason,
    refusal,
    user_frame,
)
from .standins import ParamGroup

__all__ = ["CreatedTensors"]

Slot = tuple[int, str]  # (id of the module, attribute)


@dataclass
class _Outcome:
    """What init code's changes come to (:meth:`CreatedTensors.settle`)."""

    records: dict[str, ParamRecord] = field(default_factory=dict)  # new parameters' values
    added: set[str] = field(default_factory=set)  # new parameters (with values or not)
    dropped: set[str] = field(default_factory=set)  # groups whose record is not kept
    #: What :meth:`CreatedTensors.finishing` puts in which parameter slot (or deletes).
    apply: list[tuple[nn.Module, str, nn.Parameter | None]] = field(default_factory=list)


class CreatedTensors:
    """The parameter and buffer slots (and tensor attributes) of ``root``'s modules
    before init code runs, the line that registered each tensor while it runs
    (:meth:`noted`), and what the changes come to after (:meth:`settle`, then
    :meth:`finishing`)."""

    def __init__(
        self, root: nn.Module, groups: list[ParamGroup], modules: Sequence[nn.Module] | None = None
    ) -> None:
        """``modules``: ``root.modules()``, where the caller has them already."""
        self.root = root
        modules = list(root.modules()) if modules is None else modules
        self.saved = {id(m): (m, dict(m._parameters), dict(m._buffers)) for m in modules}
        self.slots: dict[Slot, tuple[ParamGroup, int]] = {
            (id(module), attr): (group, index)
            for group in groups
            for index, (module, attr, _) in enumerate(group.holders)
        }
        self.sharded = any(hasattr(g.original, "device_mesh") for g in groups)
        self.attributes = _snapshot_attributes(modules)
        self.lines: dict[Slot, str] = {}
        self.outcome = _Outcome()
        self.settled = False
        #: The walk of the module tree init code left (:meth:`settle`'s), for the phases
        #: after the capture.
        self.walk_after: ModuleWalk | None = None

    @contextlib.contextmanager
    def noted(self) -> Iterator[None]:
        """Notes the line of each registration for the duration: torch's global
        parameter and buffer registration hooks, and ``register_parameter`` itself for
        ``None`` (a removal, which torch's hooks do not see)."""

        def note(module: nn.Module, name: str, value: object) -> None:
            self.lines[(id(module), name)] = user_frame()

        register = nn.Module.register_parameter

        def register_parameter(self: nn.Module, name: str, param: nn.Parameter | None) -> None:
            if param is None:
                note(self, name, param)
            register(self, name, param)

        handles = [
            register_module_parameter_registration_hook(note),
            register_module_buffer_registration_hook(note),
        ]
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        try:
            yield
        finally:
            nn.Module.register_parameter = register  # type: ignore[method-assign]
            for handle in handles:
                handle.remove()

    def settle(self, recorder: CaptureMode) -> None:
        """Reads what init code left in every parameter and buffer slot and tensor
        attribute (call it with the stand-ins still installed), and puts each parameter
        slot back as it was, so the stand-ins are restored as usual; the changes are
        made by :meth:`finishing`.

        Raises:
            UnsupportedInitOpError: a change that cannot be kept (module docstring).
        """
        self.walk_after = ModuleWalk(self.root)
        for path, module in self.walk_after.distinct:
            self._settle_params(recorder, module, path)
            self._check_buffers(recorder, module, path)
            self._check_attributes(recorder, module, path)
        self.settled = True
        self.attributes = {}  # read here only: let the copies go before the capture ends

    def revert_unless_settled(self) -> None:
        """Leaves every module's parameters and buffers as they were before init code
        ran, unless :meth:`settle` read them to the end (init code raised, or a change
        was refused)."""
        if not self.settled:
            self._revert()

    @property
    def changed(self) -> tuple[str, ...]:
        """The canonical names of the parameters init code added, removed or gave
        another shape or dtype (the model's parameters differ from before)."""
        return tuple(sorted(self.outcome.dropped | self.outcome.added))

    @contextlib.contextmanager
    def finishing(self) -> Iterator[None]:
        """The capture's last checks: when they pass, makes init code's changes to
        parameter slots (new meta Parameters, removals); when they (or :meth:`settle`)
        refuse, leaves every module's parameters and buffers as they were before."""
        try:
            yield
        except BaseException:
            self._revert()
            raise
        for module, attr, param in self.outcome.apply:
            if param is _DELETED:
                del module._parameters[attr]
            else:
                module._parameters[attr] = param

    # ----------------------------------------------------------------- parameters

    def _settle_params(self, recorder: CaptureMode, module: nn.Module, path: str) -> None:
        before = self._before(module, "_parameters")
        for attr in [*before, *(a for a in module._parameters if a not in before)]:
            current = module._parameters.get(attr)
            found = self.slots.get((id(module), attr))
            if found is None:
                if current is not None and attr not in before:
                    self._new_param(recorder, module, path, attr, current)
                continue
            group, index = found
            standin = group.tracks[index].base
            if current is standin or any(current is track.base for track in group.tracks):
                continue  # written in place (or tied within its group): the usual case
            deleted = attr not in module._parameters  # ``del m.bias``, not ``m.bias = None``
            module._parameters[attr] = standin  # type: ignore[assignment]  # then finishing()
            self._changed_param(recorder, module, path, attr, group, current, deleted)

    def _changed_param(
        self,
        recorder: CaptureMode,
        module: nn.Module,
        path: str,
        attr: str,
        group: ParamGroup,
        current: torch.Tensor | None,
        deleted: bool,
    ) -> None:
        where = self._where(module, path, attr)
        if current is None:
            self._refuse_layout_change(group, where, "deletes it" if deleted else "removes it")
            self.outcome.dropped.add(group.name)
            self.outcome.apply.append((module, attr, _DELETED if deleted else None))
            return
        source = recorder.store.lookup(current)
        if source is not None and source.kind == "param":
            raise _refused(where, f"ties it to {source.label}", *_TIES)
        old = group.tracks[0].base
        if (current.shape, current.dtype) != (old.shape, old.dtype):
            self._refuse_layout_change(group, where, f"gives it a new {_shown(current)} Parameter")
            self.outcome.dropped.add(group.name)
            self._new_param(recorder, module, path, attr, current, replaced=True)
            return
        if len(group.holders) > 1:
            raise _refused(where, "replaces one holder of a tied parameter", *_TIES)
        track = group.tracks[0]
        self._take_values(recorder, track, current, where, "replaces it with a new Parameter")
        track.base.requires_grad_(current.requires_grad)
        memory_format = memory_format_of(current) or torch.contiguous_format
        if memory_format != torch.contiguous_format and self.sharded:
            raise _refused(
                where, f"replaces it with a new {memory_format} Parameter",
                "the local shards of a parameter FSDP2 or tensor parallelism sharded are "
                "row-major tensors of their own", "Keep the sharded model row-major",
            )  # fmt: skip
        if memory_format != memory_format_now(track):
            give_memory_format(track, memory_format)  # eager's parameter is the new tensor

    def _new_param(
        self,
        recorder: CaptureMode,
        module: nn.Module,
        path: str,
        attr: str,
        current: torch.Tensor,
        replaced: bool = False,
    ) -> None:
        where = self._where(module, path, attr)
        what = f"{'replaces it with' if replaced else 'adds'} a new {_shown(current)} Parameter"
        if self.sharded:
            raise _refused(
                where, what,
                "the parameters of a model FSDP2 or tensor parallelism sharded are fixed "
                "when it is sharded, so a new one would be a plain tensor inside it",
                "Add it to the model before sharding it (built on meta), then initialize it",
            )  # fmt: skip
        name = canonical_name(qualified(path, attr))
        if name in self.outcome.added:
            raise _refused(
                where, what, "the same new tensor is already another parameter",
                "Give each parameter a tensor of its own",
            )  # fmt: skip
        self.outcome.added.add(name)
        meta = torch.empty(tuple(current.shape), dtype=current.dtype, device="meta")
        standin = make_parameter(nn.Parameter, meta, current.requires_grad)
        track = Track("param", standin, f"parameter {name!r}", name, name)
        self._take_values(recorder, track, current, where, what)
        if track.ops:
            record = ParamRecord(name, tuple(track.shape), track.base.dtype, tuple(track.ops))
            self.outcome.records[name] = record
        if not replaced:
            del module._parameters[attr]  # restored as usual; added by finishing()
        self.outcome.apply.append((module, attr, standin))

    def _take_values(
        self, recorder: CaptureMode, track: Track, current: torch.Tensor, where: Place, what: str
    ) -> None:
        """``track`` (a parameter's stand-in) takes the values init code wrote to the new
        tensor ``current``: a copy of it, whole; none when it is a meta tensor init code
        never wrote (then rules and defaults give them, as for any meta parameter)."""
        source = recorder.store.lookup(current)
        if source is None:
            raise _refused(
                where, what,
                "its values were not computed by init code that the capture follows "
                "(a tensor made before init_fn ran)",
                "Create it inside init_fn, on meta, and initialize it with torch.nn.init "
                "or tensor methods",
            )  # fmt: skip
        if source is track:
            return  # a new Parameter object of the stand-in itself: its values
        if not source.ops and source.base.is_meta:
            recorder.store.forget(track)  # a meta tensor init code never wrote: as eager, no values
            return
        if not source.ops:
            raise _refused(
                where, what,
                f"init code never wrote {source.label} (eager torch leaves the memory "
                "torch.empty found)",
                "Initialize it, or make it on meta",
            )  # fmt: skip
        if not source.written(tuple((0, size) for size in source.shape)):
            raise _refused(
                where, what,
                f"init code wrote only part of {source.label} (eager torch leaves the "
                "rest as the memory torch.empty found)",
                "Write all of it",
            )  # fmt: skip
        reasons = bad_reasons(recorder.engine.value_of(current, "the new Parameter"))
        # Another parameter's values before init_fn (its default: .before) are not this one's.
        reasons += [read_reason(read) for read in source.reads if read[0] is not track]
        if reasons:
            raise _refused(where, what, f"its values cannot be replayed: {reasons[0]}", HELP)
        recorder.store.forget(track)  # the new tensor's values replace what was written before
        with torch.no_grad():
            recorder.copies.copy_into(track, track.base, current, f"{what} ({' '.join(where)})")

    def _refuse_layout_change(self, group: ParamGroup, where: Place, what: str) -> None:
        if self.sharded:
            raise _refused(
                where, what,
                "FSDP2 and tensor parallelism hold the parameters they shard, so a "
                "model they sharded keeps each one",
                "Initialize it in place instead",
            )  # fmt: skip
        if len(group.holders) > 1:
            raise _refused(where, what, *_TIES)

    # ----------------------------------------------------------------- buffers

    def _check_buffers(self, recorder: CaptureMode, module: nn.Module, path: str) -> None:
        """Refuses a new or replaced buffer that holds random values (module docstring)."""
        before = self._before(module, "_buffers")
        for attr, current in module._buffers.items():
            if current is None or before.get(attr) is current:
                continue
            if _random(recorder, current):
                where = self._where(module, path, attr, "buffer")
                raise _refused(where, f"assigns it {_shown(current)} random values", *_NO_STREAM)

    def _check_attributes(self, recorder: CaptureMode, module: nn.Module, path: str) -> None:
        """Refuses a tensor init code sets as a plain attribute (or in a list, tuple or
        dict attribute) that holds random values: the model keeps it, as eager does."""
        values, held = self.attributes.get(id(module), _NO_ATTRIBUTES)
        for attr, value in vars(module).items():
            if isinstance(value, _MUTABLE):
                if not value:
                    continue  # an empty list or dict (a module's hook tables) holds none
            elif values.get(attr, _ABSENT) is value:
                continue  # the object it held before, whose tensors cannot have changed
            if attr in _MODULE_TABLES:
                continue
            old = values.get(attr)
            before = held.get(attr, ()) if isinstance(old, _MUTABLE) else _held_tensors(old)
            for tensor in _held_tensors(value):
                if all(tensor is not seen for seen in before) and _random(recorder, tensor):
                    source = recorder.store.lookup(tensor)
                    made = source.label if source is not None else "a tensor"
                    who = f"attribute {qualified(path, attr)!r} ({type(module).__name__})"
                    what = f"sets it to {made}, random values"
                    raise _refused((who, AFTER_INIT_FN), what, *_NO_STREAM)

    # ----------------------------------------------------------------- helpers

    def _revert(self) -> None:
        for module, params, buffers in self.saved.values():
            module._parameters.clear()
            module._parameters.update(params)
            module._buffers.clear()
            module._buffers.update(buffers)

    def _before(self, module: nn.Module, table: str) -> Mapping[str, torch.Tensor | None]:
        """``module``'s parameters or buffers before init code ran (the saved table
        itself, read only: :meth:`_revert` puts it back)."""
        saved = self.saved.get(id(module))
        if saved is None:
            return _NO_TENSORS  # a module init code added
        return saved[1] if table == "_parameters" else saved[2]

    def _where(self, module: nn.Module, path: str, attr: str, kind: str = "parameter") -> Place:
        line = self.lines.get((id(module), attr), "an unknown line (deleted by init code)")
        who = f"{kind} {canonical_name(qualified(path, attr))!r} ({type(module).__name__})"
        return who, f"at {line}"


#: The tables of a module init code added, before it ran: empty.
_NO_TENSORS: Mapping[str, torch.Tensor | None] = types.MappingProxyType({})
#: A parameter slot init code deleted (``del m.bias``): gone from the module.
_DELETED: Any = object()
#: Why a tie init code makes is refused, and what to do.
_TIES = (
    "shardinit names and fills each parameter as the model held it before init_fn",
    "Tie parameters before materialize (or with the model's own declared ties)",
)


#: Why random values may not reach a buffer or a tensor attribute.
_NO_STREAM = (
    "they come from torch's global generator, no function of seed and different on each "
    "rank; shardinit draws no stream for buffers and attributes",
    "Compute them deterministically (or make them parameters)",
)
#: ``nn.Module``'s own tables: parameters, buffers and submodules are not attributes.
_MODULE_TABLES = frozenset({"_parameters", "_buffers", "_modules"})
#: The attribute values whose tensors init code may change in place (:func:`_held_tensors`).
_MUTABLE = (list, dict)
#: A module's attributes before init code ran: the objects, and the tensors each
#: non-empty list or dict held (:meth:`CreatedTensors._snapshot_attributes`).
_Attributes = tuple[dict[str, object], dict[str, tuple[torch.Tensor, ...]]]
#: An attribute a module did not have before init code ran.
_ABSENT: Any = object()
#: Those of a module init code added: none.
_NO_ATTRIBUTES: _Attributes = ({}, {})


def _random(recorder: CaptureMode, tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` holds values drawn from torch's generator: a random temporary,
    or a tensor the capture did not follow computed after init code drew from it."""
    source = recorder.store.lookup(tensor)
    if source is not None:
        return source.kind == "temp" and recorder.engine.random(source)
    computed = tensor.dim() > 0 and not tensor.is_meta
    return computed and not recorder.engine.rng_untouched()


def _snapshot_attributes(modules: Sequence[nn.Module]) -> dict[int, _Attributes]:
    """Per module, its attributes before init code runs: the objects (a copy of its
    ``__dict__``, C-speed), and the tensors each list or dict (changed in place, not
    replaced, by init code) holds then. Most attributes of thousands of modules are the
    same objects after: only the others are walked (:meth:`CreatedTensors._check_attributes`)."""
    return {
        id(module): (
            (values := dict(vars(module))),
            {
                attr: _held_tensors(value)
                for attr, value in values.items()
                if isinstance(value, _MUTABLE) and value and attr not in _MODULE_TABLES
            },
        )
        for module in modules
    }


def _held_tensors(value: object) -> tuple[torch.Tensor, ...]:
    """The tensors ``value`` is or holds directly (a list, tuple or dict of them). A
    tuple, not a generator: it is asked of every attribute of every module, twice per
    capture, and most hold none."""
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, dict):
        items: Iterable[object] = value.values()
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return ()
    return tuple(item for item in items if isinstance(item, torch.Tensor)) if value else ()


#: Who a refusal names (a parameter, buffer or attribute) and where init code did it.
Place = tuple[str, str]


def _refused(place: Place, what: str, why: str, todo: str) -> UnsupportedInitOpError:
    who, where = place
    return refusal(who, f"init code {what}", why, todo, where=where)


def _shown(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"{tuple(tensor.shape)} {dtype}"
