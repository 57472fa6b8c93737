"""Every refusal of a capture has one shape, built in one place
(``capture/trace/refusals.py``): who, the operation, the user's line, why, and what to
do. And the record store is the only writer of records: no other module of the capture
changes a track's ``ops``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

import shardinit
from shardinit._integration import new_modules
from shardinit._integration.capture.trace import refusals

CAPTURE = Path(refusals.__file__).resolve().parents[1]
#: The capture's modules, and the integration module whose refusal it raises.
SOURCES = [*sorted(CAPTURE.rglob("*.py")), Path(new_modules.__file__).resolve()]
#: ``capture_init: <who>: <op> at <file>:<line> in <function>: <why>. <what to do>``
SHAPE = re.compile(r"^capture_init: [^:]+: .+ at [^:]+:\d+ in \S+: .+\. \S.+$", re.S)

BUILT = re.compile(r"UnsupportedInitOpError\(")
WRITES_RECORDS = re.compile(r"\.ops\.(append|clear|extend|insert|pop|remove)\(|\.ops\s*=[^=]")


def found(pattern: re.Pattern[str], paths: list[Path], allowed: str) -> list[str]:
    """``file:line`` of every line of ``paths`` (but the file ``allowed``) ``pattern``
    matches, comments aside."""
    return [
        f"{path.name}:{number}"
        for path in paths
        if path.name != allowed
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line.split("#", 1)[0])
    ]


def test_refusals_are_built_in_one_place() -> None:
    assert len(SOURCES) > 30
    assert not found(BUILT, SOURCES, "refusals.py")


def test_the_store_is_the_only_writer_of_records() -> None:
    assert not found(WRITES_RECORDS, SOURCES, "store.py")


def test_a_refusal_built_by_hand_or_a_record_written_beside_the_store_is_found(
    tmp_path: Path,
) -> None:
    """The negative control: both scans see a site of their kind."""
    module = tmp_path / "created.py"
    module.write_text(
        "def f(track):\n"
        "    track.ops.clear()  # not the store\n"
        '    return UnsupportedInitOpError(f"capture_init: {track}")\n'
    )
    assert found(BUILT, [module], "refusals.py") == ["created.py:3"]
    assert found(WRITES_RECORDS, [module], "store.py") == ["created.py:2"]


#: A tensor made before init_fn runs: no value of it is one the capture followed.
_MADE_BEFORE = torch.ones(3, 4)


def _refusal(init_fn_of: object) -> str:
    model = nn.Linear(4, 3, device="meta")
    with pytest.raises(shardinit.UnsupportedInitOpError) as refused:
        shardinit.materialize(model, seed=0, init_fn=lambda: init_fn_of(model))  # type: ignore[operator]
    return str(refused.value)


@pytest.mark.parametrize(
    "code",
    [
        lambda m: m.weight.sort(),  # the store's
        lambda m: setattr(m, "weight", nn.Parameter(_MADE_BEFORE)),  # created
        lambda m: setattr(m, "extra", nn.Linear(2, 2)),  # new modules
    ],
    ids=["store", "created", "new-module"],
)
def test_refusals_from_each_site_share_the_shape(code: object) -> None:
    message = _refusal(code)
    assert SHAPE.match(message), message
    assert __file__ in message, message  # the user's line


def test_a_message_of_another_shape_is_not_the_shape() -> None:
    # The negative control of the shape: the old new-module shape had no who before the op.
    assert not SHAPE.match(
        "capture_init: init code adds a module at 'x' with a new Linear at f.py:3 in g: why"
    )


def test_a_tensor_in_a_refused_write_is_shown_by_dtype_and_shape() -> None:
    # torch's repr of the values (about 2 ms, and no help in a refusal) is not built.
    def scatter_rows(model: nn.Linear) -> None:
        with torch.no_grad():
            model.weight[[0, 2]] = torch.randn(2, 4)

    message = _refusal(scatter_rows)
    assert "[[0, 2]] = <float32 tensor (2, 4)>" in message, message
    assert "tensor([[" not in message, message
