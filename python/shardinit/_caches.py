"""The one policy of shardinit's process-global caches: least recently used, at most
:data:`CACHE_SIZE` entries each (and, for a cache of large values, at most a budget of
bytes: :class:`BoundedMap`'s ``budget``).

A cache here only saves recomputing a pure answer (a dtype's range, a torch function's
route, an action built from plain arguments, whether a code object is the user's), so
dropping an entry changes no value, only time. The bound keeps a long-lived process
(a server building many models, a notebook) from holding every key it ever saw: user
callables and code objects among them, which the bound lets go once they are the least
recently used. Functions use :data:`cached`; caches filled only for some keys (a check
remembered when it passed) use :class:`BoundedMap`. Neither imports torch.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Final, Generic, TypeVar

__all__ = ["CACHE_SIZE", "BoundedMap", "cached"]

#: Entries each cache holds at most: far above what one model asks (a few dozen
#: constants, dtypes, init calls), small beside the memory of any model.
CACHE_SIZE: Final = 4096

#: ``functools.lru_cache`` bounded by :data:`CACHE_SIZE`: the decorator of every cached
#: function (``cache_clear`` and ``__wrapped__`` as lru_cache gives them).
cached: Final = functools.lru_cache(maxsize=CACHE_SIZE)

_K = TypeVar("_K")
_V = TypeVar("_V")


class BoundedMap(Generic[_K, _V]):
    """A map of at most :data:`CACHE_SIZE` entries that forgets the least recently used
    one when full, for caches whose caller decides which answers to keep.

    Args:
        budget: for values whose size matters (tables), the most their weights (the
            ``weight`` given to :meth:`put`, in bytes) may add up to: the least recently
            used go first, and a value heavier than the whole budget is not kept.
    """

    __slots__ = ("_budget", "_entries", "_held", "_weights")

    def __init__(self, budget: int | None = None) -> None:
        self._entries: OrderedDict[_K, _V] = OrderedDict()
        self._weights: dict[_K, int] = {}
        self._budget = budget
        self._held = 0

    def get(self, key: _K) -> _V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: _K, value: _V, weight: int = 0) -> None:
        if self._budget is not None and weight > self._budget:
            return
        self._held += weight - self._weights.pop(key, 0)
        self._weights[key] = weight
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > CACHE_SIZE or (
            self._budget is not None and self._held > self._budget
        ):
            dropped, _ = self._entries.popitem(last=False)
            self._held -= self._weights.pop(dropped)

    def __len__(self) -> int:
        return len(self._entries)
