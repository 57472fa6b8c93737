"""``capture_init``: run a model's own init code once on stand-ins and record it."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable

import torch
from torch import nn

from ...._names import ModuleWalk, holder_names, listing
from ...._program.actions import ParamRecord
from ...._program.cannot import Cannot
from ...._torch_compat import (
    rewrap_fsdp2_classes,
    stored_contiguous,
    torch_function_disabled,
    unwrap_fsdp2_classes,
)
from ...._validate import DeviceLike, resolve_device
from ...collector import collector_paused
from ...exclusive import ThreadExclusive
from ...new_modules import NewSubmodules
from ..dispatch import CaptureMode
from ..trace import AFTER_INIT_FN, Track, give_eager_layout, refusal
from .constructors import constructor_seed
from .created import CreatedTensors
from .initcalls import install_init_calls
from .modulecalls import install_module_calls
from .records import CapturedInit
from .signals import signal_handlers_watched
from .standins import (
    ParamGroup,
    buffer_standins,
    give_buffer_attributes,
    give_memory_formats,
    give_parameter_attributes,
    iter_tracks,
    param_groups,
    read_buffers,
    replaced_error,
)
from .threads import plain_tensor, watching_threads

__all__ = ["capture_init", "capture_walked"]

#: One capture at a time: the stand-ins and the recorder are process-wide state.
#: A capture started while one runs, in this thread or another, is refused at once.
_CAPTURE = ThreadExclusive(
    "capture_init",
    "init code may not capture again (shardinit.capture_init, or shardinit.materialize "
    "with init_fn), and a capture may not run inside record_constructors(); capture the "
    "whole model with one init_fn (or the part before or after), and leave "
    "record_constructors() before capturing",
    clashes_with=("record_constructors()",),
    wait=False,
)


def capture_init(
    module: nn.Module, init_fn: Callable[[], object], *, device: DeviceLike = None
) -> CapturedInit:
    """Runs ``init_fn()`` on stand-ins of ``module``'s parameters and buffers and records
    what it does to each parameter, and the buffer values it computes.

    The parameters are swapped for plain meta tensors of their GLOBAL shape (DTensors of
    FSDP2 / tensor parallelism included) for the duration and put back after (what init
    code does to the modules themselves, ``eval()`` or attributes, stays, as eager torch
    leaves it); meta buffers are swapped for real CPU tensors and the values init code
    computes for them are kept. Parameters init code adds, removes or reshapes stay as it
    leaves them (new ones on meta, their values recorded), on a plain meta model
    (:mod:`.created`). Values init code computes elementwise (``log(arange(...))``,
    ``empty(n).uniform_(a, b).log_()``, ...) are recorded as init programs. See
    docs/capturing-init.md for what is recorded, the tie rule and what is refused.

    Args:
        module: the model, on the meta device or sharded (any parameter values are
            ignored: only names, shapes and dtypes are read).
        init_fn: a callable that initializes ``module`` in place when run normally, e.g.
            ``model.init_weights`` or ``lambda: model.apply(model._init_weights)``.
        device: the device init code is told a parameter on the meta device is on
            (``param.device``, ``param.is_meta``), as it will be at run time: what
            :func:`shardinit.materialize` allocates on (default: the CPU). A DTensor's
            stand-in reports its mesh's device, another parameter its own.

    Returns:
        The :class:`CapturedInit`: per canonical parameter name, the ordered operations
        with the box of the parameter each one covers; per computed buffer, its value.

    Raises:
        UnsupportedInitOpError: ``init_fn`` applied an operation that cannot be replayed
            shard-locally (``sparse_``, ``orthogonal_`` on part of a parameter,
            operations that are not elementwise on values unknown at capture, broadcasts
            of random values, reading a parameter's values, a non-box region, a dtype
            change of the model or ``to_empty`` after writes); random values reaching a
            buffer or a tensor attribute; a parameter it adds, removes or reshapes
            under FSDP2 or tensor parallelism, or ties to another; an operation on a
            stand-in from a thread other than the caller's (named); a memory format given
            to a DTensor parameter.
        ShardInitError: FSDP1 flat parameters, dtypes outside stream format v1, buffers
            init code computes on the meta device or only in part, or empties
            (``to_empty``) and does not compute again; a ``device`` that is not the CPU
            or an available CUDA device (``"meta"`` included: init code that checks
            ``param.is_meta`` would skip its work).
        TypeError: ``module`` is not an ``nn.Module``, ``init_fn`` is not callable, or
            ``device`` is of another type than DeviceLike's.

    Warns:
        UserWarning: writes to a tied parameter that its values do not take (see the tie
            rule in docs/capturing-init.md), each with the holder and the call site.

    Example:
        >>> import torch, shardinit
        >>> from torch import nn
        >>> with torch.device("meta"):
        ...     model = nn.Linear(4, 3)
        >>> captured = shardinit.capture_init(model, lambda: nn.init.normal_(model.weight,
        ...                                                                   std=0.02))
        >>> captured["weight"].ops[0].action
        Fill(init=Normal(mean=0.0, std=0.02))
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not callable(init_fn):
        raise TypeError(f"init_fn must be callable, got {type(init_fn).__name__}")
    # What materialize allocates on: never "meta", where guarded init code would be skipped.
    device = None if device is None else resolve_device(device)
    with collector_paused():  # why: collector.py
        return capture_walked(ModuleWalk(module), init_fn, device)[0]


