"""Mutation testing within a time budget (``make mutants``): a sample of this file's own
Python mutants over every module of ``python/shardinit``, and one shard of cargo-mutants
over every file of ``rust/core/src``; the mutants no test killed go to
``tests/mutants/REPORT.md``, each with its triage from ``tests/mutants/TRIAGE.md`` (a
killing test, or why it is equivalent) or ``UNTRIAGED``.

Which tests a module's mutants face is decided here and only here, from the layout
(:func:`subject_tests`): the test folders named after a folder of the module's path or a
word of its name (``_integration/capture/...`` -> ``tests/capture``, ``_program/...`` ->
``tests/program``, ``cli/checkpoint.py`` -> ``tests/cli`` and ``tests/checkpoint``), else
its layer's (``_integration`` -> ``tests/materialize``, the package top ->
``tests/core``), and the test files elsewhere named after that subject or the module, by
whole words (``_program/expr.py`` -> ``tests/core/test_program_math.py``,
``placements.py`` -> ``test_materialize_placements.py``). No list of files: a module
that moves keeps its subject's tests, a new one is mutated from its first run.

Within those tests, each mutant runs only the ones that run its line: the tests are run
once, traced (tools/mutants_trace.py: only the functions that hold a drawn mutant's line,
so the rest runs at full speed; cached in ``target/mutants`` until the package, the tests
or the draw change), so a mutant costs a fork and its few tests. A line no test
of its subject runs makes a survivor at once; a line run only in a child process (a gloo
rank, a CLI subprocess) runs the subject's whole folders. The mutants are applied to a
copy of the tree (``target/mutants/tree``), never to the working tree.

Each run tests a sample, drawn with ``--seed`` (repeat it for several seeds), of the
modules under ``--only`` (repeatable; default: all). The outcomes are appended to
``target/mutants/*.jsonl`` until ``--fresh``, and ``REPORT.md`` is written from all of
them, so a long run may be several runs (``--skip-rust``, ``--skip-python``).

Usage: ``python tools/mutants.py --minutes 30 --rust-shard 0/100 --seed 1``
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "tests" / "mutants" / "REPORT.md"
TRIAGE = ROOT / "tests" / "mutants" / "TRIAGE.md"
OUT = ROOT / "target" / "mutants"
TREE = OUT / "tree"
#: The copy cargo-mutants mutates in place, and its build folder, kept between runs: a
#: mutant rebuilds only the core, incrementally (cargo-mutants' own copy rebuilt every
#: dependency first, which took over its 20-minute build limit on 2 loaded cores).
RUST_TREE = OUT / "rust-tree"
RUST_TARGET = OUT / "rust-target"
PYTHON_LOG = OUT / "python.jsonl"
RUST_LOG = OUT / "rust.jsonl"
PACKAGE = "python/shardinit"
RUST_SOURCES = "rust/core/src"

# --------------------------------------------------------------------------- subjects

#: Test folders that are no module's subject: shared code, whole-library client runs
#: (minutes, their own targets) and checks of the repository rather than of a module.
NOT_SUBJECTS = frozenset({"helpers", "mutants", "examples", "packaging", "clients", "zoo"})
#: A module whose path names no subject: its layer's tests (the deepest layer first).
LAYER_TESTS = (("_integration", "materialize"), ("", "core"))
#: A module's name shorter than this names no test file (``api``, ``ops``: too common).
MIN_NAME = 4


def _words(module: str) -> tuple[list[str], str]:
    """The folder names (leading ``_`` dropped) and the name of ``module`` (a path under
    ``PACKAGE``), and the words of that name."""
    parts = Path(module).relative_to(PACKAGE).with_suffix("").parts
    folders = [part.lstrip("_") for part in parts[:-1]]
    name = parts[-1].strip("_")
    return folders + name.split("_"), name


def subject_tests(module: str) -> list[str]:
    """The tests of ``module``'s subject (folders and files under ``tests/``, relative
    to the repository): the one mapping from a module to its tests."""
    tests_dir = ROOT / "tests"
    subjects = sorted(
        path.name
        for path in tests_dir.iterdir()
        if path.is_dir() and path.name not in NOT_SUBJECTS and not path.name.startswith(".")
    )
    words, name = _words(module)
    folders = [subject for subject in subjects if subject in words]
    if not folders:
        layer = Path(module).relative_to(PACKAGE).parts[0]
        folders = [next(tests for top, tests in LAYER_TESTS if top in (layer, ""))]
    found = [f"tests/{folder}" for folder in folders]
    # The files of other folders named after the subject or the module, by whole words
    # (``_program/expr.py``: tests/core/test_program_math.py).
    names = [folder for folder in folders if folder in words]
    names += [name] if len(name) >= MIN_NAME and name != "init" else []
    for subject in subjects:
        for path in sorted((tests_dir / subject).glob("test_*.py")):
            named = any(re.search(f"_{n}s?_", f"_{path.stem}_") for n in names)
            if named and f"tests/{subject}" not in found:
                found.append(path.relative_to(ROOT).as_posix())
    return found


def python_modules(only: Iterable[str]) -> list[str]:
    """Every module of the package under one of ``only`` (all of them if none)."""
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.py"))
    return [m for m in modules if _under(m, only)]


def _under(path: str, only: Iterable[str]) -> bool:
    prefixes = [prefix.rstrip("/") for prefix in only]
    return not prefixes or any(path == p or path.startswith(p + "/") for p in prefixes)


# --------------------------------------------------------------------------- tree and trace


def copy_tree(tree: Path | None = None) -> str:
    """A fresh copy of the repository's files (and the built ``_core``) at ``tree``; the
    digest of its package and tests."""
    tree = tree or TREE
    shutil.rmtree(tree, ignore_errors=True)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    files = [name for name in listed if name and (ROOT / name).is_file()]
    files += [p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).glob("_core*.so")]
    digest = hashlib.sha256()
    for name in sorted(files):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
        if name.startswith((PACKAGE, "tests/")):
            digest.update(name.encode() + (ROOT / name).read_bytes())
    return digest.hexdigest()[:16]


def tree_env(**extra: str) -> dict[str, str]:
    paths = [str(TREE / "python"), str(ROOT / "tools"), *extra.pop("PATHS", "").split(":")]
    env = {**os.environ, "PYTHONPATH": ":".join(p for p in paths if p), **extra}
    env.setdefault("HYPOTHESIS_PROFILE", "default")
    return env


@dataclasses.dataclass
class Trace:
    """Which passing test runs which line (``tests[nodeid]``: seconds and lines by
    path), and the lines run outside any test (``elsewhere``)."""

    tests: dict[str, dict[str, object]]
    elsewhere: dict[str, list[int]]

    def covering(self, path: str, line: int, among: list[str]) -> list[str]:
        """The passing tests under ``among`` that run ``path``'s ``line``, fastest first."""
        found = [
            (float(record["seconds"]), nodeid)  # type: ignore[arg-type]
            for nodeid, record in self.tests.items()
            if record.get("passed") and _under(nodeid.split("::")[0], among)
            and line in record["lines"].get(path, ())  # type: ignore[attr-defined]
        ]  # fmt: skip
        return [nodeid for _, nodeid in sorted(found)]

    def run_elsewhere(self, path: str, line: int) -> bool:
        return line in self.elsewhere.get(path, ())


