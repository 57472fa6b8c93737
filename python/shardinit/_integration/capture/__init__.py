"""Capture a model's own init code on stand-ins and replay it shard-locally.

:func:`capture_init` runs ``init_fn()`` once while every parameter is a plain meta
tensor of its GLOBAL shape and every meta buffer a real CPU tensor, and records, per
parameter, the ordered operations the code applies to it, each with the region (a box
of the global tensor) it covers, and the buffer values it computes. Nothing of a
parameter is allocated and no parameter value is computed: replaying the record
shard-locally from stream v1 is :mod:`.replay`'s job.

The modules, bottom up:

* :mod:`.regions`: boxes, the box a view covers, flat runs through copies;
* :mod:`.records`: what is recorded (fills, scales, eye/dirac patterns);
* :mod:`.translations`: the tables that turn torch calls into records;
* :mod:`.tracks` / :mod:`.recorder`: the followed tensors and the ``TorchFunctionMode``;
* :mod:`.standins`: stand-ins for parameters (the tie rule) and buffers;
* :mod:`.api`: :func:`capture_init`; :mod:`.replay`: replaying records.
"""

from .api import capture_init
from .records import (
    Action,
    CapturedInit,
    CapturedOp,
    Dirac,
    Eye,
    Fill,
    Opaque,
    ParamRecord,
    Scale,
    UnsupportedInitOpError,
)
from .regions import Box, box_union_covers, flat_range_boxes, view_region
from .replay import base_ops, replay_box, replay_flat, replay_full, replay_runs, write_buffers

__all__ = [
    "Action",
    "Box",
    "CapturedInit",
    "CapturedOp",
    "Dirac",
    "Eye",
    "Fill",
    "Opaque",
    "ParamRecord",
    "Scale",
    "UnsupportedInitOpError",
    "base_ops",
    "box_union_covers",
    "capture_init",
    "flat_range_boxes",
    "replay_box",
    "replay_flat",
    "replay_full",
    "replay_runs",
    "view_region",
    "write_buffers",
]
