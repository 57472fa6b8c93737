"""Numbers past what the core or the machine can take end in one line naming the flag or
the shapes file's field and the allowed range, and no command starts more processes than
the machine holds (issue 37)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from shardinit.cli import _args, _launch, run


def _error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of ``shardinit argv``, after checking it is a usage error."""
    code = run(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert lines[0].startswith("usage: shardinit")
    return lines[-1]


@pytest.mark.parametrize("flag", ["--world", "--tp", "--ep"])
def test_plan_degree_past_64_bits_names_the_flag_and_range(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--model", "tiny", "--world", "2", flag, str(2**64)]
    assert _error_line(argv, capsys) == (
        f"shardinit plan: error: argument {flag}: expected an integer in [1, 2^64 - 1] "
        "(the core counts in 64 bits), got 18446744073709551616"
    )


def test_plan_world_of_2_to_the_64_minus_1_is_planned(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--model", "tiny", "--world", str(2**64 - 1)]) == 0
    assert f"on {2**64 - 1} rank(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            [2**70, 4],
            "w: shape[0] must be in [0, 2^64 - 1], got 1180591620717411303424 (about 2^70)",
        ),
        (
            [0, 2**64],
            "w: shape[1] must be in [0, 2^64 - 1], got 18446744073709551616 (about 2^64)",
        ),
        (
            [2**32, 2**32],
            "w: shape [4294967296, 4294967296] has 18446744073709551616 elements; stream "
            "format v1 addresses at most 18446744073709551615 elements of float32",
        ),
        (
            {"shape": [2**62, 3], "dtype": "float64"},
            "w: shape [4611686018427387904, 3] has 13835058055282163712 elements; stream "
            "format v1 addresses at most 9223372036854775808 elements of float64",
        ),
        ([1] * 65, "w: shape must have at most 64 dims, got 65"),
    ],
    ids=["2^70 dim", "2^64 dim beside 0", "2^64 elements", "float64 past 2^63", "65 dims"],
)
def test_shapes_file_past_the_core_names_the_field_and_range(
    tmp_path: Path, entry: object, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"w": entry}))
    line = _error_line(["plan", "--shapes", str(path), "--world", "2"], capsys)
    assert line == f"shardinit plan: error: shapes file {path}: {message}"


def test_shapes_file_at_the_core_limits_is_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "shapes.json"
    shapes = {"w": [2**64 - 1], "d": {"shape": [2**63], "dtype": "float64"}, "e": [1] * 64}
    path.write_text(json.dumps(shapes))
    assert run(["plan", "--shapes", str(path), "--world", "3"]) == 0
    assert "3 parameters" in capsys.readouterr().out


def test_the_local_rank_bound_is_the_machines_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meminfo = Path("/proc/meminfo").read_text()
    found = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    assert found is not None
    total = int(found.group(1)) * 1024
    # /proc/meminfo's total leaves out the kernel's own reservations: a little less.
    unlimited = tmp_path / "memory.max"
    unlimited.write_text("max\n")
    monkeypatch.setattr(_launch, "_CGROUP_LIMITS", (str(unlimited),))
    assert 0.8 * _launch.physical_memory() <= total <= _launch.physical_memory()
    assert _launch.max_local_ranks() == _launch.physical_memory() // _launch.RANK_BYTES
    # A container's lower limit is the bound: 3 GiB hold 6 ranks of 512 MiB.
    limited = tmp_path / "memory.limit_in_bytes"
    limited.write_text(f"{3 * 2**30}\n")
    monkeypatch.setattr(_launch, "_CGROUP_LIMITS", (str(tmp_path / "absent"), str(limited)))
    assert _launch.physical_memory() == 3 * 2**30
    assert _launch.max_local_ranks() == 6
    limited.write_text("100\n")  # less than one rank: still one
    assert _launch.max_local_ranks() == 1


@pytest.mark.parametrize(
    ("argv", "flag", "got"),
    [
        (["demo", "--worlds", "1,9"], "--worlds", "9"),
        (["fingerprint", "--world", "9"], "--world", "9"),
        (["fingerprint", "--world", str(2**64)], "--world", str(2**64)),
    ],
    ids=["demo --worlds", "fingerprint --world", "fingerprint --world 2^64"],
)
def test_more_local_ranks_than_the_machine_holds_are_refused_at_once(
    argv: list[str],
    flag: str,
    got: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(_args, "max_local_ranks", lambda: 8)
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    line = _error_line(argv, capsys)
    command = argv[0]
    assert re.fullmatch(
        rf"shardinit {command}: error: argument {flag}: expected at most 8 local ranks, "
        rf"got {got}: each rank is a process with torch \(about 512\.00 MiB\) and this "
        r"machine has \d+\.\d\d GiB of memory",
        line,
    ), line


def test_demo_default_worlds_from_tp_are_bounded_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_args, "max_local_ranks", lambda: 8)
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    line = _error_line(["demo", "--tp", "6"], capsys)
    assert line.startswith(
        "shardinit demo: error: argument --tp: 6 gives the default worlds [6, 12]: "
        "expected at most 8 local ranks, got 12: "
    )


def test_launch_refuses_a_world_past_the_bound_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    bound = _launch.max_local_ranks()
    for world in (0, bound + 1, 2**64):
        with pytest.raises(_launch.LaunchError, match=rf"^world must be in \[1, {bound}\] "):
            _launch.launch("shardinit.cli._worker", world, [])


def _no_process(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"a process was started: {args}")