def trace(tests: list[str], digest: str, lines: dict[str, list[int]]) -> Trace:
    """The traced run of ``tests`` in the tree, of the package's ``lines`` (by path: the
    lines of the mutants drawn; only the functions that hold one are traced, the rest
    run at full speed), cached by ``digest``, the tests (``-m EXPR`` among them selects
    by marker) and the lines."""
    wanted = json.dumps(lines, sort_keys=True)
    key = hashlib.sha256((digest + " ".join(sorted(tests)) + wanted).encode()).hexdigest()[:16]
    cached = OUT / f"trace-{key}.json"
    if not cached.exists():
        print(f"tracing {' '.join(tests)} (once per change of the tree)", flush=True)
        out = TREE.with_name(TREE.name + ".trace-run.json")
        lines_file = TREE.with_name(TREE.name + ".trace-lines.json")
        lines_file.write_text(wanted)
        env = tree_env(
            PATHS=str(ROOT / "tools" / "mutants_site"),
            MUTANTS_TRACE_OUT=str(out),
            MUTANTS_TRACE_PACKAGE=str(TREE / PACKAGE),
            MUTANTS_TRACE_ROOT=str(TREE),
            MUTANTS_TRACE_LINES=str(lines_file),
        )
        shutil.rmtree(str(out) + ".children", ignore_errors=True)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "mutants_trace"]
        subprocess.run([*command, "-p", "no:cacheprovider", *tests], cwd=TREE, env=env)
        out.replace(cached)
    data = json.loads(cached.read_text())
    return Trace(data["tests"], data["elsewhere"])


