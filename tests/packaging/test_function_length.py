"""No function in the shipped package is longer than about 80 lines (issue 13): a longer
one is a sign of phases written inline that want their own names.

Lines are counted from ``def`` to the function's last line, without its docstring (the
Args / Returns / Raises / example sections are documentation, not steps) and without
decorators. A nested function counts toward its parent and on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import shardinit

MAX_LINES = 80
PACKAGE = Path(shardinit.__file__).resolve().parent


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of ``node`` from ``def`` to its end, less its docstring."""
    assert node.end_lineno is not None
    total = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        assert first.end_lineno is not None
        total -= first.end_lineno - first.lineno + 1
    return total


def long_functions(root: Path, limit: int) -> list[str]:
    """``path:line name (N lines)`` for every function under ``root`` over ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = code_lines(node)
                if lines > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_counter_sees_long_functions(tmp_path: Path) -> None:
    """The walk finds a long function (nested too) and does not count docstrings."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    doc = '    """' + "\n" * 30 + '    """'
    (tmp_path / "module.py").write_text(
        f"def long():\n{body}\n\n"
        f"def documented():\n{doc}\n    return 1\n\n"
        f"class Holder:\n    def method(self):\n        def inner():\n"
        + "\n".join(f"            y{i} = {i}" for i in range(MAX_LINES))
        + "\n",
        encoding="utf-8",
    )
    found = long_functions(tmp_path, MAX_LINES)
    assert [entry.split(" ")[1] for entry in found] == ["long", "method", "inner"], found
    assert found[0].endswith(f"long ({MAX_LINES + 1} lines)")


def test_no_function_in_the_package_is_longer_than_80_lines() -> None:
    offenders = long_functions(PACKAGE, MAX_LINES)
    assert not offenders, "functions over 80 lines (split them into named steps):\n" + "\n".join(
        offenders
    )


#: No class in the package is longer than this (issue 36): a longer one holds several
#: jobs that want components of their own (the capture's mode, engine, steps, copies).
MAX_CLASS_LINES = 300


def long_classes(root: Path, limit: int) -> list[str]:
    """``path:line name (N lines)`` for every class under ``root`` over ``limit`` lines
    (from ``class`` to its end, docstrings included)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_counter_sees_long_classes(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (tmp_path / "module.py").write_text(f"class Long:\n{body}\n\nclass Short:\n    x = 1\n")
    found = long_classes(tmp_path, MAX_CLASS_LINES)
    assert found == [f"{tmp_path.name}/module.py:1 Long ({MAX_CLASS_LINES + 1} lines)"], found


def test_no_class_in_the_package_is_longer_than_300_lines() -> None:
    offenders = long_classes(PACKAGE, MAX_CLASS_LINES)
    assert not offenders, "classes over 300 lines:\n" + "\n".join(offenders)