def capture_walked(
    walk: ModuleWalk, init_fn: Callable[[], object], device: torch.device | None
) -> tuple[CapturedInit, ModuleWalk]:
    """:func:`capture_init` of ``walk.root`` (arguments checked, ``device`` resolved)
    over its caller's walk of the model, and the walk after ``init_fn`` (which may have
    changed the module tree), for the caller's phases after it."""
    module = walk.root
    with _CAPTURE.hold(), collector_paused():  # why: collector.py
        groups = param_groups(module, walk.pairs, walk.slots)
        buffers = buffer_standins(module, constructor_seed, walk.pairs)  # eager's values before
        created = CreatedTensors(module, groups, walk.modules)  # before stand-ins are installed
        aliases = {
            id(g.original.untyped_storage()): g.tracks[g.primary]
            for g in groups
            if g.original.is_meta and type(g.original) in (torch.Tensor, nn.Parameter)
        }
        tracks = [*iter_tracks(groups), *(b.track for b in buffers)]
        default = torch.device("cpu") if device is None else torch.device(device)
        devices = {
            id(t): runtime
            for g in groups
            for runtime in (_runtime_device(g.original, default),)
            for t in g.tracks
        }
        recorder = CaptureMode(tracks, aliases, devices)
        for group in groups:  # a channels_last parameter: why in threads.py
            if not _row_major(group.original):  # (a new stand-in notes no layout yet)
                for track in group.distinct_tracks():
                    give_eager_layout(track.base, group.original)
        classes = unwrap_fsdp2_classes(module, walk.modules)
        for group in groups:
            group.install()
        for standin in buffers:
            standin.module._buffers[standin.attr] = standin.track.base
        undo_module_calls = install_module_calls(module, recorder, walk.modules)
        undo_init_calls = install_init_calls(recorder)
        new_submodules = NewSubmodules(module, walk.pairs)
        try:
            watch = watching_threads(recorder.store)  # why: threads.py
            signals = signal_handlers_watched(recorder.store)  # why: signals.py
            refused = new_submodules.refused()
            with recorder, watch, signals, torch.no_grad(), refused, created.noted():
                init_fn()
            created.settle(recorder)  # puts the stand-ins back where init code replaced them
        finally:
            undo_init_calls()
            undo_module_calls()
            rewrap_fsdp2_classes(classes)
            winners = [group.winner() for group in groups]
            replaced = [path for group in groups for path in group.restore()]
            values, buffer_error = read_buffers(buffers)
            values = {name: plain_tensor(value) for name, value in values.items()}
            created.revert_unless_settled()
        with created.finishing():  # refused: the model's tensors are as they were
            if recorder.error is not None:
                raise recorder.error  # init_fn swallowed the exception: still unusable
            new_submodules.raise_if_refused()
            if buffer_error is not None:
                raise buffer_error
            if replaced:
                raise replaced_error(replaced)
            _check_unchanged(groups)
            give_memory_formats(groups, buffers)  # init code's module.to(memory_format=...)
            give_parameter_attributes(groups)  # init code's p.attr = ...
            give_buffer_attributes(buffers)  # and buffer.attr = ...
        _warn_dropped(groups, winners)
        # The records too are built with the collector paused (collector.py).
        after = created.walk_after  # settle's, of the tree init_fn left
        assert after is not None  # settle ran, or the capture raised
        return _recorded(after, init_fn, groups, winners, created, values), after


