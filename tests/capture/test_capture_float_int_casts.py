"""Float-to-integer casts (issue 52), against eager torch: where C++ defines the cast
(the value truncated toward zero lies in the integer's range; uint8 goes through int64,
as torch casts it), the capture gives eager's values; where a value may be NaN,
infinite, out of the range or past 2**63, eager's result is the platform's (x86 gives
the lowest integer, ARM saturates), and a program of such a cast is refused, naming the
cast. A float copied into an integer (or bool) tensor is converted as torch converts it
(it used to keep its fraction); values torch computed on the CPU are its own table."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

SEED = 52
#: The dtypes make test runs (the others under --runslow).
SAMPLE = ("int8", "uint8", "int64", "bool")
INTEGERS = {
    "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}  # fmt: skip
#: Values in every integer's range, fractions and signs to truncate, -0.5 to 0.
IN_RANGE = [1.5, -2.7, 100.0, -100.0, -0.5, 3.99]
#: Beyond some range: NaN, infinities, past int32, past 2**63, past int8 and uint8.
OUT_OF_RANGE = {
    "nan": math.nan, "inf": math.inf, "-inf": -math.inf, "3e9": 3e9,
    "1e19": 1e19, "2**63": 2.0**63, "200": 200.0, "-200": -200.0, "-1": -1.0,
}  # fmt: skip


def _bias_after(code: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(captured, eager): the float64 bias set to ``code(bias)``, materialized and eager."""
    eager = nn.Linear(1, 6, dtype=torch.float64)
    with torch.no_grad():
        eager.bias.copy_(code(eager.bias))
    with torch.device("meta"):
        lin = nn.Linear(1, 6, dtype=torch.float64)
    shardinit.materialize(lin, seed=SEED, init_fn=lambda: lin.bias.data.copy_(code(lin.bias)))
    return lin.bias.detach(), eager.bias.detach()


def _table() -> torch.Tensor:
    return torch.tensor(IN_RANGE, dtype=torch.float64) * 1.0


ROUTES: dict[str, Callable[[torch.dtype], torch.Tensor]] = {
    "to": lambda dtype: _table().to(dtype),
    "copy_": lambda dtype: torch.zeros(6, dtype=dtype).copy_(_table()),
    "setitem": lambda dtype: torch.zeros(6, dtype=dtype).index_put_(
        (torch.arange(6),), _table().to(dtype)
    ),
    "program": lambda dtype: (torch.arange(6.0) * 0.7 - 2.1).to(dtype),
    "fill_": lambda dtype: torch.zeros(6, dtype=dtype).fill_(2.7),
}


def _dtypes(names: list[str]) -> list[object]:
    return [n if n in SAMPLE else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("dtype", _dtypes(list(INTEGERS)))
def test_casts_in_range_give_eagers_values(dtype: str, route: str) -> None:
    got, eager = _bias_after(lambda _: ROUTES[route](INTEGERS[dtype]).to(torch.float64))
    assert torch.equal(got, eager), (got, eager)


def _beyond(dtype: str, number: float) -> bool:
    """Whether the cast of ``number`` to ``dtype`` is undefined in C++: NaN, an infinity,
    or past the range (uint8's is int64's: torch casts through it, then wraps)."""
    if not math.isfinite(number):
        return True
    if dtype == "uint8":
        return abs(number) >= 2.0**53
    info = torch.iinfo(INTEGERS[dtype])
    return not info.min - 1 < number < info.max + 1


#: (dtype, value) of OUT_OF_RANGE whose cast is undefined, the dtypes outside SAMPLE
#: under --runslow.
BEYOND = [
    pytest.param(dtype, value, marks=[] if dtype in SAMPLE else [pytest.mark.slow])
    for dtype in ("int8", "uint8", "int16", "int32", "int64")
    for value, number in OUT_OF_RANGE.items()
    if _beyond(dtype, number)
]


@pytest.mark.parametrize(("dtype", "value"), BEYOND)
def test_a_program_cast_out_of_range_is_refused(dtype: str, value: str) -> None:
    number = OUT_OF_RANGE[value]

    def code(_: torch.Tensor) -> torch.Tensor:
        # A random value scaled into the bad one: a program, never a table of torch's.
        return (torch.rand(6) * 0.0 + number).to(INTEGERS[dtype]).to(torch.float64)

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"a cast of float32 values to"):
        _bias_after(code)


