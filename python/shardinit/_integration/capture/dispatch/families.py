"""The op families of the dispatch, each registered once: its names, its route and its
handlers together (as pydantic-core registers its validators), in the order a name is
looked up (:func:`family_of`: the first family that owns a name takes it).

A family's names are written here where they only say the route (``VIEWS``); where a
name carries data (a fill, a step, a factory's constant), the family reads them from
the table of :mod:`..ops` that holds the data. A call on a followed tensor is first
offered to the family's ``on_target`` handler (:mod:`.targets`: a write into it), then
to its ``handler`` (:mod:`.handlers`); each answers :data:`.calls.NOT_MINE` where the
call is not its, and a call no handler takes is :func:`.handlers.unrouted`.

To add a family: write its handler(s), taking ``(mode, call)``, in :mod:`.handlers`
(or :mod:`.targets` for a write into a followed tensor), add its route to
:data:`.calls.Route`, and register it in :data:`FAMILIES` before any family whose names
overlap its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from ...._caches import cached
from ..ops import (
    CASTS,
    DROPOUTS,
    FACTORIES,
    METHOD_TRANSLATIONS,
    MOVES,
    POINTWISE,
    RESIZES,
    SOURCES,
    inplace_name,
)
from . import handlers, targets
from .calls import Handler, Route
from .collectives import COLLECTIVES, follow_collective

__all__ = ["FAMILIES", "Family", "family_of"]


@dataclass(frozen=True)
class Family:
    """One op family: the names it owns (listed, or by a rule on the name), its route,
    and what handles its calls.

    Args:
        route: the family's route (:data:`.calls.Route`).
        names: the names it owns.
        rule: names it owns by their shape (``_foreach_`` ops, in-place forms).
        on_target: the write into a followed tensor a call on one is, first.
        handler: what the call does otherwise (or when ``on_target`` leaves it).
        as_is: the call runs as it is (questions of layout, flags).
        numbers: numpy scalars among its arguments are the Python numbers they hold,
            as torch takes operands and fill values.
    """

    route: Route
    names: Collection[str] = ()
    rule: Callable[[str], bool] | None = None
    on_target: Handler | None = None
    handler: Handler | None = None
    as_is: bool = False
    numbers: bool = False

    def owns(self, name: str) -> bool:
        return name in self.names or (self.rule is not None and self.rule(name))


#: Questions a parameter's stand-in answers as the parameter would at run time (it is a
#: meta tensor only for the capture): init code that guards on them runs as it will
#: then. Inside torch.nn.init functions (recorded whole) the stand-in answers as it is.
DEVICE_QUESTIONS = frozenset(
    {"is_meta.__get__", "device.__get__", "is_cuda.__get__", "is_cpu.__get__", "get_device"}
)
# Flags of a parameter that init code may set: the stand-in takes them, and the capture
# carries them over to the parameter (ParamRecord.requires_grad).
FLAGS = frozenset({"requires_grad_", "requires_grad.__set__"})
# Tensor methods/functions that only look at metadata: always allowed. With them,
# torch's global switches that take no tensor, write none and draw nothing (``no_grad``'s
# ``_set_grad_enabled``, at every ``with torch.no_grad()`` of init code): run as they are,
# as any call without a tensor is (the route of what it does not touch, taken at once).
METADATA = frozenset(
    {
        "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
        "is_contiguous", "element_size", "untyped_storage", "is_floating_point",
        "is_complex", "is_signed", "__len__", "__repr__", "__format__", "__hash__",
        "retain_grad", "data_ptr", "_is_view",
        "has_names", "is_shared", "is_pinned", "is_set_to", "type", "__reduce_ex__",
        "__dir__", "__setstate__", "_set_grad_enabled",
    }
)  # fmt: skip
#: Gradient hooks init code registers on a tensor (:func:`.targets.register_grad_hook`).
GRAD_HOOKS = frozenset({"register_hook", "register_post_accumulate_grad_hook"})
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
CONCATS = frozenset({"cat", "concat", "concatenate", "stack"})
COPIES = frozenset({"clone", "contiguous"})
#: Writes at positions computed from coordinates, and ``outer`` (:mod:`..trace.coordinates`).
COORDINATE_OPS = frozenset(
    {"triu", "tril", "triu_", "tril_", "fill_diagonal_", "masked_fill", "masked_fill_",
     "index_fill", "index_fill_", "outer", "ger"}
)  # fmt: skip

FAMILIES: tuple[Family, ...] = (
    Family("device", DEVICE_QUESTIONS, on_target=targets.answer_device),
    Family("flag", FLAGS, as_is=True),
    Family("grad_hook", GRAD_HOOKS, on_target=targets.register_grad_hook, handler=handlers.as_is),
    Family("metadata", METADATA, rule=lambda name: name.endswith(".__get__"), as_is=True),
    Family(
        "foreach",
        rule=lambda name: name.startswith("_foreach_"),
        handler=handlers.foreach,
        numbers=True,
    ),
    Family("dropout", DROPOUTS, handler=handlers.dropout),
    Family("normal", frozenset({"normal"}), handler=handlers.normal, numbers=True),
    Family("collective", COLLECTIVES, handler=follow_collective),
    Family("resize", RESIZES, handler=handlers.resize),
    Family("translated", METHOD_TRANSLATIONS, on_target=targets.write_translated, numbers=True),
    Family("view", VIEWS, handler=handlers.view),
    Family("factory", FACTORIES, handler=handlers.factory, numbers=True),
    Family("concat", CONCATS, handler=handlers.concat),
    Family("copy", COPIES, handler=handlers.copy),
    Family("source", SOURCES, handler=handlers.source, numbers=True),
    Family("pointwise", POINTWISE, handler=handlers.pointwise, numbers=True),
    Family("coordinate", COORDINATE_OPS, on_target=targets.write_at_coordinates, numbers=True),
    Family(
        "inplace",
        rule=lambda name: inplace_name(name) is not None,
        on_target=targets.write_inplace,
        numbers=True,
    ),
    Family("cast", CASTS | MOVES, handler=handlers.cast),
    Family("set_data", frozenset({"data.__set__"}), on_target=targets.write_data),
    Family("copy_into", frozenset({"copy_"}), on_target=targets.write_copy),
    Family("pad", frozenset({"pad"}), on_target=targets.write_pad),
    Family("setitem", frozenset({"__setitem__"}), on_target=targets.write_item),
)
#: Every name no family owns: refused where it touches a parameter's values; on meta
#: temporaries of known values, run on the CPU, its results tables
#: (:mod:`..trace.concrete`); opaque where it touches other temporaries.
OTHER = Family("other")


@cached
def family_of(name: str) -> Family:
    """The family of the torch function, method or property accessor ``name``
    (:func:`..trace.frames.func_name`): the first of :data:`FAMILIES` that owns it."""
    return next((family for family in FAMILIES if family.owns(name)), OTHER)
