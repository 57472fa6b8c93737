"""``torch.nn.init`` functions entered directly during a capture (capture/session/initcalls.py):
the module attributes that hold torch's own functions hold the capture's entry for the
span of a capture, which records a call on a parameter's stand-in as the call's first
tensor operation would. Everything else reaches torch's function: the records are the
same either way, and what a library, another thread or another mode does is theirs."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

import shardinit
from shardinit._integration.capture.ops.translations import INIT_FUNCTIONS

PUBLIC = {name: func for name, func in INIT_FUNCTIONS.items() if not name.startswith("_")}
#: (function name, arguments after the tensor) for a 2-D parameter, every public kind.
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("normal_", (0.1, 0.02), {}),
    ("normal_", (), {"std": 0.5, "generator": None}),
    ("uniform_", (-0.3,), {"b": 0.3}),
    ("trunc_normal_", (), {"std": 0.02, "a": -0.04, "b": 0.04}),
    ("constant_", (0.25,), {}),
    ("zeros_", (), {}),
    ("ones_", (), {}),
    ("eye_", (), {}),
    ("xavier_uniform_", (), {"gain": 2.0}),
    ("xavier_normal_", (), {}),
    ("kaiming_uniform_", (), {"a": 5**0.5}),
    ("kaiming_normal_", (0.0, "fan_out", "relu"), {}),
    ("orthogonal_", (), {"gain": 0.5}),
]


def _meta_linear() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(6, 5)


def _records(call: Callable[[torch.Tensor], object]) -> list[tuple[object, ...]]:
    lin = _meta_linear()
    captured = shardinit.capture_init(lin, lambda: call(lin.weight))
    return [(op.region, op.action, op.op) for op in captured["weight"].ops]


def test_every_public_function_is_entered_during_a_capture_and_put_back_after() -> None:
    seen: dict[str, bool] = {}
    lin = _meta_linear()

    def init_fn() -> None:
        for name, original in PUBLIC.items():
            seen[name] = getattr(nn.init, name) is not original
        nn.init.zeros_(lin.weight)

    shardinit.capture_init(lin, init_fn)
    assert seen == dict.fromkeys(PUBLIC, True)
    assert all(getattr(nn.init, name) is func for name, func in PUBLIC.items())
    # Put back after an error of init code too.
    with pytest.raises(RuntimeError, match="boom"):
        shardinit.capture_init(lin, lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert all(getattr(nn.init, name) is func for name, func in PUBLIC.items())


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_the_entry_records_what_torchs_own_function_records(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Through the module attribute (the entry) and through torch's function itself (an
    alias bound at import: recognised by its code at its first operation): the same
    records, and the values of eager torch's distribution (checked elsewhere)."""
    original = PUBLIC[name]
    entered = _records(lambda w: getattr(nn.init, name)(w, *args, **kwargs))
    aliased = _records(lambda w: original(w, *args, **kwargs))
    assert entered == aliased
    assert entered and entered[0][2].startswith(f"torch.nn.init.{name}(")


@pytest.mark.parametrize(
    "bad",
    [
        lambda w: nn.init.normal_(w, 0.0, 1.0, None, 5),
        lambda w: nn.init.zeros_(w, value=1.0),
        lambda w: nn.init.uniform_(w, c=1.0),
    ],
    ids=["too_many", "unknown_keyword", "unknown_keyword_with_defaults"],
)
def test_arguments_that_do_not_bind_get_torchs_own_error(
    bad: Callable[[torch.Tensor], object],
) -> None:
    with pytest.raises(TypeError) as eager:
        bad(nn.Linear(6, 5).weight)
    lin = _meta_linear()
    with pytest.raises(TypeError) as captured:
        shardinit.capture_init(lin, lambda: bad(lin.weight))
    assert str(captured.value) == str(eager.value)