# --------------------------------------------------------------------------- Python mutants

SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.Add: ast.Sub, ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.And: ast.Or, ast.Or: ast.And,
}  # fmt: skip
OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.And: "and",
             ast.Or: "or"}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Mutant:
    path: str
    line: int
    column: int
    what: str
    source: str  # the whole mutated file

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}:{self.column}: {self.what}"


def _variants(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(description, mutated copy) for each mutation of ``node`` itself."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            if type(op) in SWAPS:
                ops = [*node.ops]
                ops[index] = SWAPS[type(op)]()
                yield (
                    f"{_op(op)} -> {_op(ops[index])}",
                    ast.Compare(node.left, ops, node.comparators),
                )
    elif isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in SWAPS:
        swapped = SWAPS[type(node.op)]()
        described = f"{_op(node.op)} -> {_op(swapped)}"
        if isinstance(node, ast.BinOp):
            yield described, ast.BinOp(node.left, swapped, node.right)
        else:
            yield described, ast.BoolOp(swapped, node.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "drop `not`", node.operand
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield f"{node.value} -> {node.value + 1}", ast.Constant(node.value + 1)
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield f"{node.value} -> {not node.value}", ast.Constant(not node.value)


def _op(op: ast.AST) -> str:
    if isinstance(op, ast.cmpop):
        return ast.unparse(ast.Compare(ast.Name("a"), [op], [ast.Name("b")]))[2:-2]
    return OPERATORS[type(op)]


def python_mutants(path: str) -> Iterator[Mutant]:
    """Every mutant of the function bodies of the module ``path``: a node's source text
    replaced by its mutated form (nodes of one line, so the rest keeps its text)."""
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    seen: set[tuple[int, int, str]] = set()
    for function in ast.walk(ast.parse(text)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = function.body[1:] if ast.get_docstring(function) else function.body
        for node in (n for statement in body for n in ast.walk(statement)):
            if getattr(node, "lineno", None) != getattr(node, "end_lineno", -1):
                continue
            for what, mutated in _variants(node):
                if (node.lineno, node.col_offset, what) in seen:
                    continue  # a nested function's node, met again from its parent
                seen.add((node.lineno, node.col_offset, what))
                line = lines[node.lineno - 1]
                start, end = _char(line, node.col_offset), _char(line, node.end_col_offset)
                new_line = line[:start] + f"({ast.unparse(mutated)})" + line[end:]
                source = "".join([*lines[: node.lineno - 1], new_line, *lines[node.lineno :]])
                yield Mutant(path, node.lineno, start + 1, f"{what} in {function.name}", source)


def _char(line: str, byte_offset: int | None) -> int:
    """The character index of a UTF-8 byte offset of ``line`` (ast's offsets are bytes)."""
    return len(line.encode("utf-8")[: byte_offset or 0].decode("utf-8"))


def tests_for(
    mutant: Mutant, traced: Trace, slowdown: float, single_process: bool
) -> tuple[list[str], float]:
    """The tests ``mutant`` runs and their time limit: those of its subject that run its
    line, else (a line run only in a gloo rank) the subject's multi-rank tests; none: no
    test of its subject runs the line."""
    subject = subject_tests(mutant.path)
    tests = traced.covering(mutant.path, mutant.line, subject)
    if tests:
        seconds = sum(float(traced.tests[t]["seconds"]) for t in tests)  # type: ignore[arg-type]
        return tests, 120 + slowdown * seconds
    if traced.run_elsewhere(mutant.path, mutant.line) and not single_process:
        return [*subject, "-m", "distributed"], 1800
    return [], 0


def draw(args: argparse.Namespace, everything: list[Mutant]) -> list[tuple[int, Mutant]]:
    """``args.python_sample`` mutants per seed, none run before (since ``--fresh``)."""
    taken = {json.loads(line)["key"] for line in _log_lines(PYTHON_LOG)}
    chosen: list[tuple[int, Mutant]] = []
    for seed in args.seed:
        left = [m for m in everything if m.key not in taken]
        for mutant in random.Random(seed).sample(left, min(args.python_sample, len(left))):
            chosen.append((seed, mutant))
            taken.add(mutant.key)
    return chosen


def _cost(unit: str) -> int:
    """A test folder's or file's rough cost: its size (the cheapest are traced first)."""
    path = ROOT / unit
    files = path.rglob("test_*.py") if path.is_dir() else [path]
    return sum(file.stat().st_size for file in files)


def trace_units(wanted: set[str]) -> list[str]:
    """The test folders and files of ``wanted`` traced one run each, the cheapest first:
    a file of a folder that is traced anyway is not traced on its own."""
    inside = [u for u in wanted if any(_under(u, [other]) for other in wanted - {u})]
    return sorted(wanted - set(inside), key=_cost)


def run_python(args: argparse.Namespace, deadline: float) -> None:
    """Samples of the Python mutants, each under the tests that run its line, until
    ``deadline``. The subjects' test folders and files are traced one at a time, the
    cheapest first, and once all of a mutant's are, its job goes to a worker in the tree
    (tools/mutants_worker.py), which appends each outcome to ``PYTHON_LOG``: a run cut
    short by its budget has results for the subjects it reached."""
    modules = python_modules(args.only)
    everything = [mutant for module in modules for mutant in python_mutants(module)]
    chosen = draw(args, everything)
    print(f"{len(chosen)} of {len(everything)} Python mutants drawn", flush=True)
    if not chosen:
        return
    digest = copy_tree()
    marks = ["-m", "not distributed"] if args.single_process else []
    units = trace_units({test for _, m in chosen for test in subject_tests(m.path)})
    lines: dict[str, list[int]] = {}
    for _, mutant in chosen:
        lines[mutant.path] = sorted({*lines.get(mutant.path, []), mutant.line})
    traced, done = Trace({}, {}), []
    for unit in units:
        if deadline - time.monotonic() < 120:
            break
        one = trace([unit, *marks], digest, lines)
        traced.tests.update(one.tests)
        for path, run in one.elsewhere.items():
            traced.elsewhere[path] = sorted({*traced.elsewhere.get(path, []), *run})
        done.append(unit)
        ready = [(s, m) for s, m in chosen if all(_under(t, done) for t in subject_tests(m.path))]
        chosen = [pair for pair in chosen if pair not in ready]
        if ready:
            _work(ready, traced, args, deadline)


def _work(
    chosen: list[tuple[int, Mutant]], traced: Trace, args: argparse.Namespace, deadline: float
) -> None:
    """Runs ``chosen`` in a worker in the tree, until ``deadline``."""
    jobs = []
    for seed, mutant in chosen:
        tests, timeout_s = tests_for(mutant, traced, args.slowdown, args.single_process)
        jobs.append({**dataclasses.asdict(mutant), "key": mutant.key, "seed": seed,
                     "tests": tests, "timeout": timeout_s})  # fmt: skip
    job_file = TREE.with_name(TREE.name + ".jobs.json")
    job_file.write_text(json.dumps({"deadline": time.time() + deadline - time.monotonic(),
                                    "jobs": jobs}))  # fmt: skip
    env = tree_env(SHARDINIT_TEST_PREFETCH="0")
    worker = [sys.executable, str(ROOT / "tools" / "mutants_worker.py"), str(job_file)]
    subprocess.run(worker, cwd=TREE, env=env, check=True)


def _log_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line] if path.exists() else []


# --------------------------------------------------------------------------- Rust


def rust_files(only: Iterable[str]) -> list[str]:
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / RUST_SOURCES).rglob("*.rs"))
    return [f for f in files if _under(f, only)]


