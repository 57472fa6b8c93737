"""Direct access to stream format v1: keys and raw words (debugging, verification)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._validate import U64_MAX, check_int, check_name, check_seed
from .errors import ShardInitError

__all__ = ["key", "stream_words"]


def key(seed: int, name: str) -> int:
    """key64 of stream-format.md §1: the first 8 bytes (little-endian) of
    ``SHA-256(b"shardinit-v1\\0" || u64_le(seed) || utf8(name))``.

    Example:
        >>> hex(key(0, "w"))
        '0x47a94443d83ccf19'
    """
    return int(_core.key64(check_seed(seed), check_name("name", name)))


def stream_words(seed: int, name: str, start: int, count: int) -> np.ndarray[Any, Any]:
    """Words ``[start, start + count)`` (word positions, not blocks or elements) of the
    stream of ``(seed, name)``, as a uint32 array.

    Raises:
        ShardInitError: ``start``/``count`` negative or past word position 2^64.
    """
    stream_key = key(seed, name)
    start = check_int("start", start, low=0, high=U64_MAX)
    count = check_int("count", count, low=0, high=2**40)
    if start + count > 2**64:
        raise ShardInitError(
            f"start + count must be <= 2^64 (word positions are 64-bit), got {start + count}"
        )
    words = np.empty(count, dtype=np.uint32)
    _core.stream_words(stream_key, start, words)
    return words
