"""Integer arithmetic in init programs (issue 37, items 8 and 10): a step whose result is
an integer tensor wraps into its dtype as torch's two's complement does (``bool -> uint8``
minus 1 is 255; int8, uint8, int16 and int32 overflow wrap), and integers that may pass
2**53, where the program engine's binary64 would round them, are refused, naming the
buffer and the line. Each value is compared with the same code run eagerly on the CPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from capture_models import linear_pair
from torch import nn

import shardinit

Values = Callable[[torch.device], torch.Tensor]

INIT_FN_CASES: dict[str, Values] = {
    "bool_to_uint8_minus_1": lambda d: (torch.arange(512, device=d) % 3 == 0).to(torch.uint8) - 1,
    "int8_times_100": lambda d: torch.arange(512, device=d).to(torch.int8) * 100,
    "uint8_plus_200": lambda d: torch.arange(512, device=d).to(torch.uint8) + 200,
    "int16_times_1000": lambda d: torch.arange(512, device=d).to(torch.int16) * 1000,
    "int32_times_1e7": lambda d: torch.arange(512, device=d).to(torch.int32) * 10_000_000,
    "int32_sub_wraps": lambda d: torch.arange(512, device=d, dtype=torch.int32) - 2**31 + 7,
    "int64_affine": lambda d: torch.arange(512, device=d) * 3 - 7,
    "float_to_int8": lambda d: torch.linspace(-100, 100, 512, device=d).to(torch.int8) * 3,
    "int8_mul_in_place": lambda d: torch.arange(512, device=d).to(torch.int8).mul_(100),
    "uint8_sub_in_place": lambda d: torch.arange(512, device=d, dtype=torch.uint8).sub_(3),
    "int32_mul_in_place_twice": lambda d: (
        torch.arange(512, device=d, dtype=torch.int32).mul_(10_000_000).mul_(10_000_000)
    ),
    "int32_times_3_in_place": lambda d: (
        torch.arange(512, device=d, dtype=torch.int32).add_(2**26).mul_(3)
    ),
}


@pytest.mark.parametrize("name", sorted(INIT_FN_CASES))
def test_integer_steps_in_init_fn_wrap_as_eager(name: str) -> None:
    values = INIT_FN_CASES[name]

    def init(m: nn.Linear) -> None:
        with torch.no_grad():
            m.weight.copy_(values(m.weight.device).reshape(32, 16).float())

    model, eager = linear_pair(init)
    assert torch.equal(model.weight, eager.weight)
    if name == "bool_to_uint8_minus_1":
        assert sorted(set(model.weight.flatten().tolist())) == [0.0, 255.0]


class Buffered(nn.Module):
    def __init__(self, values: Callable[[], torch.Tensor]) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("table", values())


BUFFER_CASES: dict[str, Callable[[], torch.Tensor]] = {
    "uint8": lambda: (torch.arange(8) % 3 == 0).to(torch.uint8) - 1,
    "int8": lambda: torch.arange(8).to(torch.int8) * 100,
    "int32": lambda: torch.arange(8, dtype=torch.int32) * 1_000_000_000,
    "int64_near_2_53": lambda: torch.arange(8) + (2**53 - 8),
}


@pytest.mark.parametrize("name", sorted(BUFFER_CASES))
def test_integer_constructor_buffers_are_eagers(name: str) -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = Buffered(BUFFER_CASES[name])
    shardinit.materialize(model, seed=0)
    eager = Buffered(BUFFER_CASES[name])
    assert model.table.dtype == eager.table.dtype
    assert torch.equal(model.table, eager.table)


@pytest.mark.parametrize(
    "values",
    [
        lambda: torch.arange(2**53, 2**53 + 8),
        lambda: torch.arange(1, 9).cumsum(0) * (2**50 + 1),
    ],
    ids=["arange_past_2_53", "cumsum_times_2_50"],
)
def test_integers_past_2_53_are_refused_naming_the_buffer(
    values: Callable[[], torch.Tensor],
) -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = Buffered(values)
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.materialize(model, seed=0)
    message = str(raised.value)
    assert "buffer table" in message and "2**53" in message
    assert "test_capture_integers.py" in message  # the line that registered it


def test_int32_product_past_2_53_in_a_program_is_refused_or_eagers() -> None:
    """int32 * int32 reaches 2**62: binary64 would round it before the wrap. Either the
    value is eager's (computed at capture by torch) or it is refused."""

    def init(m: nn.Linear) -> None:
        with torch.no_grad():
            big = torch.arange(512, device=m.weight.device, dtype=torch.int32) * 10_000_000
            m.weight.copy_((big * 10_000_000).reshape(32, 16).float())

    with torch.device("meta"):
        model = nn.Linear(16, 32)
    eager = nn.Linear(16, 32)
    init(eager)
    try:
        shardinit.materialize(model, seed=0, init_fn=lambda: init(model))
    except shardinit.ShardInitError as refused:
        assert "2**53" in str(refused)
        return
    assert torch.equal(model.weight, eager.weight)
