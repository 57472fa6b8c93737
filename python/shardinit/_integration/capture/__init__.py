"""Capture a model's own init code on stand-ins, as records of init programs.

:func:`capture_init` runs ``init_fn()`` once while every parameter is a plain meta
tensor of its GLOBAL shape and every meta buffer a real CPU tensor, and records, per
parameter, the ordered operations the code applies to it, each with the region (a box
of the global tensor) it covers, and the buffer values it computes. Nothing of a
parameter is allocated and no parameter value is computed: capture produces records
(:class:`shardinit._program.ParamRecord`), and writing them shard-locally from stream v1
is the one writer's job (:class:`shardinit._program.Writer`).

Four wings, each importing only the wings below it, through their faces (the names
each wing's ``__init__`` re-exports; ``tests/packaging/test_layers.py``):

* :mod:`.session`: one capture from start to result (the API, stand-ins, threads,
  created tensors, constructor values, the records returned); its face is the
  capture's;
* :mod:`.dispatch`: the modes every torch call meets, and the op families, each
  registered once with its names, route and handlers (:mod:`.dispatch.families`);
* :mod:`.trace`: the followed tensors, the record store (the only writer of records),
  the one shape of a refusal (:mod:`.trace.refusals`) and the components the handlers
  call;
* :mod:`.ops`: torch's names as data: fills, program steps, casts, factories.
"""

# The capture's face is its session's (:mod:`.session`), name for name.
from .session import *  # noqa: F403
from .session import __all__ as __all__
