"""What torch's factories, sources and casts make: the data the dispatch's op families
(:mod:`..dispatch.families`) read, beside the tables of fills (:mod:`.translations`) and
elementwise steps (:mod:`.pointwise`). Which route a name takes is the families' to say.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ...._caches import cached
from ....init import BaseInit, Normal, Uniform
from .pointwise import CAST_DTYPES

__all__ = ["CASTS", "FACTORIES", "RANDOM_SOURCES", "SCALES", "SOURCES", "metadata_operands"]

# Factories of temporaries, with the constant they fill (None: empty; "arg": a value).
FACTORIES: Mapping[str, float | str | None] = {
    "empty": None, "new_empty": None, "empty_like": None, "empty_strided": None,
    "new_empty_strided": None,
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
CASTS = frozenset({*CAST_DTYPES, "to", "type", "type_as", "as_tensor"})
# Translations that are a step of the values before them: with a tensor operand (not a
# 0-d CPU number), or a rounding mode, they are elementwise steps instead.
SCALES = frozenset({"scale", "divide"})


@cached
def metadata_operands(name: str) -> frozenset[int]:
    """The positions of the tensor arguments of the aten operator ``name`` that it reads
    for their shape, dtype and device only, never their values, by torch's naming of
    its operators (native_functions.yaml): a ``<f>_like`` or ``new_<f>`` factory takes
    its ``self`` for those (``randint_like(p, 5)``, ``p.new_empty_strided(...)``: the
    ops FakeTensor lists as ``_like_tensor_constructors``), and a ``<f>_as`` operator of
    two tensors takes its second for them (``view_as``, ``expand_as``, ``reshape_as``,
    ``type_as``, ``resize_as_``). Empty for any other name."""
    packet = getattr(torch.ops.aten, name, None)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return frozenset()
    if name.endswith("_like") or name.startswith("new_"):
        return frozenset({0})
    if name.rstrip("_").endswith("_as"):
        schema = packet.default._schema  # (private, checked: torch 2.15)
        tensors = [a for a in schema.arguments if isinstance(a.type, torch.TensorType)]
        if len(tensors) == 2 and schema.arguments[1] is tensors[1]:
            return frozenset({1})
    return frozenset()
