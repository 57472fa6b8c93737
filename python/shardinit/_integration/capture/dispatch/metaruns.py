"""In-place steps on meta temporaries that torch already ran once with the same outcome.

A capture records a write to a temporary, then runs it on the temporary's tensor
(:meth:`.writes.Writes.run_on`): on a meta tensor that only checks the call (dtypes,
arguments) and bumps the version counter. torch's meta kernels of several pointwise
steps are its Python references: a meta ``clamp_`` takes about 1.5 ms, ``erfinv_`` and
``exp_`` 0.1 ms, against 2-4 us for ``mul_``; timm's ``trunc_normal_`` ends in
``clamp_``, so a ViT-S's 50 weights spent a third of their capture there.

Such a run is a pure function of the call: the function, the numbers it takes, and the
tensor's type, dtype, shape, strides and autograd state (a meta tensor has no values).
So once a call of one key has run, returned its tensor and left its shape, strides and
dtype as they were, another call of the same key would do the same: it is skipped, and
only its version bump is made (``w[i, j] = c`` too: an index of numbers and slices is
plain). Calls with a tensor argument, calls that change the
tensor's metadata (``resize_``, ``t_``) or raise, tensors autograd records (a
grad-requiring tensor with grad enabled: the step would get a ``grad_fn``) and inference
tensors (whose writes torch refuses outside inference mode) always run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ...._caches import BoundedMap
from ...._torch_compat import stored_strides, torch_function_disabled

__all__ = ["run_meta_inplace"]

#: Keys of calls that ran on a meta tensor and changed none of its metadata: whether the
#: call returned its tensor (else None: ``__setitem__``).
_PASSED: BoundedMap[tuple[Any, ...], bool] = BoundedMap()

#: Argument types whose value the key can hold (a number, a flag, an absent bound).
_PLAIN = (bool, int, float, type(None))


def _metadata(tensor: torch.Tensor) -> tuple[Any, ...]:
    with torch_function_disabled():  # its own metadata (see torch_function_disabled)
        return (tensor.dtype, tuple(tensor.shape), stored_strides(tensor), tensor.storage_offset())


def _key(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The call's key, or None when it is not a plain call on a meta tensor."""
    with torch_function_disabled():  # its own metadata (see torch_function_disabled)
        tensor = args[0] if args else None
        if not isinstance(tensor, torch.Tensor) or not tensor.is_meta:
            return None
        if (tensor.requires_grad and torch.is_grad_enabled()) or tensor.is_inference():
            return None  # autograd records the step; an inference tensor has no version
        plain = tuple(_plain(value) for value in args[1:])
        named = tuple(sorted((name, _plain(value)) for name, value in kwargs.items()))
        if None in plain or any(value is None for _, value in named):
            return None
        return (func, type(tensor), _metadata(tensor), tensor.requires_grad, plain, named)


def _plain(value: Any) -> tuple[Any, ...] | None:
    """A plain argument as a key: its type with its value (1, 1.0 and True are equal
    keys but not equal calls), an index (``w[i, :3] = c``) by its parts; None for
    anything else (a tensor)."""
    if type(value) in _PLAIN:
        return (type(value), value)
    if type(value) is slice:  # not hashable before Python 3.12
        parts = (_plain(value.start), _plain(value.stop), _plain(value.step))
        return None if None in parts else (slice, parts)
    if type(value) is tuple:
        items = tuple(_plain(item) for item in value)
        return None if None in items else (tuple, items)
    return (type(value),) if value is Ellipsis else None


def run_meta_inplace(
    run: Callable[[], Any], func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> Any:
    """``run()`` (the call ``func(*args, **kwargs)`` as the capture runs it), or its
    result without running it where a call of the same key already ran (module
    docstring)."""
    key = _key(func, args, kwargs)
    if key is None:
        return run()
    tensor = args[0]
    returned = _PASSED.get(key)
    if returned is not None:
        torch.autograd.graph.increment_version(tensor)
        return tensor if returned else None
    result = run()
    if (result is tensor or result is None) and _metadata(tensor) == key[2]:
        _PASSED.put(key, result is tensor)  # its tensor (an in-place op), or None (setitem)
    return result
