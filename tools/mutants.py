"""Mutation testing within a time budget (``make mutants``): cargo-mutants over the Rust
core's arithmetic, then a small mutation runner of this file's own over the Python
writer and capture hub; the mutants no test killed go to ``tests/mutants/REPORT.md``,
each with its triage from ``tests/mutants/TRIAGE.md`` (a killing test, or why it is
equivalent) or ``UNTRIAGED``.

The files mutated are listed here and only here (``RUST_FILES``, ``PYTHON_TARGETS``):
when a module moves, change its path below. Each run tests a sample: one shard of the
Rust mutants (``--rust-shard k/n``; the first build of a shard's copy of the tree takes
minutes on 2 cores, each mutant after it one incremental build and the core's tests) and
``--python-sample`` of the Python ones, drawn with ``--seed``; vary the shard and the seed
between runs to cover more.

Usage: ``python tools/mutants.py --minutes 30 --rust-shard 0/100 --seed 1``
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "tests" / "mutants" / "REPORT.md"
TRIAGE = ROOT / "tests" / "mutants" / "TRIAGE.md"
OUT = ROOT / "target" / "mutants"

#: The Rust core's arithmetic: Philox, the region walk, the fill and its batches, the
#: init formulas and the program's builder, compile, dispatch and evaluator.
RUST_FILES = [
    "rust/core/src/philox.rs",
    "rust/core/src/region.rs",
    "rust/core/src/fill.rs",
    "rust/core/src/batch.rs",
    "rust/core/src/pool.rs",
    "rust/core/src/init.rs",
    *(
        f"rust/core/src/program/{job}.rs"
        for job in ("builder", "compile", "dispatch", "eval", "passes", "scalar")
    ),
]


@dataclasses.dataclass(frozen=True)
class PythonTarget:
    """A Python file, the functions of it that are mutated, and the tests that should
    kill their mutants (a targeted selection: the whole suite takes minutes)."""

    path: str
    functions: tuple[str, ...]
    tests: tuple[str, ...]


#: The writer (thread counts, regions) and the capture hub (refusal decisions).
PYTHON_TARGETS = [
    PythonTarget(
        "python/shardinit/_fill.py",
        ("on_one_thread", "takes", "add", "_core_region", "fill", "values_elementwise"),
        (
            "tests/program/test_writer.py",
            "tests/core/test_properties.py",
            "tests/core/test_values.py",
        ),
    ),
    PythonTarget(
        "python/shardinit/shard.py",
        ("get_num_threads", "set_num_threads", "box_of_shard", "_check_box", "_check_out"),
        (
            "tests/core/test_properties.py",
            "tests/core/test_bad_input.py",
            "tests/core/test_values.py",
        ),
    ),
    PythonTarget(
        "python/shardinit/_layout.py",
        ("chunk_bounds", "_chunk_runs", "merge_runs", "_split_runs", "split_length"),
        (
            "tests/core/test_layout.py",
            "tests/core/test_properties.py",
            "tests/capture/test_capture_fsdp2.py",
        ),
    ),
    PythonTarget(
        "python/shardinit/_integration/exclusive.py",
        ("hold", "__init__"),
        ("tests/capture/test_reentrancy.py",),
    ),
    PythonTarget(
        "python/shardinit/_program/writer.py",
        ("box", "write_pieces", "_visible_parts", "_local_index", "write_flat"),
        (
            "tests/program/test_writer.py",
            "tests/capture/test_capture_programs.py",
            "tests/capture/test_capture.py",
        ),
    ),
]


# --------------------------------------------------------------------------- Rust


def run_rust(minutes: float, shard: str) -> list[str]:
    """cargo-mutants over ``RUST_FILES`` (one shard), stopped after ``minutes``; the
    missed and timed-out mutants (``file:line:col: description``)."""
    if shutil.which("cargo-mutants") is None:
        subprocess.run(["cargo", "install", "cargo-mutants", "--locked"], check=True)
    files = [arg for path in RUST_FILES for arg in ("--file", path)]
    command = ["cargo", "mutants", "-p", "shardinit-core", *files, "--shard", shard]
    command += ["--sharding=round-robin", "--copy-target=true", "--baseline=skip"]
    command += ["--timeout=300"]
    command += ["--build-timeout=900", "--output", str(OUT)]
    print("$", " ".join(command), flush=True)
    process = subprocess.Popen(command, cwd=ROOT)
    try:
        process.wait(timeout=minutes * 60)
    except subprocess.TimeoutExpired:
        # SIGINT: cargo-mutants stops, its lists of outcomes so far are written.
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
    found = []
    for name in ("missed.txt", "timeout.txt"):
        path = OUT / "mutants.out" / name
        if path.exists():
            found += [f"{line} ({name[:-4]})" for line in path.read_text().splitlines() if line]
    return found


# --------------------------------------------------------------------------- Python

SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.Add: ast.Sub, ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.And: ast.Or, ast.Or: ast.And,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Mutant:
    path: str
    line: int
    what: str
    source: str  # the whole mutated file

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


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
    return ast.unparse(ast.Compare(ast.Name("a"), [op], [ast.Name("b")]))[2:-2] if isinstance(
        op, ast.cmpop
    ) else {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.And: "and",
            ast.Or: "or"}[type(op)]  # fmt: skip


def python_mutants(target: PythonTarget) -> Iterator[Mutant]:
    """Every mutant of the functions of ``target``: the node's source text replaced by
    its mutated form (one line only, so the rest of the file keeps its text)."""
    text = (ROOT / target.path).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name not in target.functions:
            continue
        body = function.body[1:] if ast.get_docstring(function) else function.body
        for node in (n for statement in body for n in ast.walk(statement)):
            if getattr(node, "lineno", None) != getattr(node, "end_lineno", -1):
                continue
            for what, mutated in _variants(node):
                line = lines[node.lineno - 1]
                start, end = _char(line, node.col_offset), _char(line, node.end_col_offset)
                new_line = line[:start] + f"({ast.unparse(mutated)})" + line[end:]
                source = "".join([*lines[: node.lineno - 1], new_line, *lines[node.lineno :]])
                yield Mutant(target.path, node.lineno, f"{what} in {function.name}", source)


def _char(line: str, byte_offset: int | None) -> int:
    """The character index of a UTF-8 byte offset of ``line`` (ast's offsets are bytes)."""
    return len(line.encode("utf-8")[: byte_offset or 0].decode("utf-8"))


def run_python_mutant(mutant: Mutant, tests: tuple[str, ...], timeout_s: float) -> str:
    """``killed``, ``survived`` or ``timeout``: the tests run on the mutated file, which is
    put back afterwards whatever happens (an interrupt included)."""
    path = ROOT / mutant.path
    original = path.read_bytes()
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        path.write_text(mutant.source, encoding="utf-8")
        result = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=timeout_s)
        return "survived" if result.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        path.write_bytes(original)


