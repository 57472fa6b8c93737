"""The dtypes of stream format v1 by name, with their element sizes; no torch here.

The one home of the list: :data:`shardinit.SUPPORTED_DTYPES` maps torch dtypes onto
these names, which are what the core takes (docs/stream-format.md §3, §4), and
``shardinit plan`` counts bytes from the sizes without importing torch.
"""

from __future__ import annotations

__all__ = ["DTYPE_SIZES"]

#: Bytes per element of each dtype of stream format v1, by name.
DTYPE_SIZES: dict[str, int] = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
