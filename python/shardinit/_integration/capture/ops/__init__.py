"""The capture's op tables: what each torch name is, and what it computes.

The lowest wing of the capture. It knows torch's names, never a tracked tensor:
:mod:`.translations` turns init calls into fills, :mod:`.pointwise` and
:mod:`.composites` turn elementwise and composite ops into program steps,
:mod:`.tables` says which route each name takes, and :mod:`.torchvalues` computes
the values of temporaries torch's own kernels would give. Imports nothing of the
other wings.
"""

from .composites import (
    MOVES,
    dropout_drops,
    foreach_parts,
    python_numbers,
    resizes_to_itself,
    same_device,
    split_device,
)
from .pointwise import POINTWISE, cast, cast_dtype, inplace_name, no_formula, step_of
from .tables import CONCATS, COPIES, FACTORIES, RANDOM_SOURCES, SCALES, Route, is_inplace, route_of
from .torchvalues import eager_values
from .translations import (
    INIT_CODES,
    INIT_FUNCTIONS,
    INIT_TRANSLATIONS,
    METHOD_TRANSLATIONS,
    Translation,
    bind,
    build,
    scalar,
)

__all__ = [
    "CONCATS",
    "COPIES",
    "FACTORIES",
    "INIT_CODES",
    "INIT_FUNCTIONS",
    "INIT_TRANSLATIONS",
    "METHOD_TRANSLATIONS",
    "MOVES",
    "POINTWISE",
    "RANDOM_SOURCES",
    "SCALES",
    "Route",
    "Translation",
    "bind",
    "build",
    "cast",
    "cast_dtype",
    "dropout_drops",
    "eager_values",
    "foreach_parts",
    "inplace_name",
    "is_inplace",
    "no_formula",
    "python_numbers",
    "resizes_to_itself",
    "route_of",
    "same_device",
    "scalar",
    "split_device",
    "step_of",
]