def run_python(minutes: float, sample: int, seed: int) -> tuple[list[str], int]:
    """A sample of the Python mutants, each under its target's tests, until ``minutes``
    have passed; the survivors (``path:line: what``) and how many were run."""
    everything = [(m, t) for t in PYTHON_TARGETS for m in python_mutants(t)]
    chosen = random.Random(seed).sample(everything, min(sample, len(everything)))
    deadline = time.monotonic() + minutes * 60
    survivors, done = [], 0
    for mutant, target in chosen:
        left = deadline - time.monotonic()
        if left < 30:
            break
        outcome = run_python_mutant(mutant, target.tests, min(left, 900))
        done += 1
        print(f"{outcome:9} {mutant.key}", flush=True)
        if outcome != "killed":
            survivors.append(f"{mutant.key} ({outcome})")
    print(f"{done} of {len(everything)} Python mutants run", flush=True)
    return survivors, done


# --------------------------------------------------------------------------- report


def triage() -> dict[str, str]:
    """``TRIAGE.md``'s lines ``- `<mutant>`: <verdict>``, by mutant."""
    if not TRIAGE.exists():
        return {}
    found = re.findall(r"^- `(.+?)`: (.+)$", TRIAGE.read_text(encoding="utf-8"), re.M)
    return dict(found)


def write_report(rust: list[str], python: list[str], header: str) -> None:
    verdicts = triage()
    lines = ["# Surviving mutants of the last `make mutants` run", "", header, ""]
    for title, found in (("Rust (cargo-mutants)", rust), ("Python", python)):
        lines += [f"## {title}", ""]
        for entry in found or ["(none)"]:
            key = re.sub(r" \((missed|timeout|survived)\)$", "", entry)
            verdict = verdicts.get(key, "UNTRIAGED" if found else "")
            lines.append(f"- `{entry}`" + (f": {verdict}" if verdict else ""))
        lines.append("")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {REPORT.relative_to(ROOT)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="the whole run's budget")
    parser.add_argument("--rust-shard", default="0/100", help="cargo-mutants --shard k/n")
    parser.add_argument("--python-sample", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-rust", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("HYPOTHESIS_PROFILE", "default")
    start = time.monotonic()
    rust = [] if args.skip_rust else run_rust(args.minutes * 0.6, args.rust_shard)
    left = args.minutes - (time.monotonic() - start) / 60
    python, done = run_python(max(left, 1.0), args.python_sample, args.seed)
    header = (
        f"Rust shard {'(skipped)' if args.skip_rust else args.rust_shard} of {len(RUST_FILES)} "
        f"files; {done} Python mutants (seed {args.seed}); budget {args.minutes} min."
    )
    write_report(rust, python, header)
    untriaged = REPORT.read_text(encoding="utf-8").count("UNTRIAGED")
    if untriaged:
        sys.exit(f"{untriaged} surviving mutants without a triage line in {TRIAGE}")


if __name__ == "__main__":
    main()
