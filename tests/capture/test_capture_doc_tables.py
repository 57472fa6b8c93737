"""Every code line of docs/capturing-init.md's tables runs as init code against eager
torch (issue 52), read from the doc itself, so the doc cannot drift from what the
capture does.

A code line is a backticked snippet in a table row that parses as Python and names only
the tensors of the doc's examples (``p``, ``w``, ``t``: a (32, 16) weight; ``m``: its
module, with ``m.other``, buffers ``m.buf`` and ``m.jitter``) and ``torch``, ``nn``,
``np``; the others are fragments (``fill_(v)``, ``uniform_(a, b)``: placeholders). Each
code line runs as ``init_fn``; every parameter and buffer then equals eager torch's
(deterministic values bit for bit, or within float32's last bits where torch's
exp, log, ... are not correctly rounded; random ones in shape, dtype and strides), or
materialize refuses it with shardinit's error (or raises where eager raises)."""

from __future__ import annotations

import ast
import pathlib
import re
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import shardinit

SEED = 52
DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "capturing-init.md"
#: The names a code line may use: the doc's example tensors and modules.
NAMES = frozenset({"p", "w", "t", "m", "torch", "nn", "np"})


def _snippets() -> list[str]:
    """The backticked snippets of the doc's table rows, each once, in order."""
    found: dict[str, None] = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            found.update(dict.fromkeys(re.findall(r"`([^`]+)`", line)))
    return list(found)


def _code_line(snippet: str) -> bool:
    """Whether ``snippet`` is a code line (module docstring)."""
    try:
        tree = ast.parse(snippet)
    except SyntaxError:
        return False
    if "..." in snippet or any(
        isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        for node in ast.walk(tree)
    ):
        return False  # a placeholder, or a keyword argument (p=0)
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    calls = any(isinstance(node, (ast.Call, ast.Assign, ast.AugAssign, ast.Subscript,
                                  ast.BinOp)) for node in ast.walk(tree))  # fmt: skip
    return bool(names) and names <= NAMES and calls


CODE_LINES = [s for s in _snippets() if _code_line(s)]
#: What each code line gave (for a reader running with ``-s``).
OUTCOMES: dict[str, str] = {}


class _DocModel(nn.Module):
    """The doc's examples: ``m.weight`` (32, 16), ``m.bias``, ``m.other``, buffers."""

    def __init__(self) -> None:
        super().__init__()
        # Defaults known at capture (a program of the constructor), so that code reading
        # them is compared value for value.
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, 512).view(32, 16))
        self.bias = nn.Parameter(torch.arange(32.0) * 0.1)
        self.other = nn.Linear(16, 32)
        self.register_buffer("buf", torch.zeros(6))
        self.register_buffer("jitter", torch.zeros(6))


def _run(snippet: str, model: nn.Module) -> None:
    scope: dict[str, Any] = {"torch": torch, "nn": nn, "np": np, "m": model}
    scope.update(p=model.weight, w=model.weight, t=model.weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(snippet, "<docs/capturing-init.md>", "exec"), scope)


def _eager(snippet: str, seed: int) -> nn.Module | Exception:
    torch.manual_seed(seed)
    model = _DocModel()
    try:
        with torch.no_grad():
            _run(snippet, model)
    except Exception as error:  # eager's refusal: shardinit must not give values then
        return error
    return model


def _tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    named = dict(model.named_parameters())
    named.update(model.named_buffers())
    return {name: tensor.detach() for name, tensor in named.items()}


def test_the_doc_has_code_lines_in_its_tables() -> None:
    # The parse finds them (a doc reshaped so that none is found would test nothing).
    assert len(CODE_LINES) >= 20, CODE_LINES
    assert "p.data = (p.double() * 2).float()" in CODE_LINES


@pytest.mark.parametrize("snippet", CODE_LINES)
def test_a_doc_code_line_gives_eagers_values_or_a_refusal(snippet: str) -> None:
    eager, again = _eager(snippet, 0), _eager(snippet, 1)
    with torch.device("meta"), shardinit.record_constructors():
        model = _DocModel()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shardinit.materialize(model, seed=SEED, init_fn=lambda: _run(snippet, model))
    except shardinit.ShardInitError as refusal:
        OUTCOMES[snippet] = f"refused: {refusal}"[:200]
        return  # refused: shardinit's error, naming what
    except Exception as error:
        assert isinstance(eager, Exception), f"raised {error!r} where eager gives values"
        return
    assert not isinstance(eager, Exception), f"values where eager raises {eager!r}"
    assert not isinstance(again, Exception)
    ours, theirs, other = _tensors(model), _tensors(eager), _tensors(again)
    assert ours.keys() == theirs.keys()
    for name, want in theirs.items():
        got = ours[name]
        assert (got.shape, got.dtype, got.stride()) == (want.shape, want.dtype, want.stride())
        if torch.equal(want.nan_to_num(), other[name].nan_to_num()):  # not random
            # bit for bit, or within float32's last bits where torch's own exp, log,
            # ... are not rounded correctly (docs/capturing-init.md, programs)
            assert torch.allclose(got, want, rtol=2e-6, atol=0.0, equal_nan=True), name
    OUTCOMES[snippet] = "eager's values"


def test_the_docs_own_example_keeps_the_default() -> None:
    # docs/capturing-init.md's casts row: the default, doubled and cast back, is itself.
    snippet = "p.data = (p.double() * 2).float()"
    test_a_doc_code_line_gives_eagers_values_or_a_refusal(snippet)
    assert OUTCOMES[snippet] == "eager's values", OUTCOMES[snippet]
