"""The capture's session: one capture of a model's init code, from start to result.

The top wing. :mod:`.api` (:func:`capture_init`), :mod:`.standins` and
:mod:`.threads` (the stand-ins and the threads that touch them), :mod:`.created`
(tensors init code creates, replaces or removes), :mod:`.modulecalls` and
:mod:`.initcalls` (calls on the model), :mod:`.constructors` (constructor values) and
:mod:`.records` (what a capture returns).
"""

from .api import capture_init, capture_walked
from .constructors import (
    ConstructorValue,
    buffer_tensor,
    constructor_buffer,
    constructor_record,
    copied_any,
    copy_source,
    record_constructors,
)
from .records import CapturedInit, write_buffers

__all__ = [
    "CapturedInit",
    "ConstructorValue",
    "buffer_tensor",
    "capture_init",
    "capture_walked",
    "constructor_buffer",
    "constructor_record",
    "copied_any",
    "copy_source",
    "record_constructors",
    "write_buffers",
]
