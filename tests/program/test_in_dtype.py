"""A step of a float dtype narrower than binary64, where torch's kernel gives another
value than binary64 would: ``%`` takes its Python number rounded to the dtype (then it
is exact), ``//`` is refused with its reason (torch rounds each of its steps)."""

from __future__ import annotations

import pytest
import torch

from shardinit._program.exact import in_dtype
from shardinit._program.nodes import Bad, Binary, Const, Coord


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_floor_divide_in_a_narrow_float_is_refused_and_remainder_rounds_its_number(
    dtype: torch.dtype,
) -> None:
    divided = in_dtype(Binary("floordiv", Coord(0), Const(0.1)), dtype)
    assert isinstance(divided, Bad), divided
    assert "floor_divide (//)" in divided.why and str(dtype).removeprefix("torch.") in divided.why
    rest = in_dtype(Binary("mod", Coord(0), Const(0.1)), dtype)
    rounded = float(torch.tensor(0.1, dtype=dtype))
    assert rest == Binary("mod", Coord(0), Const(rounded)) and rounded != 0.1


def test_binary64_and_other_steps_are_kept_as_they_are() -> None:
    for expr, dtype in [
        (Binary("floordiv", Coord(0), Const(0.1)), torch.float64),
        (Binary("mod", Coord(0), Const(0.1)), torch.float64),
        (Binary("mul", Coord(0), Const(0.1)), torch.float32),
    ]:
        assert in_dtype(expr, dtype) is expr


def test_a_scales_factor_in_float32_is_torchs_float32_scalar() -> None:
    import math
    import random
    import struct

    from shardinit._program.actions import Scale
    from shardinit._program.nodes import Prior, Round

    tiny = 2.0**-149  # float32's least subnormal: ties and halves round to even there
    factors = [0.0, -0.0, 1 / 3, 0.1, tiny, tiny * 0.5, tiny * 1.5, tiny * 0.5000001, -1e-40]
    factors += [3.4028234663852886e38, 3.4028235677973366e38, 3.5e38, -1e300, math.inf]
    rng = random.Random(5)
    factors += [math.ldexp(rng.random(), rng.randint(-160, 130)) for _ in range(2000)]
    for factor in factors:
        program = Scale(factor).program(torch.float32, 2, 0)
        assert isinstance(program, Round) and isinstance(program.x, Binary), program
        assert program.x.a == Prior() and isinstance(program.x.b, Const)
        want = float(torch.tensor(factor, dtype=torch.float32))
        assert struct.pack("d", program.x.b.value) == struct.pack("d", want), factor
