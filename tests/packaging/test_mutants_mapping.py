"""``make mutants`` (tools/mutants.py) mutates every module of the package and every file
of the core, and maps each module to its subject's tests by a rule of the layout, so a
module that moves, or a new one, keeps or gets its tests without a list to edit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import mutants  # noqa: E402


def test_every_module_and_core_file_is_drawn_from_by_default() -> None:
    modules = mutants.python_modules([])
    assert modules == sorted(
        p.relative_to(ROOT).as_posix() for p in (ROOT / "python/shardinit").rglob("*.py")
    )
    assert len(mutants.rust_files([])) == len(list((ROOT / "rust/core/src").rglob("*.rs")))
    assert mutants.python_modules(["python/shardinit/_program"]) == [
        m for m in modules if m.startswith("python/shardinit/_program/")
    ]


def test_every_module_maps_to_tests_that_exist() -> None:
    for module in mutants.python_modules([]):
        tests = mutants.subject_tests(module)
        assert tests, module
        assert all((ROOT / test).exists() for test in tests), (module, tests)


@pytest.mark.parametrize(
    ("module", "folder"),
    [
        ("python/shardinit/_integration/capture/session/threads.py", "tests/capture"),
        ("python/shardinit/_integration/capture/wing/new_place.py", "tests/capture"),
        ("python/shardinit/_program/expr/simplify.py", "tests/program"),
        ("python/shardinit/_integration/checkpoint_dcp.py", "tests/checkpoint"),
        ("python/shardinit/cli/checkpoint.py", "tests/checkpoint"),
        ("python/shardinit/cli/plan.py", "tests/cli"),
        ("python/shardinit/_cuda/launch.py", "tests/cuda"),
        ("python/shardinit/_integration/zero3.py", "tests/materialize"),
        ("python/shardinit/_fill.py", "tests/core"),
    ],
)
def test_a_module_maps_to_its_subjects_tests_by_its_place(module: str, folder: str) -> None:
    """Paths that need not exist: the rule reads the path, not a list."""
    assert folder in mutants.subject_tests(module)


def test_a_subjects_files_in_other_folders_come_along() -> None:
    tests = mutants.subject_tests("python/shardinit/_program/expr.py")
    assert "tests/core/test_program_math.py" in tests
    assert "tests/capture/test_capture_programs.py" in tests


def test_each_subject_is_traced_once_even_alone() -> None:
    """A lone folder is traced (an empty set of other folders holds nothing), and a file
    of a folder traced anyway is not traced again."""
    assert mutants.trace_units({"tests/capture"}) == ["tests/capture"]
    units = mutants.trace_units({"tests/program", "tests/core", "tests/core/test_program.py"})
    assert sorted(units) == ["tests/core", "tests/program"]


def test_the_trace_records_only_the_functions_of_the_drawn_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a function that holds a drawn mutant's line is traced: the rest of the
    package runs at full speed while the subject's tests are traced."""
    import mutants_trace

    def drawn() -> int:
        total = 1
        return total + 1

    def other() -> int:
        total = 2
        return total + 1

    path = Path(drawn.__code__.co_filename)
    first = drawn.__code__.co_firstlineno
    relative = mutants_trace.os.path.relpath(path, path.parent)
    trace = mutants_trace.LineTrace(str(path), {relative: {first + 2}})
    monkeypatch.setattr(mutants_trace, "_ROOT", str(path.parent))  # the plugin's tree root
    sys.settrace(trace.global_tracer)
    try:
        drawn(), other()
    finally:
        sys.settrace(None)
    assert trace.take() == {relative: [first + 1, first + 2]}
