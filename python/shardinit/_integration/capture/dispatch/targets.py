"""What a call on a followed tensor does first, per op family (:mod:`.families`): a
write into it (a translated fill, ``copy_``, an in-place step, ``.data =``,
``__setitem__``, a zero ``pad``, a coordinate operation), recorded, then run on a
temporary's or buffer's real values (:meth:`.writes.Writes.run_on`); or a parameter's
stand-in answering as the parameter will at run time. Each handler is given a call
whose target is followed, and answers :data:`.calls.NOT_MINE` where it leaves it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..ops import METHOD_TRANSLATIONS, SCALES, bind, inplace_name, is_inplace, shown_call
from ..trace import Track, give_memory_format, memory_format_now, memory_format_of, same_view
from .calls import NOT_MINE, Call, Mode

__all__ = [
    "CPU",
    "META",
    "META_AS_CPU",
    "answer_device",
    "register_grad_hook",
    "run_as_is",
    "stands_for_cpu",
    "write_at_coordinates",
    "write_copy",
    "write_data",
    "write_inplace",
    "write_item",
    "write_pad",
    "write_translated",
]

CPU = torch.device("cpu")
#: The device a temporary on meta answers (:func:`answer_device`): the CPU, as an object
#: of its own, so that where code hands it back to torch as a new tensor's device
#: (``torch.zeros(n, device=w.device)``) the capture makes that tensor on meta, beside
#: the temporary (:meth:`.mode.CaptureMode.route`): a question sees eager's device, a
#: value stays where the capture follows it.
META_AS_CPU = torch.device("cpu")
META = torch.device("meta")


def stands_for_cpu(track: Track) -> bool:
    """Whether ``track`` is a temporary on meta: meta only for the capture, it is the CPU
    tensor eager torch computes (:func:`answer_device`, :func:`.handlers.cast`)."""
    return track.kind == "temp" and bool(track.base.is_meta)


def _target(call: Call) -> Track:
    assert call.target is not None  # the families ask these handlers only on a target
    return call.target


def _written(mode: Mode, call: Call) -> Any:
    """After a write is recorded: its integer check, then the write run for real."""
    target = _target(call)
    mode.steps.check_integers(target, call.args[0], call.name)
    return mode.writes.run_on(target, call.func, call.args, call.kwargs)


def _tensor_operand(mode: Mode, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a mul_/div_ (or fill_) has a tensor operand or a rounding: not a number,
    which a 0-d CPU tensor the capture does not follow is (one it follows is a value it
    computes: ``torch.rand(())``'s real values are torch's draw, not the stream's)."""
    if kwargs.get("rounding_mode") is not None:
        return True
    other = args[1] if len(args) > 1 else kwargs.get("other", kwargs.get("value"))
    if not isinstance(other, torch.Tensor):
        return False
    return other.dim() > 0 or other.device.type != "cpu" or mode.store.lookup(other) is not None


def write_translated(mode: Mode, call: Call) -> Any:
    """A translated fill (``normal_``, ``fill_``, ``mul_`` by a number, ...); a scale
    by a tensor, or with a rounding, is an in-place elementwise step instead, and a
    fill by a tensor (a 0-d meta temporary: ``torch.tensor(...)`` computed in a
    constructor on meta) the copy of it that torch makes, broadcast."""
    entry = METHOD_TRANSLATIONS[call.name]
    if entry.kind in SCALES and _tensor_operand(mode, call.args, call.kwargs):
        return write_inplace(mode, call)
    if entry.kind == "constant" and _tensor_operand(mode, call.args, call.kwargs):
        value = call.args[1] if len(call.args) > 1 else call.kwargs["value"]
        mode.copies.copy_into(_target(call), call.args[0], value, call.name)
        return _written(mode, call)
    options = call.kwargs  # (bind reads it only; a copy where a rounding is dropped)
    if "rounding_mode" in options:
        options = {k: v for k, v in options.items() if k != "rounding_mode"}
    values = bind(call.args[1:], options, entry)
    op = shown_call(f"{call.name.strip('_')}_", entry.names, values)
    mode.engine.write(_target(call), call.args[0], entry, values, op)
    return _written(mode, call)


