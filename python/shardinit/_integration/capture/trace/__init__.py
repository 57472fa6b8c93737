"""The capture's trace: the followed tensors and the records written for them.

Above :mod:`..ops`, below the dispatch. :mod:`.tracks` (followed tensors),
:mod:`.store` (the record store, the one writer of records), :mod:`.engine` (reading
values, writing records), :mod:`.claims` (where random values land),
:mod:`.structured` (fills' actions), :mod:`.steps`, :mod:`.copies`,
:mod:`.coordinates`, :mod:`.concrete`, :mod:`.before` and :mod:`.folds`: the
components the dispatch calls, and :mod:`.frames` (the user's line).
"""

from .claims import drawn
from .concrete import Concrete, Evaluated
from .coordinates import Coordinates
from .copies import Copies
from .engine import Engine, read_reason
from .frames import frame_arguments, func_name, init_frame, user_frame
from .refusals import AFTER_INIT_FN, HELP, refusal
from .steps import Steps
from .store import RecordStore
from .tracks import (
    EAGER_LAYOUT,
    Track,
    give_eager_layout,
    give_memory_format,
    memory_format_now,
    memory_format_of,
    run_op,
    same_view,
    storage_id,
)

__all__ = [
    "AFTER_INIT_FN",
    "EAGER_LAYOUT",
    "HELP",
    "Concrete",
    "Coordinates",
    "Copies",
    "Engine",
    "Evaluated",
    "RecordStore",
    "Steps",
    "Track",
    "drawn",
    "frame_arguments",
    "func_name",
    "give_eager_layout",
    "give_memory_format",
    "init_frame",
    "memory_format_now",
    "memory_format_of",
    "read_reason",
    "refusal",
    "run_op",
    "same_view",
    "storage_id",
    "user_frame",
]
