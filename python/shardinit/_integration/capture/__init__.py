"""Capture a model's own init code on stand-ins and replay it shard-locally.

:func:`capture_init` runs ``init_fn()`` once while every parameter is a plain meta
tensor of its GLOBAL shape and every meta buffer a real CPU tensor, and records, per
parameter, the ordered operations the code applies to it, each with the region (a box
of the global tensor) it covers, and the buffer values it computes. Nothing of a
parameter is allocated and no parameter value is computed: replaying the record
shard-locally from stream v1 is :mod:`.replay`'s job.

The modules, bottom up:

* :mod:`.regions`: boxes, the box a view covers, flat runs through copies;
* :mod:`.program`: init programs, expressions of an element's coordinates;
* :mod:`.records`: what is recorded (fills, scales, eye/dirac patterns, programs);
* :mod:`.translations` / :mod:`.pointwise`: the tables that turn torch calls into
  records (fills) and program steps (elementwise operations);
* :mod:`.tables`: the dispatch's one table (which route each torch name takes);
* :mod:`.tracks` / :mod:`.store` / :mod:`.engine` / :mod:`.claims` / :mod:`.structured`:
  the followed tensors, the record store, the expression engine (values, sources, steps,
  writes, copies), where random values land, and fills' actions;
* :mod:`.mode` / :mod:`.backstop` / :mod:`.frames`: the ``TorchFunctionMode`` that
  routes each call (holding a store and an engine), the ``TorchDispatchMode`` below it
  that refuses every write to a parameter it did not route, and the call sites;
* :mod:`.coordinates`: writes at positions computed from coordinates (``triu_``,
  ``fill_diagonal_``, ``masked_fill_``, ...), a component the mode calls;
* :mod:`.concrete` / :mod:`.torchvalues`: operations no route follows, on meta
  temporaries of known values, run on the CPU as eager torch runs them (operands
  evaluated by torch's own kernels), their results tables; a component the mode calls;
* :mod:`.modulecalls`: ``to_empty`` / ``to`` / ``_apply`` on the model inside init code;
* :mod:`.standins`: stand-ins for parameters (the tie rule) and buffers;
* :mod:`.api`: :func:`capture_init`; :mod:`.constructors`: constructor values
  (parameters and meta buffers);
  :mod:`.replay` / :mod:`.evaluate`: replaying records (programs by the core).
"""

from .api import capture_init
from .constructors import (
    ConstructorValue,
    buffer_tensor,
    constructor_buffer,
    constructor_record,
    copied_any,
    copy_source,
    record_constructors,
)
from .records import (
    Action,
    CapturedInit,
    CapturedOp,
    Computed,
    Fill,
    Opaque,
    ParamRecord,
    Program,
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
    "Computed",
    "ConstructorValue",
    "Fill",
    "Opaque",
    "ParamRecord",
    "Program",
    "Scale",
    "UnsupportedInitOpError",
    "base_ops",
    "box_union_covers",
    "buffer_tensor",
    "capture_init",
    "constructor_buffer",
    "constructor_record",
    "copied_any",
    "copy_source",
    "flat_range_boxes",
    "record_constructors",
    "replay_box",
    "replay_flat",
    "replay_full",
    "replay_runs",
    "view_region",
    "write_buffers",
]
