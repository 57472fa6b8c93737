"""What torch's factories, sources and casts make: the data the dispatch's op families
(:mod:`..dispatch.families`) read, beside the tables of fills (:mod:`.translations`) and
elementwise steps (:mod:`.pointwise`). Which route a name takes is the families' to say.
"""

from __future__ import annotations

from collections.abc import Mapping

from ....init import BaseInit, Normal, Uniform
from .pointwise import CAST_DTYPES

__all__ = ["CASTS", "FACTORIES", "RANDOM_SOURCES", "SCALES", "SOURCES"]

# Factories of temporaries, with the constant they fill (None: empty; "arg": a value).
FACTORIES: Mapping[str, float | str | None] = {
    "empty": None, "new_empty": None, "empty_like": None,
    "zeros": 0.0, "new_zeros": 0.0, "zeros_like": 0.0,
    "ones": 1.0, "new_ones": 1.0, "ones_like": 1.0,
    "full": "arg", "new_full": "arg", "full_like": "arg",
}  # fmt: skip
#: Factories whose values are known per element (made into temporaries).
SOURCES = frozenset(
    {"arange", "linspace", "eye", "tensor", "new_tensor", "rand", "randn", "rand_like",
     "randn_like"}
)  # fmt: skip
#: The random sources among them, by name without ``_like``.
RANDOM_SOURCES: Mapping[str, BaseInit] = {"rand": Uniform(0.0, 1.0), "randn": Normal(0.0, 1.0)}
#: Casts: by their dtype's name (:data:`.pointwise.CAST_DTYPES`), or naming it.
CASTS = frozenset({*CAST_DTYPES, "to", "type", "type_as"})
# Translations that are a step of the values before them: with a tensor operand (not a
# 0-d CPU number), or a rounding mode, they are elementwise steps instead.
SCALES = frozenset({"scale", "divide"})
