"""Capture a model's own init code on stand-ins, as records of init programs.

:func:`capture_init` runs ``init_fn()`` once while every parameter is a plain meta
tensor of its GLOBAL shape and every meta buffer a real CPU tensor, and records, per
parameter, the ordered operations the code applies to it, each with the region (a box
of the global tensor) it covers, and the buffer values it computes. Nothing of a
parameter is allocated and no parameter value is computed: capture produces records
(:class:`shardinit._program.ParamRecord`), and writing them shard-locally from stream v1
is the one writer's job (:class:`shardinit._program.Writer`).

The modules, bottom up (over :mod:`shardinit._program`'s regions, expressions and
actions):

* :mod:`.records`: what a capture returns (:class:`CapturedInit`) and the writing of
  the buffer values it computed;
* :mod:`.translations` / :mod:`.pointwise`: the tables that turn torch calls into
  records (fills) and program steps (elementwise operations);
* :mod:`.tables`: the dispatch's one table (which route each torch name takes);
* :mod:`.tracks` / :mod:`.store` / :mod:`.engine` / :mod:`.claims` / :mod:`.structured`:
  the followed tensors, the record store (the one writer of records), the expression
  engine (reading values, writing records), where random values land, and fills'
  actions; :mod:`.steps` (sources and elementwise steps) and :mod:`.copies`, components
  the mode calls;
* :mod:`.mode` / :mod:`.backstop` / :mod:`.frames`: the ``TorchFunctionMode`` that
  routes each call through tables of handlers (holding a store, an engine and its
  components), the ``TorchDispatchMode`` below it
  that refuses every write to a parameter it did not route, and the call sites;
* :mod:`.coordinates`: writes at positions computed from coordinates (``triu_``,
  ``fill_diagonal_``, ``masked_fill_``, ...), a component the mode calls;
* :mod:`.concrete` / :mod:`.torchvalues`: operations no route follows, on meta
  temporaries of known values, run on the CPU as eager torch runs them (operands
  evaluated by torch's own kernels), their results tables; a component the mode calls;
* :mod:`.modulecalls`: ``to_empty`` / ``to`` / ``_apply`` on the model inside init code;
* :mod:`.standins`: stand-ins for parameters (the tie rule) and buffers;
* :mod:`.api`: :func:`capture_init`; :mod:`.constructors`: constructor values
  (parameters and meta buffers).
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
from .records import CapturedInit, write_buffers

__all__ = [
    "CapturedInit",
    "ConstructorValue",
    "buffer_tensor",
    "capture_init",
    "constructor_buffer",
    "constructor_record",
    "copied_any",
    "copy_source",
    "record_constructors",
    "write_buffers",
]
