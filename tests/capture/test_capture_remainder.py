"""Float ``%`` (``remainder``) and ``//`` (``floor_divide``) in init code (issue 37, item
11): both jump by a whole divisor or unit where an operand moves by one ulp, so binary64
steps that agree with torch "up to the last bits" were up to a whole unit off. On values
known at capture they are torch's own CPU result (eager's bit for bit); ``%`` of the
stream's random values is torch's value (its number operand rounded to the dtype, as
torch's kernel takes it); ``//`` of random float32 values is refused, naming the
parameter, the operation and the line."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

Values = Callable[[torch.Tensor], torch.Tensor]


def _materialized(
    init: Callable[[nn.Linear], object], dtype: torch.dtype = torch.float32
) -> nn.Linear:
    with torch.device("meta"):
        model = nn.Linear(16, 32, dtype=dtype)
    shardinit.materialize(model, seed=0, init_fn=lambda: init(model))
    return model


def _copy_init(values: Values) -> Callable[[nn.Linear], None]:
    def init(m: nn.Linear) -> None:
        with torch.no_grad():
            m.weight.copy_(values(m.weight).reshape(32, 16))

    return init


def _ramp(w: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.arange(512, device=w.device, dtype=dtype) * 0.37 - 60.0


KNOWN: dict[str, Values] = {
    "ramp_mod_0_3": lambda w: _ramp(w) % 0.3,
    "ramp_mod_minus_0_3": lambda w: _ramp(w) % -0.3,
    "ramp_floordiv_0_3": lambda w: _ramp(w) // 0.3,
    "ramp_floordiv_minus_0_1": lambda w: torch.floor_divide(_ramp(w), -0.1),
    "remainder_by_tensor": lambda w: torch.remainder(_ramp(w), torch.full((512,), 0.3)),
    "linspace_floordiv": lambda w: torch.linspace(-10, 10, 512) // 0.1,
    "bfloat16_mod": lambda w: (_ramp(w, torch.bfloat16) % 0.3).float(),
    "float64_floordiv": lambda w: (_ramp(w, torch.float64) // 0.3).float(),
    "number_mod_ramp": lambda w: 7.0 % (_ramp(w) + 60.5),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_known_remainder_and_floor_divide_are_eagers(name: str) -> None:
    init = _copy_init(KNOWN[name])
    model = _materialized(init)
    eager = nn.Linear(16, 32)
    init(eager)
    assert torch.equal(model.weight, eager.weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("divisor", [0.3, -0.3, 7.0, 1e-3])
def test_remainder_of_random_values_is_torchs_on_the_stream(
    divisor: float, dtype: torch.dtype
) -> None:
    model = _materialized(
        lambda m: m.weight.data.copy_(nn.init.normal_(m.weight) * 10 % divisor), dtype
    )
    plain = _materialized(lambda m: nn.init.normal_(m.weight), dtype)
    with torch.no_grad():
        want = torch.remainder(plain.weight * 10, divisor)
    assert torch.equal(model.weight, want)
    assert model.weight.abs().max() <= abs(divisor)  # torch rounds `mod + b` to b at times


def test_floor_divide_of_random_float32_values_is_refused() -> None:
    with pytest.raises(shardinit.UnsupportedInitOpError) as raised:
        _materialized(lambda m: m.weight.data.copy_(nn.init.normal_(m.weight) * 10 // 0.3))
    message = str(raised.value)
    assert "'weight'" in message and "floor_divide" in message
    assert "test_capture_remainder.py" in message
