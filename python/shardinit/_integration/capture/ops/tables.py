"""The dispatch's one table: which route each torch function, method or property takes
during a capture (:func:`route_of`), built from the name sets below and the tables of
fills (:mod:`.translations`) and elementwise steps (:mod:`.pointwise`).

A name in no set takes the closed-world route: refused where it touches a parameter's
values; on meta temporaries of known values, run on the CPU, its results tables
(:mod:`.concrete`); opaque where it touches other temporaries (its results cannot be
followed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from ...._caches import cached
from ....init import BaseInit, Normal, Uniform
from .composites import DROPOUTS, MOVES, RESIZES
from .pointwise import POINTWISE, inplace_name
from .translations import METHOD_TRANSLATIONS

__all__ = [
    "CASTS",
    "CONCATS",
    "COORDINATE_OPS",
    "COPIES",
    "DEVICE_QUESTIONS",
    "FACTORIES",
    "FLAGS",
    "METADATA",
    "RANDOM_SOURCES",
    "SCALES",
    "SOURCES",
    "SWITCHES",
    "VIEWS",
    "Route",
    "is_inplace",
    "route_of",
]

# Tensor methods/functions that only look at metadata: always allowed.
METADATA = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
        "is_contiguous", "element_size", "untyped_storage", "is_floating_point",
        "is_complex", "is_signed", "__len__", "__repr__", "__format__", "__hash__",
        "retain_grad", "register_hook", "data_ptr", "_is_view",
        "has_names", "is_shared", "is_pinned", "is_set_to", "type", "__reduce_ex__",
        "__dir__", "__setstate__",
    }
)  # fmt: skip
# torch's global switches that take no tensor, write none and draw nothing (``no_grad``'s
# ``_set_grad_enabled``, at every ``with torch.no_grad()`` of init code): run as they are,
# as any call without a tensor is (the route of what it does not touch, taken at once).
SWITCHES = frozenset({"_set_grad_enabled"})
# Flags of a parameter that init code may set: the stand-in takes them, and the capture
# carries them over to the parameter (ParamRecord.requires_grad).
FLAGS = frozenset({"requires_grad_", "requires_grad.__set__"})
# What a parameter's stand-in answers as the parameter would at run time (it is a meta
# tensor only for the capture): init code that guards on them runs as it will then.
# Inside torch.nn.init functions (recorded whole) the stand-in answers as it is.
DEVICE_QUESTIONS = frozenset(
    {"is_meta.__get__", "device.__get__", "is_cuda.__get__", "is_cpu.__get__", "get_device"}
)
# Ops whose results alias their input (checked: a result must share the storage).
VIEWS = frozenset(
    {
        "__getitem__", "view", "view_as", "reshape", "reshape_as", "narrow", "select", "t",
        "transpose", "permute", "unsqueeze", "squeeze", "flatten", "unflatten", "detach",
        "split", "split_with_sizes", "chunk", "tensor_split", "unbind", "expand",
        "expand_as", "as_strided", "diagonal", "movedim", "moveaxis", "swapaxes",
        "swapdims", "__iter__", "unfold", "alias", "hsplit", "vsplit",
    }
)  # fmt: skip
# Factories of temporaries, with the constant they fill (None: empty; "arg": a value).
FACTORIES: Mapping[str, float | str | None] = {
    "empty": None, "new_empty": None, "empty_like": None,
    "zeros": 0.0, "new_zeros": 0.0, "zeros_like": 0.0,
    "ones": 1.0, "new_ones": 1.0, "ones_like": 1.0,
    "full": "arg", "new_full": "arg", "full_like": "arg",
}  # fmt: skip
CONCATS = frozenset({"cat", "concat", "concatenate", "stack"})
COPIES = frozenset({"clone", "contiguous"})
#: Factories whose values are known per element (made into temporaries).
SOURCES = frozenset(
    {"arange", "linspace", "eye", "tensor", "new_tensor", "rand", "randn", "rand_like",
     "randn_like"}
)  # fmt: skip
#: The random sources among them, by name without ``_like``.
RANDOM_SOURCES: Mapping[str, BaseInit] = {"rand": Uniform(0.0, 1.0), "randn": Normal(0.0, 1.0)}
CASTS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "to", "type", "type_as"})
# Translations that are a step of the values before them: with a tensor operand (not a
# 0-d CPU number), or a rounding mode, they are elementwise steps instead.
SCALES = frozenset({"scale", "divide"})

#: Writes at positions computed from coordinates, and ``outer`` (:mod:`.coordinates`).
COORDINATE_OPS = frozenset(
    {"triu", "tril", "triu_", "tril_", "fill_diagonal_", "masked_fill", "masked_fill_",
     "index_fill", "index_fill_", "outer", "ger"}
)  # fmt: skip

Route = Literal[
    "metadata", "flag", "device", "view", "factory", "concat", "copy", "source", "pointwise",
    "cast", "translated", "inplace", "coordinate", "foreach", "dropout", "resize",
    "other",
]  # fmt: skip


_INPLACE_DUNDERS = frozenset(
    {"__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
     "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
     "__imatmul__", "__setitem__"}
)  # fmt: skip


def is_inplace(name: str) -> bool:
    """Whether ``name`` writes its first argument, by torch's naming convention (a
    trailing underscore; the in-place operators; property setters)."""
    if name.endswith("__"):
        return name in _INPLACE_DUNDERS or name.endswith(".__set__")
    return name.endswith("_")


@cached
def route_of(name: str) -> Route:
    """The route of the torch function, method or property accessor ``name``
    (:func:`.frames.func_name`); ``"other"`` for every name the tables do not know."""
    if name in DEVICE_QUESTIONS:
        return "device"
    if name in FLAGS:
        return "flag"
    if name in METADATA or name in SWITCHES or name.endswith(".__get__"):
        return "metadata"
    if name.startswith("_foreach_"):
        return "foreach"
    if name in DROPOUTS:
        return "dropout"
    if name in RESIZES:
        return "resize"
    if name in METHOD_TRANSLATIONS:
        return "translated"
    if name in VIEWS:
        return "view"
    if name in FACTORIES:
        return "factory"
    if name in CONCATS:
        return "concat"
    if name in COPIES:
        return "copy"
    if name in SOURCES:
        return "source"
    if name in POINTWISE:
        return "pointwise"
    if name in COORDINATE_OPS:
        return "coordinate"
    if inplace_name(name) is not None:
        return "inplace"
    if name in CASTS or name in MOVES:
        return "cast"
    return "other"