def write_inplace(mode: Mode, call: Call) -> Any:
    """An in-place elementwise step (``log_``, ``w *= t``)."""
    base = inplace_name(call.name)
    if base is None:
        return NOT_MINE
    mode.steps.inplace(call.name, base, _target(call), call.func, call.args, call.kwargs)
    return _written(mode, call)


def write_copy(mode: Mode, call: Call) -> Any:
    """``tensor.copy_(src)``."""
    mode.copies.copy_into(_target(call), call.args[0], call.args[1], "copy_")
    return _written(mode, call)


def run_as_is(mode: Mode, call: Call) -> Any:
    """The call itself, as torch runs it."""
    return call.func(*call.args, **call.kwargs)


def write_pad(mode: Mode, call: Call) -> Any:
    """Zero padding is the identity (transformers' ``_adjust_bias`` stores it back);
    any other pad is no write of this family's."""
    pad = call.args[1] if len(call.args) > 1 else call.kwargs.get("pad", ())
    return NOT_MINE if any(pad) else call.args[0]


def write_data(mode: Mode, call: Call) -> Any:
    """``tensor.data = value`` (:meth:`.writes.Writes.set_data`); of a whole parameter
    or buffer, it takes ``value``'s memory format too, as eager's tensor becomes
    ``value`` (:func:`_layout_taken`)."""
    target, tensor, value = _target(call), call.args[0], call.args[1]
    memory_format = _layout_taken(mode, target, tensor, value)
    mode.writes.set_data(target, tensor, value)
    if memory_format is not None:
        give_memory_format(target, memory_format)
    return None


def _layout_taken(
    mode: Mode, target: Track, tensor: torch.Tensor, value: Any
) -> torch.memory_format | None:
    """The memory format a whole parameter or buffer takes from ``tensor.data = value``,
    where it changes: ``value``'s where it is not row-major (``p.data =
    p.data.contiguous(memory_format=torch.channels_last)``); row-major again where it is
    and the tensor had another. ``value`` the tensor itself changes nothing (eager's
    ``contiguous()`` of a contiguous tensor). A sharded (DTensor) parameter's local
    shards are row-major tensors of their own: refused, named."""
    if target.kind == "temp" or tensor is not target.base or not isinstance(value, torch.Tensor):
        return None
    if same_view(value, tensor):
        return None
    memory_format = memory_format_of(value)
    if memory_format is None or memory_format == memory_format_now(target):
        return None
    if getattr(type(target.base), "sharded", False):
        raise mode.store.fail(
            target, f"tensor.data = value (memory_format={memory_format})",
            "a sharded (DTensor) parameter's local shards are contiguous tensors of "
            "their own (FSDP2 refuses non-contiguous parameters); keep it row-major",
        )  # fmt: skip
    return memory_format


def register_grad_hook(mode: Mode, call: Call) -> Any:
    """``p.register_hook(fn)`` / ``p.register_post_accumulate_grad_hook(fn)`` on a
    parameter's stand-in: registered on the stand-in, whose hooks the parameter takes
    after the capture (:func:`..session.standins.give_parameter_attributes`) and the
    allocated parameter after it, as eager's parameter keeps them; the handle init code
    gets removes them there too (the same dict). A sharded (DTensor) parameter is
    refused, named: its hooks would be on FSDP's or the tensor-parallel plan's object,
    which shardinit does not hand them to. On a buffer's stand-in, refused: no buffer
    takes the stand-in's hooks. On a temporary, registered as it is."""
    target = _target(call)
    if target.kind == "temp":
        return run_as_is(mode, call)
    if target.kind != "param":
        raise mode.store.fail(
            target, call.name,
            "the hook would stay on the capture's stand-in, not on the tensor materialize "
            "fills (eager torch keeps it on the tensor); register it after materialize",
        )  # fmt: skip
    if getattr(type(target.base), "sharded", False):
        raise mode.store.fail(
            target, call.name,
            "a gradient hook on a sharded (DTensor) parameter is not carried to the "
            "parameter materialize fills; register it after materialize",
        )  # fmt: skip
    return call.func(*call.args, **call.kwargs)


