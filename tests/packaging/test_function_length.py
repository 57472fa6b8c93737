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


def docstring_lines(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> range:
    """The lines of ``node``'s own docstring (empty when it has none)."""
    first = node.body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        assert first.end_lineno is not None
        return range(first.lineno, first.end_lineno + 1)
    return range(0)


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of ``node`` from ``def`` to its end, less its docstring."""
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1 - len(docstring_lines(node))


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


#: No class in the package has more lines of code than this (issues 36 and 46): a longer
#: one holds several jobs that want components of their own (the capture's mode, engine,
#: steps, copies). Its docstrings, comments and blank lines are not counted, so that
#: documentation is never what a class gives up to stay under it.
MAX_CLASS_LINES = 250


def _docstring_lines(node: ast.AST) -> set[int]:
    """The line numbers of every docstring in ``node`` (its own, its methods', nested
    classes')."""
    return {
        line
        for sub in ast.walk(node)
        if isinstance(sub, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        for line in docstring_lines(sub)
    }


def class_code_lines(node: ast.ClassDef, source: list[str]) -> int:
    """Lines of code of ``node``, from ``class`` to its end: without its docstrings,
    comment lines and blank lines."""
    assert node.end_lineno is not None
    documented = _docstring_lines(node)
    return sum(
        1
        for number in range(node.lineno, node.end_lineno + 1)
        if number not in documented
        and (text := source[number - 1].strip())
        and not text.startswith("#")
    )


def long_classes(root: Path, limit: int) -> list[str]:
    """``path:line name (N lines)`` for every class under ``root`` over ``limit`` lines of
    code (:func:`class_code_lines`)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=str(path))
        source = text.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                lines = class_code_lines(node, source)
                if lines > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_counter_sees_long_classes(tmp_path: Path) -> None:
    """A class over the limit in code is found; one over it only in docstrings, comments
    and blank lines is not."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    doc = '        """' + "\n" * 200 + '        """'
    comments = "\n".join(f"    # why {i}\n" for i in range(100))
    (tmp_path / "module.py").write_text(
        f"class Long:\n{body}\n\nclass Short:\n    x = 1\n\n"
        f'class Documented:\n    """Doc.\n\n    More.\n    """\n{comments}\n'
        f"    def method(self):\n{doc}\n        return 1\n"
        + "\n".join(f"    y{i} = {i}" for i in range(MAX_CLASS_LINES - 3))
        + "\n"
    )
    found = long_classes(tmp_path, MAX_CLASS_LINES)
    assert found == [f"{tmp_path.name}/module.py:1 Long ({MAX_CLASS_LINES + 1} lines)"], found


def test_no_class_in_the_package_is_longer_than_250_lines_of_code() -> None:
    offenders = long_classes(PACKAGE, MAX_CLASS_LINES)
    assert not offenders, "classes over 250 lines of code:\n" + "\n".join(offenders)
