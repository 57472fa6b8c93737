"""The two spellings of the same init code cost the same per parameter (issue 51):
``nn.init.normal_(w, std=...); nn.init.zeros_(b)`` and, under ``no_grad``,
``w.normal_(0.0, std); b.zero_()``. Both record the same shared actions, and each
extra ``Linear`` costs the two spellings the same Python calls (within 5%), in the
capture and in the materialize of the captured init. Counted with ``sys.setprofile``
(deterministic), not timed."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType

import torch
from torch import nn

import shardinit

Code = Callable[[nn.Module], None]


def _nn_init(model: nn.Module) -> None:
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            nn.init.normal_(layer.weight, std=0.02)
            nn.init.zeros_(layer.bias)


def _methods(model: nn.Module) -> None:
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.normal_(0.0, 0.02)
                layer.bias.zero_()


def _model(layers: int) -> nn.Module:
    with torch.device("meta"):
        return nn.Sequential(*[nn.Linear(8, 8) for _ in range(layers)])


def _calls(run: Callable[[], object]) -> int:
    """Python and C function calls made by ``run``."""
    count = 0

    def profile(_frame: FrameType, event: str, _arg: object) -> None:
        nonlocal count
        count += event in ("call", "c_call")

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


def _capture(code: Code, layers: int) -> shardinit.CapturedInit:
    model = _model(layers)
    return shardinit.capture_init(model, lambda: code(model))


def _counted(code: Code, layers: int) -> tuple[int, int]:
    """Calls made by the capture of ``code`` over ``layers`` Linears, and by the
    materialize of what it captured."""
    model, target = _model(layers), _model(layers)
    captured: list[shardinit.CapturedInit] = []
    capture = _calls(lambda: captured.append(shardinit.capture_init(model, lambda: code(model))))
    fill = _calls(lambda: shardinit.materialize(target, seed=0, init_fn=captured[0]))
    return capture, fill


def _calls_per_layer(code: Code) -> tuple[int, int]:
    """Extra calls per ``Linear`` in the capture and in the materialize, from 8 to 16."""
    _counted(code, 2)  # first-call caches and imports
    (capture_8, fill_8), (capture_16, fill_16) = _counted(code, 8), _counted(code, 16)
    return (capture_16 - capture_8) // 8, (fill_16 - fill_8) // 8


def test_both_spellings_record_the_same_shared_fills() -> None:
    records = [_capture(code, 3).params for code in (_nn_init, _methods)]
    for params in records:
        actions = [
            params[f"{i}.{kind}"].ops[0].action for i in range(3) for kind in ("weight", "bias")
        ]
        # One action object per distinct fill, shared by every parameter it fills.
        assert actions[0] is actions[2] is actions[4]
        assert actions[1] is actions[3] is actions[5]
    nn_init, methods = records
    assert [(p.shape, [(o.region, o.action) for o in p.ops]) for p in nn_init.values()] == [
        (p.shape, [(o.region, o.action) for o in p.ops]) for p in methods.values()
    ]


def test_both_spellings_cost_the_same_calls_per_parameter() -> None:
    nn_capture, nn_fill = _calls_per_layer(_nn_init)
    method_capture, method_fill = _calls_per_layer(_methods)
    # About 480 calls per Linear either way today; the routes differ by a handful of
    # calls (and abc's first-use caches move a count by one or two), while an unshared
    # action, a step or a program path instead of the fill would cost dozens.
    assert abs(method_capture - nn_capture) <= nn_capture // 20, (method_capture, nn_capture)
    assert abs(method_fill - nn_fill) <= nn_fill // 20, (method_fill, nn_fill)


def test_materialized_values_are_the_same_for_both_spellings() -> None:
    values = []
    for code in (_nn_init, _methods):
        model = _model(3)
        shardinit.materialize(model, seed=0, init_fn=_capture(code, 3))
        values.append({n: p.detach().clone() for n, p in model.named_parameters()})
    assert values[0].keys() == values[1].keys()
    for name, value in values[0].items():
        assert torch.equal(value, values[1][name]), name
    assert all(torch.equal(v, torch.zeros(8)) for n, v in values[1].items() if n.endswith("bias"))
    assert values[1]["0.weight"].std().item() > 0
