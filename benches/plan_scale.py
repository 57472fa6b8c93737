"""``shardinit plan`` at cluster scale: planning cost, and one rank generated for real.

Part 1, plan: for each model and world size (TP 8), the time and memory of the plan's own
work in this process (layout, closed-form byte summary, the regions of the ranks shown),
and the whole command in a fresh process (``python -m shardinit plan``: wall time, CPU
time and peak RSS from ``wait4``; the command imports no torch), median wall and CPU and
largest RSS of ``--repeats`` runs.

Part 2, generation: ``generate_rank`` (what ``shardinit plan --generate RANK`` runs) for
the first, a middle and the last rank: the time of allocation and fill, the bytes, and
the peak RSS added (``VmHWM`` reset through ``/proc/self/clear_refs`` before each run),
and nanoseconds per byte, the figure that should not depend on the rank or the world.

Usage:
    .venv/bin/python benches/plan_scale.py [--models llama-8b,llama-70b,llama-405b]
        [--worlds 1024,4096,16384] [--tp 8] [--repeats 1] [--no-subprocess]
        [--plan-only] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shardinit.cli import run
from shardinit.cli.layout import byte_summary, plan_layout
from shardinit.cli.models import param_table

MIB = 2**20


def _plan_in_process(model: str, world: int, tp: int) -> dict[str, Any]:
    from shardinit.cli._args import rss_bytes

    argv = ["plan", "--model", model, "--world", str(world), "--tp", str(tp)]
    before = rss_bytes()
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        assert run(argv) == 0
    seconds = time.perf_counter() - start
    return {"plan_s": seconds, "plan_rss_added": rss_bytes() - before}


def _plan_process(model: str, world: int, tp: int, repeats: int) -> dict[str, Any]:
    # A child's peak RSS (ru_maxrss) starts from its parent's RSS at the fork and is kept
    # across exec: measured while this process has not imported torch yet.
    assert "torch" not in sys.modules, "measure the processes before importing torch"
    argv = [sys.executable, "-m", "shardinit", "plan", "--model", model]
    argv += ["--world", str(world), "--tp", str(tp)]
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        runs.append((time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage))
    return {
        "process_s": statistics.median(r[0] for r in runs),
        "process_cpu_s": statistics.median(r[1] for r in runs),
        "process_peak_rss": max(r[2].ru_maxrss for r in runs) * 1024,
        "process_runs_s": [r[0] for r in runs],
    }


def _import_process() -> dict[str, Any]:
    """What ``import shardinit.cli`` alone costs a fresh process (no torch comes with it)."""
    assert "torch" not in sys.modules, "measure the processes before importing torch"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "import shardinit.cli"])
    _, _, usage = os.wait4(proc.pid, 0)
    return {
        "import_s": time.perf_counter() - start,
        "import_cpu_s": usage.ru_utime + usage.ru_stime,
        "import_peak_rss": usage.ru_maxrss * 1024,
    }


def _generate_once(model: str, world: int, tp: int, rank: int) -> tuple[float, float, int, int]:
    """(seconds, CPU seconds, bytes, peak RSS added) of one generation in a forked child:
    a fresh heap each time (glibc would hand a second run in this process the pages the
    first one freed, and its RSS would not grow), without paying torch's import again."""
    from shardinit.cli.generate import generate_rank  # torch: imported here, once

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: generate, report, leave without running atexit hooks
        os.close(read_end)
        try:
            entries = param_table(model)
            plan = plan_layout(entries, world, tp)
            shards = generate_rank(plan, {e.name: e.kind for e in entries}, rank, seed=0)
            assert shards.peak_rss is not None, "cannot reset the peak RSS here"
            added = shards.peak_rss - shards.rss_before
            report = [shards.seconds, shards.cpu_seconds, shards.nbytes, added]
            os.write(write_end, json.dumps(report).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    seconds, cpu_seconds, nbytes, added = json.loads(text)
    return seconds, cpu_seconds, nbytes, added


def _generate(model: str, world: int, tp: int, rank: int, repeats: int) -> dict[str, Any]:
    runs = [_generate_once(model, world, tp, rank) for _ in range(repeats)]
    params = len(param_table(model))
    seconds = statistics.median(r[0] for r in runs)
    cpu_seconds = statistics.median(r[1] for r in runs)
    nbytes = runs[0][2]
    added = max(r[3] for r in runs)
    return {
        "model": model,
        "world": world,
        "rank": rank,
        "params": params,
        "bytes": nbytes,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "ns_per_byte": seconds / nbytes * 1e9 if nbytes else None,
        "cpu_ns_per_byte": cpu_seconds / nbytes * 1e9 if nbytes else None,
        "rss_added": added,
        "rss_over_bytes": added - nbytes,
    }


def _print_plan_rows(rows: list[dict[str, Any]]) -> None:
    print("\nplan (TP 8): in-process work, and the whole command in a fresh process")
    print(
        f"{'model':<12}{'world':>7}{'plan s':>9}{'+RSS MiB':>10}{'busiest MiB':>13}"
        f"{'mean MiB':>10}{'process s':>11}{'cpu s':>7}{'peak RSS MiB':>14}"
    )
    for r in rows:
        process = (
            f"{r['process_s']:>11.2f}{r['process_cpu_s']:>7.2f}{r['process_peak_rss'] / MIB:>14.0f}"
            if "process_s" in r
            else ""
        )
        print(
            f"{r['model']:<12}{r['world']:>7}{r['plan_s']:>9.3f}{r['plan_rss_added'] / MIB:>10.1f}"
            f"{r['busiest'] / MIB:>13.2f}{r['mean'] / MIB:>10.2f}{process}"
        )


def _fit(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Least squares of ``cpu_seconds = per_param * params + per_byte * bytes`` (no
    intercept): what a rank pays per parameter (spec checks, calls) and per byte."""
    xx = sum(r["params"] ** 2 for r in rows)
    xy = sum(r["params"] * r["bytes"] for r in rows)
    yy = sum(r["bytes"] ** 2 for r in rows)
    xt = sum(r["params"] * r["cpu_seconds"] for r in rows)
    yt = sum(r["bytes"] * r["cpu_seconds"] for r in rows)
    det = xx * yy - xy * xy
    return (xt * yy - yt * xy) / det, (yt * xx - xt * xy) / det


def _print_generation_rows(rows: list[dict[str, Any]]) -> None:
    print("\none rank generated for real (fp32, TP 8, shardinit's threads)")
    per_param, per_byte = _fit(rows)
    print(
        f"fit over all rows: CPU seconds = {per_param * 1e3:.3f} ms x parameters + "
        f"{per_byte * 1e9:.3f} ns x bytes; net = (CPU s - per-parameter part) / bytes"
    )
    print(
        f"{'model':<12}{'world':>7}{'rank':>7}{'MiB':>10}{'wall s':>9}{'CPU s':>8}"
        f"{'CPU ns/B':>10}{'net ns/B':>10}{'+RSS MiB':>10}{'RSS - bytes MiB':>17}"
    )
    for r in rows:
        if r["bytes"]:
            net = (r["cpu_seconds"] - per_param * r["params"]) / r["bytes"] * 1e9
            text = f"{r['cpu_ns_per_byte']:>10.2f}{net:>10.2f}"
        else:
            text = f"{'-':>20}"
        print(
            f"{r['model']:<12}{r['world']:>7}{r['rank']:>7}{r['bytes'] / MIB:>10.2f}"
            f"{r['seconds']:>9.3f}{r['cpu_seconds']:>8.3f}{text}{r['rss_added'] / MIB:>10.1f}"
            f"{r['rss_over_bytes'] / MIB:>17.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama-8b,llama-70b,llama-405b")
    parser.add_argument("--worlds", default="1024,4096,16384")
    parser.add_argument("--tp", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-subprocess", action="store_true")
    parser.add_argument("--plan-only", action="store_true", help="skip the generation part")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    models, worlds = args.models.split(","), [int(w) for w in args.worlds.split(",")]
    with open("/proc/loadavg") as loadavg:
        print(f"load average at start: {loadavg.read().split()[:3]}; {os.cpu_count()} CPUs")
    result: dict[str, Any] = {"plan": [], "generate": []}
    processes: dict[tuple[str, int], dict[str, Any]] = {}
    if not args.no_subprocess:  # first: before this process imports torch
        result["import"] = _import_process()
        imp = result["import"]
        print(
            f"import shardinit.cli in a fresh process: {imp['import_s']:.2f} s wall, "
            f"{imp['import_cpu_s']:.2f} s CPU, peak RSS {imp['import_peak_rss'] / MIB:.0f} MiB"
        )
        for model in models:
            for world in worlds:
                processes[model, world] = _plan_process(model, world, args.tp, args.repeats)
    for model in models:
        for world in worlds:
            summary = byte_summary(plan_layout(param_table(model), world, args.tp))
            row = {
                "model": model,
                "world": world,
                "busiest": summary.max,
                "mean": summary.total / world,
                **_plan_in_process(model, world, args.tp),
                **processes.get((model, world), {}),
            }
            result["plan"].append(row)
    _print_plan_rows(result["plan"])
    for model in models if not args.plan_only else []:
        for world in worlds:
            for rank in (0, world // 2, world - 1):
                result["generate"].append(_generate(model, world, args.tp, rank, args.repeats))
    if result["generate"]:
        _print_generation_rows(result["generate"])
    with open("/proc/loadavg") as loadavg:
        print(f"\nload average at end: {loadavg.read().split()[:3]}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
