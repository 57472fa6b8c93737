"""The worker of ``make mutants`` (tools/mutants.py) that runs the Python mutants: started in
the copy of the tree with its package first on the path, it imports torch, the package and
every test module once (a pytest collection), then forks once per mutant. The child puts
the mutated function's code in place of the live one's (``__code__``, so every name bound
to the function sees it) and runs the mutant's tests with ``pytest.main``; a pytest start
and the imports cost seconds of CPU per mutant otherwise, on 2 shared cores.

Usage (by tools/mutants.py): ``python tools/mutants_worker.py JOBS.json``.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

import mutants  # tools/ is on the path

#: pytest's exit status when a test failed (with ``-x``: the first one).
TESTS_FAILED = 1


def _qualname(source: str, line: int) -> list[str]:
    """The names from the module down to the outermost function that holds ``line``
    (a top-level function, or a method of a top-level class, nested classes included)."""
    body: list[ast.stmt] = ast.parse(source).body
    names: list[str] = []
    while True:
        for node in body:
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                if isinstance(node, ast.ClassDef):
                    names.append(node.name)
                    body = node.body
                    break
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return [*names, node.name]
        else:
            raise LookupError(f"no function holds line {line}")


def _code(code: CodeType, qualname: str) -> CodeType | None:
    """The code object named ``qualname`` among ``code``'s constants, at any depth."""
    for const in code.co_consts:
        if isinstance(const, CodeType):
            if const.co_qualname == qualname:
                return const
            found = _code(const, qualname)
            if found is not None:
                return found
    return None


def _functions(value: Any) -> list[Any]:
    """The plain functions behind a class attribute or module global (staticmethod,
    classmethod, property, functools wrappers)."""
    found = []
    for inner in (value, getattr(value, "__func__", None), getattr(value, "fget", None),
                  getattr(value, "fset", None)):  # fmt: skip
        while inner is not None:
            if hasattr(inner, "__code__"):
                found.append(inner)
            inner = getattr(inner, "__wrapped__", None)
    return found


def module_name(path: str) -> str:
    parts = list(Path(path).relative_to("python").with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def patch(job: dict[str, Any]) -> None:
    """Puts the mutated function's code in place in the live module (or, when the
    function cannot be found, runs the whole mutated module over the live one)."""
    module: ModuleType = importlib.import_module(module_name(job["path"]))
    compiled = compile(job["source"], module.__file__ or job["path"], "exec")
    names = _qualname(job["source"], job["line"])
    new = _code(compiled, ".".join(names))
    holder: Any = module
    for name in names[:-1]:
        holder = getattr(holder, name)
    value = vars(holder).get(names[-1]) if hasattr(holder, "__dict__") else None
    targets = [f for f in _functions(value) if f.__code__.co_qualname == ".".join(names)]
    if new is None or not targets:
        exec(compiled, vars(module))
        return
    for function in targets:
        function.__code__ = new


def run_child(job: dict[str, Any] | None, tests: list[str]) -> int:
    """Forks: the child patches ``job`` in (None: no mutant) and runs ``tests``."""
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        try:
            import pytest

            if job is not None:
                patch(job)
            status = pytest.main(["-q", "-x", "-p", "no:cacheprovider", *tests])
        except BaseException:
            status = 99
        os._exit(int(status))
    return pid


def outcome(pid: int, timeout_s: float) -> str:
    """The child's outcome: ``killed`` (a test failed, or it crashed), ``survived``,
    ``timeout`` or ``error`` (pytest could not run the tests)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.2)
    if os.WIFSIGNALED(status):
        return "killed"
    code = os.WEXITSTATUS(status)
    return {0: "survived", TESTS_FAILED: "killed"}.get(code, f"error {code}")


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    jobs: list[dict[str, Any]] = plan["jobs"]
    import pytest

    files = sorted({t.split("::")[0] for job in jobs for t in job["tests"] if t != "-m"})
    files = [f for f in files if f != "distributed"]
    pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *files])
    first = next((job for job in jobs if job["tests"]), None)
    if first is not None:
        sane = outcome(run_child(None, first["tests"]), first["timeout"])
        if sane != "survived":
            sys.exit(f"the tests {first['tests']} do not pass unmutated in a fork: {sane}")
    for job in jobs:
        if time.time() > plan["deadline"] - 60:
            break
        began = time.monotonic()
        result = "uncovered"
        if job["tests"]:
            result = outcome(run_child(job, job["tests"]), job["timeout"])
        seconds = round(time.monotonic() - began, 1)
        record = {"key": job["key"], "outcome": result, "seed": job["seed"],
                  "tests": len(job["tests"]), "seconds": seconds}  # fmt: skip
        with mutants.PYTHON_LOG.open("a") as log:
            log.write(json.dumps(record) + "\n")
        print(f"{result:9} {job['key']} ({len(job['tests'])} tests)", flush=True)


if __name__ == "__main__":
    main()