def write_item(mode: Mode, call: Call) -> Any:
    """``tensor[index] = value`` (:meth:`.writes.Writes.setitem`); by a boolean mask of
    a parameter's whole shape (``w[torch.ones_like(w, dtype=torch.bool).triu()] = 0``),
    with a number, it is ``masked_fill_``, as torch computes it (:func:`_as_masked_fill`)."""
    target, tensor, index, value = _target(call), call.args[0], call.args[1], call.args[2]
    mask = _as_masked_fill(target, tensor, index, value)
    if mask is not None:
        mode.coordinates.write_at("masked_fill_", target, (tensor, mask, value), {})
        return None
    mode.writes.setitem(target, tensor, index, value)
    return None


def _as_masked_fill(target: Track, tensor: torch.Tensor, index: Any, value: Any) -> Any:
    """The mask of ``tensor[mask] = value`` where that is ``tensor.masked_fill_(mask,
    value)``: on a parameter (a stand-in: its write is the record), ``mask`` a boolean
    meta tensor of the tensor's own shape (one whose values the capture follows: a mask
    on the CPU is a list of positions, :meth:`.writes.Writes.setitem`), ``value`` a
    number; None for any other index."""
    if isinstance(index, tuple) and len(index) == 1:
        index = index[0]
    if target.kind != "param" or not isinstance(index, torch.Tensor) or not index.is_meta:
        return None
    if index.dtype != torch.bool or tuple(index.shape) != tuple(tensor.shape):
        return None
    number = isinstance(value, (int, float)) or (
        isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_meta
    )
    return index if number else None


def write_at_coordinates(mode: Mode, call: Call) -> Any:
    """One of the coordinate family's ops (:mod:`..trace.coordinates`): in place,
    recorded then run; else a new temporary."""
    if is_inplace(call.name):
        mode.coordinates.write_at(call.name, _target(call), call.args, call.kwargs)
        return mode.writes.run_on(_target(call), call.func, call.args, call.kwargs)
    return mode.coordinates.new_value(call.name, call.func, call.args, call.kwargs)


def answer_device(mode: Mode, call: Call) -> Any:
    """A parameter's stand-in answers as the parameter will at run time (its device,
    ``is_cuda``, ...); a temporary on meta (a tensor the build or init code made there
    for the capture: eager torch computes it on the CPU) answers as the CPU tensor it
    stands for: one of known values as the CPU run of it does, one of values unknown at
    capture (random, a parameter's, never written) with :data:`META_AS_CPU`. So code
    which branches on it (``if w.is_meta: return``, peft's "skip on meta, a checkpoint
    fills it") takes eager's branch, recorded or refused as any other; other followed
    tensors answer as they are."""
    target = _target(call)
    if target.kind == "param":
        device = mode.devices.get(id(target), CPU)
    elif stands_for_cpu(target):
        # Values known at capture (:mod:`..trace.concrete`): the CPU table the capture
        # runs it as answers, and a tensor made on its device is a real CPU one (loops
        # of element writes run there); else META_AS_CPU.
        name, func, args, kwargs = call.name, call.func, call.args, call.kwargs
        evaluated, _ = mode.concrete.attempt(name, func, args, kwargs)
        if evaluated is not None:
            return mode.concrete.results(name, func, args, kwargs, evaluated)
        device = META_AS_CPU
    else:
        return NOT_MINE
    if call.name == "device.__get__":
        return device
    if call.name == "get_device":
        if device.type == "cpu":
            return -1
        return device.index if device.index is not None else torch.cuda.current_device()
    kind = call.name.removeprefix("is_").removesuffix(".__get__")
    return device.type == kind
