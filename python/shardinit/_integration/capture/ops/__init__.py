"""The capture's op tables: what each torch name is, and what it computes.

The lowest wing of the capture. It knows torch's names, never a tracked tensor:
:mod:`.translations` turns init calls into fills, :mod:`.pointwise` and
:mod:`.composites` turn elementwise and composite ops into program steps,
:mod:`.tables` says what factories, sources and casts make, and :mod:`.torchvalues`
computes the values of temporaries torch's own kernels would give. Which route a name
takes, and what handles it, is registered once per op family in
:mod:`..dispatch.families`. Imports nothing of the other wings.
"""

from .composites import (
    DROPOUTS,
    MOVES,
    RESIZES,
    dropout_drops,
    foreach_parts,
    normal_parts,
    python_numbers,
    resizes_to_itself,
    same_device,
    split_device,
)
from .pointwise import (
    CAST_DTYPES,
    POINTWISE,
    RESULT_DTYPE,
    cast,
    cast_dtype,
    inplace_name,
    is_inplace,
    no_formula,
    step_of,
)
from .tables import CASTS, FACTORIES, RANDOM_SOURCES, SCALES, SOURCES, metadata_operands
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
    shown,
    shown_call,
)

__all__ = [
    "CASTS",
    "CAST_DTYPES",
    "DROPOUTS",
    "FACTORIES",
    "INIT_CODES",
    "INIT_FUNCTIONS",
    "INIT_TRANSLATIONS",
    "METHOD_TRANSLATIONS",
    "MOVES",
    "POINTWISE",
    "RANDOM_SOURCES",
    "RESIZES",
    "RESULT_DTYPE",
    "SCALES",
    "SOURCES",
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
    "metadata_operands",
    "no_formula",
    "normal_parts",
    "python_numbers",
    "resizes_to_itself",
    "same_device",
    "scalar",
    "shown",
    "shown_call",
    "split_device",
    "step_of",
]
