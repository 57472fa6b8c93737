"""``_core.LOG_CONSTANTS`` and ``_core.PHI_INV_CONSTANTS``: the core's fdlibm ``log`` and
AS 241 constants, exported so that the device kernel is built from them (one home:
rust/core/src/math.rs). The bit patterns are the published ones (fdlibm's hex comments,
AS 241's decimals), and the tables cannot be changed from Python."""

from __future__ import annotations

import struct

import pytest

from shardinit import _core


def bits(value: float) -> int:
    return int.from_bytes(struct.pack(">d", value), "big")


def test_log_constants_are_fdlibms() -> None:
    table = _core.LOG_CONSTANTS
    assert list(table) == ["LN2_HI", "LN2_LO", "TWO54", *(f"LG{i}" for i in range(1, 8))]
    assert bits(table["LN2_HI"]) == 0x3FE62E42_FEE00000
    assert bits(table["LN2_LO"]) == 0x3DEA39EF_35793C76
    assert table["TWO54"] == 2.0**54
    assert bits(table["LG1"]) == 0x3FE55555_55555593
    assert bits(table["LG7"]) == 0x3FC2F112_DF3E5244


def test_phi_inv_constants_are_as241s() -> None:
    table = _core.PHI_INV_CONSTANTS
    expected_names = [
        *(f"A{i}" for i in range(8)),
        *(f"B{i}" for i in range(1, 8)),
        *(f"C{i}" for i in range(8)),
        *(f"D{i}" for i in range(1, 8)),
        *(f"E{i}" for i in range(8)),
        *(f"F{i}" for i in range(1, 8)),
        "PHI_INV_SPLIT1",
    ]
    assert list(table) == expected_names
    # Wichura (1988), the decimals as published.
    assert table["A0"] == 3.3871328727963666080e0
    assert table["B7"] == 5.2264952788528545610e3
    assert table["D7"] == 1.05075007164441684324e-9
    assert table["F7"] == 2.04426310338993978564e-15
    assert table["PHI_INV_SPLIT1"] == 0.425


def test_phi_inv_central_from_the_table_is_the_cores() -> None:
    """The central approximation evaluated from the exported table alone, in the core's
    order of operations, gives the core's bits (the table is what the core computes
    with)."""
    c = _core.PHI_INV_CONSTANTS
    for p in (0.08, 0.1, 0.3, 0.5 + 2.0**-30, 0.77, 0.92):
        d = p - 0.5
        r = 0.180625 - d * d
        num, den = c["A7"], c["B7"]
        for i in range(6, -1, -1):
            num = num * r + c[f"A{i}"]
            den = den * r + (c[f"B{i}"] if i else 1.0)
        assert bits(d * num / den) == bits(_core.phi_inv(p, 1.0 - p)), p


@pytest.mark.parametrize("table", [_core.LOG_CONSTANTS, _core.PHI_INV_CONSTANTS])
def test_tables_are_read_only(table: object) -> None:
    with pytest.raises(TypeError):
        table["LG1"] = 0.0  # type: ignore[index]
