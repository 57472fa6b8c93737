"""The dtypes of stream format v1 by name, with their element sizes; no torch here.

The one home of the list: :data:`shardinit.SUPPORTED_DTYPES` maps torch dtypes onto
these names, which are what the core takes (docs/stream-format.md §3, §4), and
``shardinit plan`` counts bytes from the sizes without importing torch.
"""

from __future__ import annotations

__all__ = ["DTYPE_SIZES", "max_numel"]

#: Bytes per element of each dtype of stream format v1, by name.
DTYPE_SIZES: dict[str, int] = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}


def max_numel(dtype: str) -> int:
    """The most elements stream format v1 addresses in one parameter of ``dtype`` (a key
    of :data:`DTYPE_SIZES`): 2^64 - 1, or 2^63 for float64, whose elements take two
    words each (docs/stream-format.md, "Limits")."""
    return 2**63 if dtype == "float64" else 2**64 - 1
