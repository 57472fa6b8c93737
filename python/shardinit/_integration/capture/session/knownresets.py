"""torch's own ``reset_parameters`` of ``Linear`` and the convolutions, recorded without
running it: the two ``torch.nn.init`` calls the capture records when it follows the
method (:meth:`..dispatch.CaptureMode.init_call`), with the same arguments and the same
line, and none of the method's own torch calls (a ``no_grad`` switch, the fans, the
hand-over of each init function to the modes), which cost as much again.

Followed as it runs, torch's method (checked 2.15.0) calls
``init.kaiming_uniform_(self.weight, a=math.sqrt(5))`` and, with a bias,
``init.uniform_(self.bias, -bound, bound)`` where ``bound = 1 / math.sqrt(fan_in) if
fan_in > 0 else 0``: each is recorded at its first operation with its arguments (the
others at their defaults), at ``file:line in reset_parameters`` (torch.nn's reset
methods are the user's code, :func:`..trace.frames.user_frame`). Only where every fact
holds: the class's method is torch's own, the module's ``init`` is ``torch.nn.init``
with its own two functions, the weight is contiguous (a channels-last one goes through
a temporary); else the method runs followed as any code.
"""

from __future__ import annotations

import dis
import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.modules import linear

from ...._caches import cached
from ...._torch_compat import (
    CONV_BASE,
    FANS,
    mode_popped,
    source_as_checked,
    torch_function_disabled,
)
from ..dispatch import CaptureMode
from ..ops import INIT_FUNCTIONS

__all__ = ["record_torch_reset"]


def _call_sites(method: Callable[..., object], name: str) -> list[str]:
    """``file:line in function`` of each call of ``init.<name>`` on one line in
    ``method``'s code, in order, as :func:`..trace.frames.user_frame` names a frame
    stopped there."""
    code = method.__code__
    return [
        f"{code.co_filename}:{instruction.positions.lineno} in {code.co_name}"
        for instruction in dis.get_instructions(code)
        if instruction.argval == name
        and instruction.opname in ("LOAD_METHOD", "LOAD_ATTR")
        and instruction.positions is not None
        and instruction.positions.lineno == instruction.positions.end_lineno
    ]


#: torch's own methods this module records without running.
_TORCHS = (CONV_BASE.reset_parameters, linear.Linear.reset_parameters)


@cached  # (asked at every Linear and convolution a recording builds: read once each)
def _sites(method: Callable[..., object]) -> tuple[str, str] | None:
    """Where torch's own ``method`` (one of :data:`_TORCHS`) calls ``kaiming_uniform_``
    (the last call: a conv's contiguous weight's) and ``uniform_``; None for a method of
    another source than the one checked (:func:`~shardinit._torch_compat.
    source_as_checked`: another torch), which is followed as it runs. Read at the first
    recording, not at import."""
    kaiming, uniform = _call_sites(method, "kaiming_uniform_"), _call_sites(method, "uniform_")
    if kaiming and uniform and source_as_checked(method):
        return kaiming[-1], uniform[-1]
    return None


#: The init functions the methods call, as torch defines them.
_INIT_FUNCTIONS = (
    ("kaiming_uniform_", INIT_FUNCTIONS["kaiming_uniform_"]),
    ("uniform_", INIT_FUNCTIONS["uniform_"]),
    ("_calculate_fan_in_and_fan_out", FANS),
)


def record_torch_reset(recorder: CaptureMode, module: nn.Module, namespace: object) -> bool:
    """Records ``module.reset_parameters()`` as the capture records it when followed,
    without running it, where it is torch's own (``namespace``: the torch module that
    defines it); answers whether it did (else nothing was recorded)."""
    method = getattr(type(module), "reset_parameters", None)
    sites = _sites(method) if method in _TORCHS else None
    if sites is None or getattr(namespace, "init", None) is not torch.nn.init:
        return False
    if any(getattr(torch.nn.init, name, None) is not own for name, own in _INIT_FUNCTIONS):
        return False
    weight = module._parameters.get("weight")
    bias = module._parameters.get("bias")
    store = recorder.store
    with torch_function_disabled():  # the tensors' own layouts, as torch's method reads them
        if weight is None or not weight.is_contiguous():
            return False
        fan_in = FANS(weight)[0] if bias is not None else 0
    weight_track = store.lookup(weight)
    bias_track = None if bias is None else store.lookup(bias)
    if weight_track is None or (bias is not None and bias_track is None):
        return False
    outer_site = store.call_site
    try:
        # As the capture's mode runs a call it routes: itself off the stack.
        with mode_popped(recorder):
            store.call_site = sites[0]
            recorder.init_call(
                "kaiming_uniform_", weight_track, weight, {"tensor": weight, "a": math.sqrt(5)}
            )
            if bias is not None and bias_track is not None:
                bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
                store.call_site = sites[1]
                recorder.init_call(
                    "uniform_", bias_track, bias, {"tensor": bias, "a": -bound, "b": bound}
                )
    finally:
        store.call_site = outer_site
    return True
