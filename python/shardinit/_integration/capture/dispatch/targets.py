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

from ..ops import METHOD_TRANSLATIONS, SCALES, bind, inplace_name, is_inplace, shown
from ..trace import Track
from .calls import NOT_MINE, Call, Mode

__all__ = [
    "CPU",
    "answer_device",
    "write_at_coordinates",
    "write_copy",
    "write_data",
    "write_inplace",
    "write_item",
    "write_pad",
    "write_translated",
]

CPU = torch.device("cpu")


def _target(call: Call) -> Track:
    assert call.target is not None  # the families ask these handlers only on a target
    return call.target


def _written(mode: Mode, call: Call) -> Any:
    """After a write is recorded: its integer check, then the write run for real."""
    target = _target(call)
    mode.steps.check_integers(target, call.args[0], call.name)
    return mode.writes.run_on(target, call.func, call.args, call.kwargs)


def _tensor_operand(args: Sequence[Any], kwargs: Mapping[str, Any]) -> bool:
    """Whether a mul_/div_ has a tensor operand (not a 0-d CPU number) or a rounding."""
    if kwargs.get("rounding_mode") is not None:
        return True
    other = args[1] if len(args) > 1 else kwargs.get("other")
    return isinstance(other, torch.Tensor) and (other.dim() > 0 or other.device.type != "cpu")


def write_translated(mode: Mode, call: Call) -> Any:
    """A translated fill (``normal_``, ``fill_``, ``mul_`` by a number, ...); a scale
    by a tensor, or with a rounding, is an in-place elementwise step instead."""
    entry = METHOD_TRANSLATIONS[call.name]
    if entry.kind in SCALES and _tensor_operand(call.args, call.kwargs):
        return write_inplace(mode, call)
    options = {k: v for k, v in call.kwargs.items() if k != "rounding_mode"}
    values = bind(call.args[1:], options, entry)
    arguments = ", ".join(f"{n}={shown(v)}" for n, v in zip(entry.names, values, strict=True))
    op = f"{call.name.strip('_')}_({arguments})"
    mode.coordinates.write(_target(call), call.args[0], entry, values, op)
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


def write_pad(mode: Mode, call: Call) -> Any:
    """Zero padding is the identity (transformers' ``_adjust_bias`` stores it back);
    any other pad is no write of this family's."""
    pad = call.args[1] if len(call.args) > 1 else call.kwargs.get("pad", ())
    return NOT_MINE if any(pad) else call.args[0]


def write_data(mode: Mode, call: Call) -> Any:
    """``tensor.data = value`` (:meth:`.writes.Writes.set_data`)."""
    mode.writes.set_data(_target(call), call.args[0], call.args[1])
    return None


def write_item(mode: Mode, call: Call) -> Any:
    """``tensor[index] = value`` (:meth:`.writes.Writes.setitem`)."""
    mode.writes.setitem(_target(call), call.args[0], call.args[1], call.args[2])
    return None


def write_at_coordinates(mode: Mode, call: Call) -> Any:
    """One of the coordinate family's ops (:mod:`..trace.coordinates`): in place,
    recorded then run; else a new temporary."""
    if is_inplace(call.name):
        mode.coordinates.write_at(call.name, _target(call), call.args, call.kwargs)
        return mode.writes.run_on(_target(call), call.func, call.args, call.kwargs)
    return mode.coordinates.new_value(call.name, call.func, call.args, call.kwargs)


def answer_device(mode: Mode, call: Call) -> Any:
    """A parameter's stand-in answers as the parameter will at run time (its device,
    ``is_cuda``, ...); other followed tensors answer as they are."""
    target = _target(call)
    if target.kind != "param":
        return NOT_MINE
    device = mode.devices.get(id(target), CPU)
    if call.name == "device.__get__":
        return device
    if call.name == "get_device":
        if device.type == "cpu":
            return -1
        return device.index if device.index is not None else torch.cuda.current_device()
    kind = call.name.removeprefix("is_").removesuffix(".__get__")
    return device.type == kind