def run_rust(minutes: float, shard: str, only: list[str]) -> None:
    """cargo-mutants over the core's files under ``only`` (one shard), stopped after
    ``minutes``; its outcomes appended to ``RUST_LOG``."""
    files = rust_files(only)
    if not files:
        return
    if shutil.which("cargo-mutants") is None:
        subprocess.run(["cargo", "install", "cargo-mutants", "--locked"], check=True)
    out = OUT / "rust"
    copy_tree(RUST_TREE)
    selected = [arg for path in files for arg in ("--file", path)] if only else []
    command = ["cargo", "mutants", "-p", "shardinit-core", *selected, "--shard", shard]
    command += ["--sharding=round-robin", "--baseline=skip", "--timeout=600", "--in-place"]
    command += ["--build-timeout=1200", "--output", str(out)]
    print("$", " ".join(command), flush=True)
    env = {**os.environ, "CARGO_TARGET_DIR": str(RUST_TARGET)}
    process = subprocess.Popen(command, cwd=RUST_TREE, env=env)
    try:
        process.wait(timeout=minutes * 60)
    except subprocess.TimeoutExpired:
        # SIGINT: cargo-mutants stops, its lists of outcomes so far are written.
        process.send_signal(signal.SIGINT)
        process.wait(timeout=300)
    log_rust_outcomes(out, shard)