def test_a_librarys_wrapper_at_the_attribute_runs_and_is_left_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    original = nn.init.normal_

    def guarded(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append("guarded")
        return original(tensor, *args, **kwargs)

    monkeypatch.setattr(nn.init, "normal_", guarded)
    records = _records(lambda w: nn.init.normal_(w, std=0.02))
    assert calls == ["guarded"]
    assert nn.init.normal_ is guarded
    assert records == _records(lambda w: original(w, std=0.02))


def test_init_codes_own_patch_of_an_attribute_stands_after_the_capture() -> None:
    lin = _meta_linear()

    def patched(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return PUBLIC["zeros_"](tensor)

    def init_fn() -> None:
        nn.init.ones_ = patched  # type: ignore[assignment]
        nn.init.ones_(lin.weight)

    try:
        captured = shardinit.capture_init(lin, init_fn)
        assert nn.init.ones_ is patched
        assert captured["weight"].ops[0].op == "torch.nn.init.zeros_()"
    finally:
        nn.init.ones_ = PUBLIC["ones_"]  # type: ignore[assignment]


def test_another_thread_gets_torchs_function_on_its_own_tensors() -> None:
    lin = _meta_linear()
    real = torch.zeros(4, 4)
    done: list[BaseException | None] = []

    def other() -> None:
        try:
            nn.init.ones_(real)
            done.append(None)
        except BaseException as error:
            done.append(error)

    def init_fn() -> None:
        worker = threading.Thread(target=other)
        worker.start()
        worker.join(60)
        nn.init.zeros_(lin.weight)

    captured = shardinit.capture_init(lin, init_fn)
    assert done == [None]
    assert torch.equal(real, torch.ones(4, 4))
    assert [op.op for op in captured["weight"].ops] == ["torch.nn.init.zeros_()"]


def test_a_mode_of_init_codes_own_above_the_capture_sees_the_call() -> None:
    seen: list[str] = []

    class Watching(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(getattr(func, "__name__", "?"))
            return func(*args, **(kwargs or {}))

    def call(weight: torch.Tensor) -> None:
        with Watching():
            nn.init.normal_(weight, std=0.02)

    records = _records(call)
    assert "normal_" in seen
    assert records == _records(lambda w: PUBLIC["normal_"](w, std=0.02))


@pytest.mark.parametrize("through", ["attribute", "alias"])
def test_with_torch_functions_disabled_the_call_is_torchs_as_without_the_entry(
    through: str,
) -> None:
    """No mode sees a call under ``DisableTorchFunction``: the entry steps aside, and the
    capture's backstop refuses the write torch's own body makes, as for an alias."""

    def call(weight: torch.Tensor) -> None:
        with torch._C.DisableTorchFunction():
            if through == "attribute":
                nn.init.zeros_(weight)
            else:
                PUBLIC["zeros_"](weight)

    with pytest.raises(shardinit.UnsupportedInitOpError, match="parameter 'weight'"):
        _records(call)


def test_actions_of_equal_numbers_are_shared_but_minus_zero_is_not_zero() -> None:
    """An action of Python numbers is built once per kind and numbers (a float by its
    bits): ``constant_(w, -0.0)`` after ``constant_(v, 0.0)`` stays negative zero, as
    eager torch writes it."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(3, 2), nn.Linear(3, 2), nn.Linear(3, 2))

    def init_fn() -> None:
        nn.init.constant_(model[0].weight, 0.0)
        nn.init.constant_(model[1].weight, -0.0)
        model[2].weight.data.fill_(-0.0)

    captured = shardinit.capture_init(model, init_fn)
    actions = [captured[f"{i}.weight"].ops[0].action for i in range(3)]
    assert actions[1] is actions[2] and actions[0] is not actions[1]
    shardinit.materialize(model, seed=0, init_fn=init_fn)
    assert not torch.signbit(model[0].weight).any()
    assert torch.signbit(model[1].weight).all() and torch.signbit(model[2].weight).all()


def test_a_probe_is_run_once_per_function_arguments_shape_and_dtype() -> None:
    """``kaiming_uniform_`` runs torch's own function on a meta tensor to learn its bound:
    once per function, arguments, shape and dtype; each shape gets its own bound."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(6, 5), nn.Linear(6, 5), nn.Linear(7, 5))

    def init_fn() -> None:
        for layer in model:
            nn.init.kaiming_uniform_(layer.weight, a=5**0.5)

    captured = shardinit.capture_init(model, init_fn)
    actions = [captured[f"{i}.weight"].ops[0].action for i in range(3)]
    assert actions[0] is actions[1] and actions[2] is not actions[0]
    for action, fan_in in zip(actions, (6, 6, 7), strict=True):
        # torch's own arithmetic for kaiming_uniform_(a=sqrt(5)), to the bit.
        gain = math.sqrt(2.0 / (1 + (5**0.5) ** 2))
        bound = math.sqrt(3.0) * (gain / math.sqrt(fan_in))
        assert action.init == shardinit.init.Uniform(-bound, bound)
