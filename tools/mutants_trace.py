"""A pytest plugin of ``make mutants`` (tools/mutants.py): which lines of the package each
test runs, so that a mutant is tested by the tests that run its line and no others.

Loaded with ``-p mutants_trace`` (tools/ on ``PYTHONPATH``) when ``MUTANTS_TRACE_OUT``
names the JSON file to write: ``{"tests": {nodeid: {"seconds": s, "passed": bool, "lines": {path:
[line, ...]}}}, "elsewhere": {path: [line, ...]}}``, paths relative to the tree, lines of
the files under ``MUTANTS_TRACE_PACKAGE`` (or, when ``MUTANTS_TRACE_LINES`` names a JSON
file ``{path: [line, ...]}``, only those lines: the functions that hold none run untraced,
which makes the traced run several times cheaper). A child process started by a test (a CLI
subprocess) counts as that test; a line run outside any one test (at collection, or in a
gloo rank, which runs the scenarios of several modules) goes to ``elsewhere``: for its
mutants the runner falls back on the subject's multi-rank tests. ``sys.settrace`` (Python 3.11
has no ``sys.monitoring``), with a local tracer only in the package's frames, on every
thread started after the session begins.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

_PACKAGE = os.environ.get("MUTANTS_TRACE_PACKAGE", "")
_ROOT = os.environ.get("MUTANTS_TRACE_ROOT", "")
_OUT = os.environ.get("MUTANTS_TRACE_OUT", "")
_LINES = os.environ.get("MUTANTS_TRACE_LINES", "")

Tracer = Callable[[FrameType, str, Any], Any]


class LineTrace:
    """The package's lines run since the last :meth:`take`, by file."""

    def __init__(self, package: str, wanted: dict[str, set[int]] | None) -> None:
        self.package = package
        self.wanted = wanted  # None: every line of the package
        self.lines: dict[str, set[int]] = {}
        self._ours: dict[str, str | None] = {}  # code's file -> its path in the tree
        self._traced: dict[CodeType, bool] = {}  # code -> whether it holds a wanted line

    def _relative(self, filename: str) -> str | None:
        known = self._ours.get(filename, "")
        if known != "":
            return known
        relative = os.path.relpath(filename, _ROOT) if filename.startswith(self.package) else None
        self._ours[filename] = relative
        return relative

    def _holds_wanted(self, code: CodeType, relative: str) -> bool:
        held = self._traced.get(code)
        if held is None:
            assert self.wanted is not None
            lines = {line for _, _, line in code.co_lines() if line is not None}
            held = self._traced[code] = not lines.isdisjoint(self.wanted.get(relative, ()))
        return held

    def global_tracer(self, frame: FrameType, event: str, arg: Any) -> Tracer | None:
        relative = self._relative(frame.f_code.co_filename)
        if relative is None:
            return None
        if self.wanted is not None and not self._holds_wanted(frame.f_code, relative):
            return None
        lines = self.lines.setdefault(relative, set())

        def local(frame: FrameType, event: str, arg: Any) -> Tracer:
            if event == "line":
                lines.add(frame.f_lineno)
            return local

        return local

    def take(self) -> dict[str, list[int]]:
        taken = {path: sorted(lines) for path, lines in self.lines.items() if lines}
        self.lines = {}
        return taken


def start() -> LineTrace:
    wanted = None
    if _LINES:
        wanted = {path: set(lines) for path, lines in json.loads(Path(_LINES).read_text()).items()}
    trace = LineTrace(_PACKAGE, wanted)
    sys.settrace(trace.global_tracer)
    threading.settrace(trace.global_tracer)
    return trace


class TracePlugin:
    def __init__(self) -> None:
        self.trace = start()
        self.tests: dict[str, dict[str, Any]] = {}
        self.elsewhere: dict[str, set[int]] = {}
        self.failed: set[str] = set()  # a failing or skipped test kills no mutant

    def _set_aside(self) -> None:
        for path, lines in self.trace.take().items():
            self.elsewhere.setdefault(path, set()).update(lines)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        self._set_aside()
        # A child process started by this test says so (its lines are the test's); a
        # gloo rank runs the scenarios of every module of its group: not one test's.
        multi_rank = item.get_closest_marker("distributed") is not None
        os.environ["MUTANTS_TRACE_TEST"] = "" if multi_rank else item.nodeid
        began = time.monotonic()
        yield
        seconds = time.monotonic() - began
        passed = item.nodeid not in self.failed
        lines = self.trace.take()
        self.tests[item.nodeid] = {"seconds": seconds, "passed": passed, "lines": lines}
        os.environ["MUTANTS_TRACE_TEST"] = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed or report.skipped:
            self.failed.add(report.nodeid)

    def pytest_sessionfinish(self) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        self._set_aside()
        elsewhere = {path: sorted(lines) for path, lines in self.elsewhere.items()}
        for child in Path(_OUT + ".children").glob("*.json"):
            record = json.loads(child.read_text())
            test = self.tests.get(record["test"])
            for path, lines in record["lines"].items():
                into = elsewhere if test is None else test["lines"]
                into[path] = sorted({*into.get(path, []), *lines})
        Path(_OUT).write_text(json.dumps({"tests": self.tests, "elsewhere": elsewhere}))


def child_start() -> None:
    """In a child process (``sitecustomize``): trace it whole, written at exit."""
    import atexit

    trace = start()
    children = Path(_OUT + ".children")
    test = os.environ.get("MUTANTS_TRACE_TEST", "")

    def write() -> None:
        sys.settrace(None)
        children.mkdir(exist_ok=True)
        record = {"test": test, "lines": trace.take()}
        (children / f"{os.getpid()}.json").write_text(json.dumps(record))

    atexit.register(write)


def pytest_configure(config: pytest.Config) -> None:
    if _OUT and _PACKAGE:
        config.pluginmanager.register(TracePlugin(), "mutants-trace")
        os.environ["MUTANTS_TRACE_CHILD"] = "1"  # read by tools/mutants_site/sitecustomize.py