def log_rust_outcomes(out: Path, shard: str) -> None:
    """Appends the outcomes cargo-mutants listed in ``out`` to ``RUST_LOG``."""
    with RUST_LOG.open("a") as log:
        for name, outcome in (("caught", "killed"), ("missed", "survived"),
                              ("timeout", "timeout"), ("unviable", "unviable")):  # fmt: skip
            path = out / "mutants.out" / f"{name}.txt"
            for line in _log_lines(path):
                log.write(json.dumps({"key": line, "outcome": outcome, "shard": shard}) + "\n")


# --------------------------------------------------------------------------- report


def triage() -> dict[str, str]:
    """``TRIAGE.md``'s lines ``- `<mutant>`: <verdict>``, by mutant."""
    if not TRIAGE.exists():
        return {}
    found = re.findall(r"^- `(.+?)`: (.+)$", TRIAGE.read_text(encoding="utf-8"), re.M)
    return dict(found)


def _outcomes(path: Path) -> dict[str, dict[str, object]]:
    """The last outcome of each mutant in the log ``path``."""
    return {record["key"]: record for record in map(json.loads, _log_lines(path))}


def _counts(outcomes: dict[str, dict[str, object]]) -> str:
    counts: dict[str, int] = {}
    for record in outcomes.values():
        counts[str(record["outcome"])] = counts.get(str(record["outcome"]), 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "none run"


def _module_table(python: dict[str, dict[str, object]]) -> list[str]:
    """Per module: mutants run, killed, and the rest."""
    rows: dict[str, list[int]] = {}
    for key, record in python.items():
        row = rows.setdefault(key.split(":")[0], [0, 0])
        row[0] += 1
        row[1] += record["outcome"] == "killed"
    lines = ["| module | run | killed | survived |", "|---|---|---|---|"]
    lines += [f"| `{m}` | {n} | {k} | {n - k} |" for m, (n, k) in sorted(rows.items())]
    return lines


def write_report(header: str) -> int:
    """``REPORT.md`` from every outcome logged since ``--fresh``; the untriaged survivors."""
    verdicts = triage()
    rust, python = _outcomes(RUST_LOG), _outcomes(PYTHON_LOG)
    seeds = sorted({int(r["seed"]) for r in python.values()})  # type: ignore[call-overload]
    lines = ["# Surviving mutants of the last `make mutants` runs", "", header, ""]
    lines += [f"Python: {len(python)} mutants (seeds {seeds}): {_counts(python)}.",
              f"Rust: {len(rust)} mutants: {_counts(rust)}.", ""]  # fmt: skip
    untriaged = 0
    for title, found in (("Rust (cargo-mutants)", rust), ("Python", python)):
        lines += [f"## {title}", ""]
        survivors = [(k, r) for k, r in found.items() if r["outcome"] in SURVIVING]
        for key, record in survivors or [("(none)", {"outcome": ""})]:
            verdict = verdicts.get(key, "UNTRIAGED" if survivors else "")
            untriaged += verdict == "UNTRIAGED"
            outcome = f" ({record['outcome']})" if record["outcome"] else ""
            lines.append(f"- `{key}`{outcome}" + (f": {verdict}" if verdict else ""))
        lines.append("")
    lines += ["## Python mutants by module", "", *_module_table(python), ""]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {REPORT.relative_to(ROOT)}", flush=True)
    return untriaged


#: Outcomes that need a triage line: no test failed on the mutant.
SURVIVING = ("survived", "uncovered", "timeout")


def main() -> None:
    global TREE
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="the whole run's budget")
    parser.add_argument("--rust-shard", default="0/100", help="cargo-mutants --shard k/n")
    parser.add_argument("--python-sample", type=int, default=20, help="mutants per seed")
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 0")
    parser.add_argument("--only", action="append", default=[], help="a path to narrow to")
    parser.add_argument(
        "--slowdown",
        type=float,
        default=4.0,
        help="a mutant's timeout: this times its tests' traced seconds, +120 s",
    )
    parser.add_argument(
        "--single-process",
        action="store_true",
        help="leave out the multi-rank (gloo) tests: a line only they run "
        "counts as run by no test (minutes of CPU less on 2 cores)",
    )
    parser.add_argument(
        "--tree",
        default=TREE.name,
        help="the folder under target/mutants of this run's copy of the tree "
        "(runs side by side each need their own)",
    )
    parser.add_argument("--skip-rust", action="store_true")
    parser.add_argument("--skip-python", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="forget the outcomes logged so far")
    parser.add_argument("--report", action="store_true", help="only rewrite REPORT.md")
    parser.add_argument("--note", default="", help="a line for REPORT.md's header (the run)")
    args = parser.parse_args()
    args.seed = args.seed or [0]
    TREE = OUT / args.tree
    OUT.mkdir(parents=True, exist_ok=True)
    if args.fresh:
        for log in (PYTHON_LOG, RUST_LOG):
            log.unlink(missing_ok=True)
    start = time.monotonic()
    if not args.report:
        if not args.skip_python:
            share = 1.0 if args.skip_rust else 0.5
            run_python(args, start + args.minutes * 60 * share)
        if not args.skip_rust:
            left = args.minutes - (time.monotonic() - start) / 60
            run_rust(max(left, 1.0), args.rust_shard, args.only)
    header = f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. {args.note}".strip()
    untriaged = write_report(header)
    if untriaged:
        sys.exit(f"{untriaged} surviving mutants without a triage line in {TRIAGE}")


if __name__ == "__main__":
    main()
