"""Argument checks shared by the public API: every error names the argument and the
allowed range; nothing is clamped or guessed."""

from __future__ import annotations

import math
import numbers
import operator
import sys
from typing import Any

import torch

from .errors import ShardInitError

U64_MAX = 2**64 - 1


def check_int(arg: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Returns ``value`` as an ``int`` if it is an integer (not a bool) in [low, high].

    Raises:
        TypeError: ``value`` is not an integer.
        ShardInitError: ``value`` is outside [low, high].
    """
    if isinstance(value, (bool, float)):
        raise TypeError(f"{arg} must be an int, got {type(value).__name__} {value!r}")
    try:
        # Accepts ints and integer-like objects (numpy integers, 0-d integer tensors).
        result = int(operator.index(value))
    except TypeError:
        raise TypeError(f"{arg} must be an int, got {type(value).__name__} {value!r}") from None
    if (low is not None and result < low) or (high is not None and result > high):
        lo = "-inf" if low is None else str(low)
        hi = "inf" if high is None else str(high)
        raise ShardInitError(f"{arg} must be in [{lo}, {hi}], got {result}")
    return result


def check_real(arg: str, value: Any) -> float:
    """Returns ``value`` as a finite ``float``.

    Raises:
        TypeError: ``value`` is not a real number.
        ShardInitError: ``value`` is NaN, infinite, or beyond binary64's range (an int
            or Fraction such as ``10**400``).
    """
    if type(value) is float and math.isfinite(value):
        return value  # what the checks below return for it (every initializer argument)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a real number, got {type(value).__name__} {value!r}")
    try:
        result = float(value)
    except OverflowError:
        # An exact int or Fraction past binary64's largest finite value (torch takes
        # Python floats, so no other rounding is possible).
        raise ShardInitError(
            f"{arg} must be a finite number in binary64's range [-{sys.float_info.max!r}, "
            f"{sys.float_info.max!r}], got {_abbreviated(value)}"
        ) from None
    if not math.isfinite(result):
        raise ShardInitError(f"{arg} must be a finite number, got {result}")
    return result


def _abbreviated(value: numbers.Real) -> str:
    """``value`` for an error message: huge ints by their digit count, not 400 digits."""
    text = repr(value)
    if len(text) <= 40:
        return f"{type(value).__name__} {text}"
    size = f"{len(str(abs(value)))} digits" if isinstance(value, int) else f"{len(text)} characters"
    return f"{type(value).__name__} {text[:12]}... ({size})"


def check_name(arg: str, value: Any) -> str:
    """Returns ``value`` if it is a non-empty ``str``."""
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a str, got {type(value).__name__} {value!r}")
    if not value:
        raise ShardInitError(f"{arg} must be a non-empty string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        # Lone surrogates have no UTF-8 form, so stream-format.md §1's key cannot be computed.
        raise ShardInitError(
            f"{arg} must be encodable as UTF-8, got {value!r} ({error.reason} at index "
            f"{error.start})"
        ) from None
    return value


def check_seed(value: Any) -> int:
    """Returns ``value`` if it is an int in [0, 2^64)."""
    if type(value) is int and 0 <= value <= U64_MAX:
        return value  # what check_int returns for it (checked once per spec, per parameter)
    return check_int("seed", value, low=0, high=U64_MAX)


#: What a ``device`` argument may be: None (the CPU), a str (``"cuda:1"``), an int (a CUDA
#: index) or a ``torch.device``; anything else is refused at run time by
#: :func:`resolve_device`.
DeviceLike = torch.device | str | int | None


def resolve_device(device: object) -> torch.device:
    """``device`` (None: the CPU, a str, an int or a ``torch.device``) as a CPU or
    available CUDA ``torch.device``.

    Raises:
        TypeError: ``device`` of another type.
        ShardInitError: not a torch device, not the CPU or CUDA, or CUDA unavailable.
    """
    if device is None:
        return torch.device("cpu")
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise TypeError(
            f"device must be None, a str, an int or a torch.device, got "
            f"{type(device).__name__} {device!r}"
        )
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ShardInitError(f"device must be a torch device, got {device!r}: {reason}") from None
    if resolved.type not in ("cpu", "cuda"):
        raise ShardInitError(f"device must be 'cpu' or a CUDA device, got {resolved}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ShardInitError(f"device is {resolved} but CUDA is not available")
    return resolved