def test_uint8_wraps_through_int64_as_torch_does() -> None:
    def code(_: torch.Tensor) -> torch.Tensor:
        return (torch.arange(6.0) * -70.5 + 300.25).to(torch.uint8).to(torch.float64)

    got, eager = _bias_after(code)
    assert torch.equal(got, eager), (got, eager)


def test_random_values_cast_in_range_keep_their_distribution() -> None:
    def code(_: torch.Tensor) -> torch.Tensor:
        return (torch.rand(6) * 10.0).to(torch.int32).to(torch.float64)

    got, _ = _bias_after(code)
    assert bool(((got >= 0) & (got <= 9) & (got == got.trunc())).all()), got


@pytest.mark.parametrize("value", [math.nan, math.inf, 3e9], ids=["nan", "inf", "3e9"])
def test_filling_an_integer_tensor_with_what_it_cannot_hold_is_refused(value: float) -> None:
    def code(_: torch.Tensor) -> torch.Tensor:
        return torch.zeros(6, dtype=torch.int32).fill_(value).to(torch.float64)

    with pytest.raises(RuntimeError, match="without overflow"):
        code(torch.zeros(6))  # eager refuses it
    # shardinit too, with torch's message (a NaN used to crash shardinit's own int())
    with torch.device("meta"):
        lin = nn.Linear(1, 6, dtype=torch.float64)
    with pytest.raises(shardinit.UnsupportedInitOpError, match="without overflow"):
        shardinit.materialize(lin, seed=SEED, init_fn=lambda: lin.bias.data.copy_(code(lin.bias)))


class _Widths(nn.Module):
    """Widths computed in the constructor as torchvision's RegNet computes its block
    widths (``BlockParams.from_init_params``: log, round, pow, then ``int().tolist()``)
    and an index table cast from a log: float values known at capture cast to integers,
    where interval bounds cannot show the values in the range (log is unbounded)."""

    def __init__(self) -> None:
        super().__init__()
        cont = torch.arange(6) * 26.2 + 24
        capacity = torch.round(torch.log(cont / 24) / math.log(2.25))
        widths = (torch.round(24 * torch.pow(2.25, capacity) / 8) * 8).int()
        self.register_buffer("widths", widths)
        self.register_buffer("logs", (torch.log(cont) * 10).long())
        self.proj = nn.Linear(int(sum(widths.tolist())), len(set(widths.tolist())))


def test_a_float_cast_of_values_known_at_capture_is_torchs_own() -> None:
    """On the meta device under record_constructors, a float temporary whose values are
    known (no random source) cast to an integer dtype is torch's own CPU cast, eager's
    bit for bit (a cast jumps a unit where a value crosses an integer, as ``//`` does),
    also where the values' bounds are unknown; so code that sizes layers from it builds
    eager's layers (the plain meta build cannot read the values at all)."""
    eager = _Widths()
    with torch.device("meta"), shardinit.record_constructors():
        meta = _Widths()
    shardinit.materialize(meta, seed=SEED)
    assert meta.proj.weight.shape == eager.proj.weight.shape == (3, 496)
    assert torch.equal(meta.widths, eager.widths) and torch.equal(meta.logs, eager.logs)
    assert meta.widths.tolist() == [24, 56, 56, 120, 120, 120]
    assert meta.logs.tolist() == [31, 39, 43, 46, 48, 50]
    with pytest.raises(NotImplementedError), torch.device("meta"):
        _Widths()