def _recorded(
    walk: ModuleWalk,
    init_fn: Callable[[], object],
    groups: list[ParamGroup],
    winners: list[Track],
    created: CreatedTensors,
    values: dict[str, torch.Tensor],
) -> CapturedInit:
    """What a capture that succeeded recorded: each kept parameter's operations (and those
    init code added), the buffer values, and the ``requires_grad`` init code changed."""
    kept = [
        (group, winner)
        for group, winner in zip(groups, winners, strict=True)
        if group.name not in created.outcome.dropped
    ]
    params = {
        group.name: ParamRecord(
            group.name, tuple(winner.shape), winner.base.dtype, tuple(winner.ops)
        )
        for group, winner in kept
        if winner.ops
    }
    params.update(created.outcome.records)  # parameters init code added
    grads = {
        group.name: winner.base.requires_grad
        for group, winner in kept
        if winner.base.requires_grad != group.original.requires_grad
    }
    held = holder_names(walk.root, walk=walk)  # which names are tied, for materialize to compare
    return CapturedInit(
        params, tuple(sorted(values)), init_fn, values, weakref.ref(walk.root), held, grads,
        created.changed,
    )  # fmt: skip


def _runtime_device(param: torch.Tensor, default: torch.device) -> torch.device:
    """The device ``param`` is on when init code runs for real (see ``capture_init``):
    ``default`` (the capture's ``device``, else the CPU) for a parameter on meta."""
    mesh = getattr(param, "device_mesh", None)
    if mesh is not None:
        return torch.device(mesh.device_type)
    if not param.is_meta:
        return param.device
    return default


def _row_major(param: torch.Tensor) -> bool:
    """Whether ``param`` is row-major in its storage, as its stand-in is
    (:func:`..trace.give_eager_layout` notes another layout on the stand-in)."""
    with torch_function_disabled():  # its own layout, as give_eager_layout reads it
        return stored_contiguous(param)


def _check_unchanged(groups: list[ParamGroup]) -> None:
    """The closed world's last check: no stand-in became another tensor by a route that
    neither the dispatch nor its backstop saw (``torch.utils.swap_tensors``, ...).

    Raises:
        UnsupportedInitOpError: naming the parameter and what changed.
    """
    for group in groups:
        for track in group.distinct_tracks():
            try:
                track.check_unchanged()
            except Cannot as why:  # the capture's edge
                raise refusal(
                    track.label,
                    "init_fn made it another tensor",
                    f"{why}; shardinit allocates each parameter with its own shape and dtype",
                    "Init code may only write its values (torch.nn.init, tensor methods)",
                    where=AFTER_INIT_FN,
                ) from None


def _warn_dropped(groups: list[ParamGroup], winners: list[Track]) -> None:
    dropped = [
        f"{track.holder}: {op.op} at {op.where}"
        for group, winner in zip(groups, winners, strict=True)
        for track in group.distinct_tracks()
        if track is not winner
        for op in track.ops
    ]
    if dropped:
        warnings.warn(
            f"capture_init: {len(dropped)} write(s) to tied parameter holders are dropped, "
            "because the parameter takes its tie source's init (as the library's own CPU "
            f"init does: untied, then tied): {listing(dropped, '; ')}",
            UserWarning,
            stacklevel=3,
        )
