"""Init programs and their one writer: the floor between the fill dispatch
(:mod:`shardinit._fill`) and the integrations (:mod:`shardinit._integration`).

A parameter's values are a record (:class:`ParamRecord`): the operations applied to it,
each a box of the GLOBAL tensor and an action (:mod:`.actions`) whose value is an init
program, an expression of the element's coordinates (:mod:`.nodes`). Rules, torch.nn
defaults and constructor values are records of fills (:func:`base_ops`); the capture of
init code (:mod:`shardinit._integration.capture`) produces records of any action. The
:class:`Writer` writes a record on the region a rank holds, compiling each program for
its region once (:mod:`.compile`) and handing it to :func:`shardinit._fill.fill`.

The modules, bottom up: :mod:`.regions` (boxes and flat runs); the expression IR by job,
:mod:`.nodes` (the nodes and their walks), :mod:`.index` (affine index arithmetic),
:mod:`.keys` (structure keys), :mod:`.tables` (tables gathered at capture),
:mod:`.rewrite` (steps folded, reindexing) and :mod:`.exact` (integer exactness);
:mod:`.actions` (actions and records), :mod:`.compile` (a program for the fill
dispatch), :mod:`.writer` (the writer, and :func:`.writer.evaluate_whole` for the values
the capture needs at once). Nothing here imports the integrations
(tests/packaging/test_layers.py holds the order).
"""

from .actions import (
    Action,
    CapturedOp,
    Computed,
    ComputedOnPrior,
    Fill,
    Masked,
    Opaque,
    ParamRecord,
    Scale,
    TrackAction,
    base_ops,
    program_of,
    sets_values,
)
from .regions import Box
from .writer import Piece, Writer, op_programs

__all__ = [
    "Action",
    "Box",
    "CapturedOp",
    "Computed",
    "ComputedOnPrior",
    "Fill",
    "Masked",
    "Opaque",
    "ParamRecord",
    "Piece",
    "Scale",
    "TrackAction",
    "Writer",
    "base_ops",
    "op_programs",
    "program_of",
    "sets_values",
]
