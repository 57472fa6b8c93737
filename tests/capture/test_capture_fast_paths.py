"""The dispatch's short routes (issue 51: a recorded build at the pace of a meta build):
calls that run as they are before the init frame is looked for, and the facts they
rest on. Each route gives the records and values the long route gives."""

from __future__ import annotations

import dis
import math
from types import CodeType

import torch
from torch import nn

import shardinit
from shardinit._integration.capture.ops import INIT_CODES


def _rebound_arguments(code: CodeType) -> set[str]:
    """The arguments a function's code assigns (or deletes) after it is called."""
    arguments = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount])
    writes = ("STORE_FAST", "DELETE_FAST")
    return {i.argval for i in dis.get_instructions(code) if i.opname in writes} & arguments


def test_the_rebinding_check_sees_a_function_that_rebinds_an_argument() -> None:
    def rebinds(tensor: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
        gain = gain * 2
        return tensor.mul_(gain)

    assert _rebound_arguments(rebinds.__code__) == {"gain"}


def test_no_torch_nn_init_function_rebinds_its_arguments() -> None:
    """A question of layout or ``no_grad``'s switch runs as it is inside an init
    function too (dispatch/mode.py, ``_as_is``): the call is recorded at its first
    other operation, reading the arguments from its frame then. They are the ones it
    was called with only while no init function assigns its own arguments."""
    assert INIT_CODES
    assert {INIT_CODES[code]: _rebound_arguments(code) for code in INIT_CODES} == {
        name: set() for name in INIT_CODES.values()
    }


class _Block(nn.Module):
    """Init functions whose first operations are questions of layout (xavier's and
    kaiming's fans) or ``no_grad``'s switch (``zeros_``, ``ones_``), on temporaries."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.empty(6, 4))
        self.b = nn.Parameter(torch.empty(6))
        self.c = nn.Parameter(torch.empty(5, 3))
        self.d = nn.Parameter(torch.empty(3, 2))
        self.e = nn.Parameter(torch.empty(4, 4))
        nn.init.xavier_uniform_(self.a, gain=2.0)
        nn.init.zeros_(self.b)
        nn.init.ones_(self.c)
        with torch.no_grad():
            self.c.mul_(self.c.dim() * 0.5)  # a question before a step
        nn.init.constant_(self.d, 0.25)
        nn.init.eye_(self.e)


def test_init_functions_after_questions_and_switches_give_the_records_of_their_arguments() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = _Block()
    shardinit.materialize(model, seed=0)
    eager = _Block()
    for name in ("b", "c", "d", "e"):
        assert torch.equal(getattr(model, name), getattr(eager, name)), name
    bound = math.sqrt(6.0 / (4 + 6)) * 2.0  # xavier_uniform_'s bound with gain=2.0
    assert 0 < model.a.abs().max().item() <= bound
    assert model.a.std().item() > bound / 4
