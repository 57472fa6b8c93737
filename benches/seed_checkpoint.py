"""How fast is a seed checkpoint written, against the disk and against transformers?

In one run, on the same disk (``--dir``), for a bfloat16 Llama of about ``--size-gb``
GB (transformers' ``LlamaConfig``; under 1 GB width 1024, from 1 GB TinyLlama's
width 2048, 5632 and 4 key-value heads, so 2 GB is a ~1B Llama; as many layers as the
size allows):

* ``dd zeros``: ``dd if=/dev/zero bs=1M count=N conv=fdatasync`` of the same bytes;
* ``write phase``: ``shardinit.save_seed_checkpoint`` of the meta model, timed in its
  own process after the imports and the model's construction (plan, generation,
  writes, fsync, manifest); the same process reports its start-up (imports, config,
  the model on meta: what the command pays before its write phase) and its peak
  memory above that start-up (Linux ``VmHWM``: the writer's bound is its buffer),
  and the start-up's split: the planning (that start-up and the plan: what writer 0
  of ``--workers N``, or the one writer, does before the others can write) and another
  writer's start-up (a process that imports torch and shardinit's writer and unpickles
  the plan, as the command's other writers do while writer 0 plans);
* ``generation only``: the same number of bfloat16 normal values generated into one
  32 MiB buffer with every thread, nothing hashed or written: the write phase's floor
  on this CPU (its rate against ``dd``'s says whether the disk can be the bound);
* ``from_config + save_pretrained``: one process that imports transformers, builds the
  model on the CPU with its own init and saves it (what a user does without shardinit);
* ``shardinit checkpoint, N writer(s)``: the whole command, process start to exit, and
  the peak resident memory of its largest process (the launcher or a writer).

Each row also has its CPU seconds (user and system, every thread and process of it):
less sensitive to the other work on a shared machine than its seconds, and what the
seconds come to on a quiet one with as many cores.

Each row: seconds, GB/s, and its ratio to the row it is compared with, measured in
this run. The machine's load average is printed with the table (``uptime``): timings
on a shared machine are only as good as its quiet (``--repeat N`` runs every row N
times, interleaved, and keeps each row's fastest). ``--json PATH`` also writes them.

Usage:
    nice .venv/bin/python benches/seed_checkpoint.py [--size-gb 0.5] [--workers 1,2]
        [--repeat 1] [--dir DIR] [--json benches/results/seed_checkpoint.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VOCAB = 32000
#: (hidden, intermediate, attention heads, key-value heads): under 1 GB a narrow Llama,
#: from 1 GB TinyLlama-1.1B's shape (2.2 GB at its 22 layers).
NARROW, TINYLLAMA = (1024, 4096, 16, 16), (2048, 5632, 32, 4)


def _config(size_gb: float) -> dict[str, Any]:
    hidden, intermediate, heads, kv_heads = NARROW if size_gb < 1 else TINYLLAMA
    kv = hidden // heads * kv_heads
    layer = (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * intermediate + 2 * hidden) * 2
    embeddings = 2 * VOCAB * hidden * 2 + hidden * 2
    layers = max(1, round((size_gb * 1e9 - embeddings) / layer))
    return {
        "model_type": "llama", "hidden_size": hidden, "intermediate_size": intermediate,
        "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "vocab_size": VOCAB, "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "dtype": "bfloat16",
    }  # fmt: skip


# Prints: the write phase's seconds, the start-up's seconds (imports, config, model on
# meta), the peak memory above the start-up (bytes), the write phase's CPU seconds (all
# threads), and the plan's seconds (the write phase's first part: what writer 0 of the
# command does before the other writers can start writing). Pickles the plan to
# argv[3], for the writer start-up's row.
_WRITE_PHASE = """
import time
begin = time.perf_counter()
import pickle, sys, torch, transformers, shardinit
from shardinit._integration.checkpoint import plan_seed_checkpoint, write_seed_checkpoint
config = transformers.AutoConfig.from_pretrained(sys.argv[1])
with torch.device("meta"):
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)

def peak_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

open("/proc/self/clear_refs", "w").write("5")  # the peak from here on (Linux >= 4.0)
before = peak_kib()
start, cpu = time.perf_counter(), time.process_time()
plan = plan_seed_checkpoint(model, seed=0, init_fn=model.init_weights)
planned = time.perf_counter()
write_seed_checkpoint(plan, sys.argv[2], progress=False)
print(time.perf_counter() - start, start - begin, (peak_kib() - before) * 1024,
      time.process_time() - cpu, planned - start)
with open(sys.argv[3], "wb") as out:
    pickle.dump(plan, out)
"""

# A writer of ``--workers N`` other than writer 0, up to the plan in hand: the process,
# its imports (torch, shardinit's writer: no transformers) and the plan unpickled. The
# command's writers do this while writer 0 plans.
_WRITER_STARTUP = """
import pickle, sys
import torch.distributed
from shardinit.cli import _checkpoint_worker
from shardinit._integration.checkpoint import write_seed_checkpoint
with open(sys.argv[1], "rb") as handed:
    pickle.load(handed)
assert "transformers" not in sys.modules
"""


# The floor of the write phase on this CPU: the same number of bfloat16 normal values
# (what Llama's init draws for nearly every byte), generated a 32 MiB piece at a time
# into one buffer with every thread, nothing hashed or written.
_GENERATION = """
import sys, time, torch, shardinit
count, piece = int(sys.argv[1]), 16 * 2**20
spec = shardinit.ParamSpec("w", (count,), torch.bfloat16, shardinit.init.normal(0, 0.02), seed=0)
buffer = torch.empty(piece, dtype=torch.bfloat16)
start, cpu = time.perf_counter(), time.process_time()
for first in range(0, count, piece):
    last = min(count, first + piece)
    shardinit.init_flat(spec, first, last, out=buffer[: last - first])
print(time.perf_counter() - start, time.process_time() - cpu)
"""

_SAVE_PRETRAINED = """
import sys, torch, transformers
config = transformers.AutoConfig.from_pretrained(sys.argv[1])
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
model.save_pretrained(sys.argv[2])
"""


def _timed(command: list[str]) -> tuple[float, str, int, float]:
    """Seconds from start to exit, stdout, the peak resident memory (bytes) of the
    largest of its processes and their CPU seconds (user and system: wait4's rusage
    covers the descendants it reaped)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{command[:4]} failed:\n{err.read()[-2000:]}")
        cpu = usage.ru_utime + usage.ru_stime
        return seconds, out.read(), usage.ru_maxrss * 1024, cpu


def _nbytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.safetensors"))


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=0.5)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of every row; each row keeps its fastest")  # fmt: skip
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="seed-bench-", dir=args.dir))
    try:
        config_dir = root / "config"
        config_dir.mkdir()
        (config_dir / "config.json").write_text(json.dumps(_config(args.size_gb)))
        config = str(config_dir / "config.json")
        workers = [int(w) for w in args.workers.split(",")]
        load_before = _load()
        print(f"load before: {load_before}", flush=True)
        rounds = [_round(root, config, workers) for _ in range(max(1, args.repeat))]
        rows = rounds[0]
        for row_index in range(len(rows)):  # the fastest of the rounds, interleaved
            every = [found[row_index] for found in rounds]
            rows[row_index] = dict(min(every, key=lambda row: row["s"]))
            rows[row_index]["all_s"] = [row["s"] for row in every]
        nbytes = rows[1]["bytes"]
        load = _load()
        print(f"load after: {load}")
        _print(rows, args.size_gb, nbytes)
        goals = _goals(rows)
        for goal, (figure, met) in goals.items():
            print(f"{goal}: {figure}: {'met' if met else 'NOT met'}")
        if args.json:
            document = {"bytes": nbytes, "load_before": load_before, "load_after": load,
                        "rounds": len(rounds), "rows": rows, "goals": goals}  # fmt: skip
            Path(args.json).write_text(json.dumps(document, indent=1) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _round(root: Path, config: str, workers: list[int]) -> list[dict[str, Any]]:
    """One run of every row, in the table's order."""
    python = sys.executable
    rows: list[dict[str, Any]] = []
    plan_file = str(root / "plan.pickle")
    printed = _timed([python, "-c", _WRITE_PHASE, config, str(root / "api"), plan_file])[1]
    write_s, startup_s, above, write_cpu, plan_s = printed.split()
    writer_s, _, _, writer_cpu = _timed([python, "-c", _WRITER_STARTUP, plan_file])
    startup = {"startup_s": float(startup_s), "plan_s": float(plan_s),
               "writer_startup_s": writer_s, "writer_startup_cpu": writer_cpu}  # fmt: skip
    nbytes = _nbytes(root / "api")
    shutil.rmtree(root / "api")
    mib = -(-nbytes // 2**20)
    dd_s, _, _, dd_cpu = _timed(["dd", "if=/dev/zero", f"of={root / 'zeros'}", "bs=1M",
                                 f"count={mib}", "conv=fdatasync"])  # fmt: skip
    (root / "zeros").unlink()
    rows.append({"run": "dd zeros (conv=fdatasync)", "s": dd_s, "bytes": mib * 2**20,
                 "cpu": dd_cpu})  # fmt: skip
    rows.append({"run": "write phase, 1 writer", "s": float(write_s), "bytes": nbytes, "vs": 0,
                 **startup, "peak_above_startup": int(above), "cpu": float(write_cpu)})  # fmt: skip
    generated = _timed([python, "-c", _GENERATION, str(nbytes // 2)])[1].split()
    rows.append({"run": "generation only (no hashing, no disk)", "s": float(generated[0]),
                 "bytes": nbytes, "vs": 0, "cpu": float(generated[1])})  # fmt: skip
    hf_s, _, hf_peak, hf_cpu = _timed([python, "-c", _SAVE_PRETRAINED, config,
                                       str(root / "hf")])  # fmt: skip
    shutil.rmtree(root / "hf")
    rows.append({"run": "from_config + save_pretrained", "s": hf_s, "bytes": nbytes,
                 "peak": hf_peak, "cpu": hf_cpu})  # fmt: skip
    hf_row = len(rows) - 1
    one_row = None
    for count in workers:
        out = str(root / f"w{count}")
        command = [python, "-m", "shardinit", "checkpoint", "--hf-config", config,
                   "--out", out, "--workers", str(count), "--no-progress"]  # fmt: skip
        seconds, _, peak, cpu = _timed(command)
        shutil.rmtree(root / f"w{count}")
        rows.append({"run": f"shardinit checkpoint, {count} writer(s)", "s": seconds,
                     "bytes": nbytes, "vs": hf_row if one_row is None else one_row,
                     "peak": peak, "cpu": cpu})  # fmt: skip
        one_row = one_row if one_row is not None else len(rows) - 1
    return rows


#: A writer's peak memory above its start-up may exceed its buffer by this much: the
#: plan, the allocator, the writing thread (tests/checkpoint allows 24 MiB).
_MEMORY_SLACK = 32 * 2**20
#: save_seed_checkpoint's default buffer.
_BUFFER = 64 * 2**20


def _goals(rows: list[dict[str, Any]]) -> dict[str, tuple[str, bool]]:
    """Issue 47's goals, from this run's rows: each with its figure and verdict."""
    by_run = {row["run"]: row for row in rows}
    rate = {run: row["bytes"] / row["s"] for run, row in by_run.items()}
    one = by_run.get("shardinit checkpoint, 1 writer(s)")
    two = by_run.get("shardinit checkpoint, 2 writer(s)")
    write = by_run["write phase, 1 writer"]
    ratio = rate["write phase, 1 writer"] / rate["dd zeros (conv=fdatasync)"]
    goals = {"write phase >= 0.8x dd's rate": (f"{ratio:.2f}x", ratio >= 0.8)}
    if one is not None:
        ratio = one["s"] / by_run["from_config + save_pretrained"]["s"]
        goals["command (1 writer) <= 0.5x from_config + save_pretrained"] = (
            f"{ratio:.2f}x",
            ratio <= 0.5,
        )
    if one is not None and two is not None:
        ratio = two["s"] / one["s"]
        goals["2 writers no slower than 1"] = (f"{ratio:.2f}x", ratio <= 1.0)
    above = write["peak_above_startup"]
    goals["writer's peak memory above its start-up <= its buffer + 32 MiB"] = (
        f"{above / 2**20:.0f} MiB (buffer {_BUFFER >> 20} MiB)",
        above <= _BUFFER + _MEMORY_SLACK,
    )
    return goals


def _print(rows: list[dict[str, Any]], size_gb: float, nbytes: int) -> None:
    print(f"\nbfloat16 Llama of {nbytes / 1e9:.2f} GB (--size-gb {size_gb})\n")
    print("| run | s | GB/s | ratio | against | CPU s | peak RSS MiB |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for row in rows:
        rate = row["bytes"] / row["s"] / 1e9
        if "vs" in row:
            other = rows[row["vs"]]
            if row["run"].startswith(("write phase", "generation")):
                ratio = f"{(row['bytes'] / row['s']) / (other['bytes'] / other['s']):.2f}x rate"
            else:
                ratio = f"{row['s'] / other['s']:.2f}x time"
            against = other["run"]
        else:
            ratio, against = "", ""
        peak = f"{row['peak'] / 2**20:.0f}" if "peak" in row else ""
        cells = f"{row['s']:.2f} | {rate:.3f} | {ratio} | {against} | {row['cpu']:.2f} | {peak}"
        print(f"| {row['run']} | {cells} |")
    write = next(row for row in rows if row["run"].startswith("write phase"))
    print(f"\nthe write phase's process: start-up (imports, config, model on meta) "
          f"{write['startup_s']:.2f} s; peak memory above it "
          f"{write['peak_above_startup'] / 2**20:.0f} MiB")  # fmt: skip
    planning = write["startup_s"] + write["plan_s"]
    print(f"the start-up's split: planning (writer 0, or the one writer: start-up "
          f"{write['startup_s']:.2f} s + plan {write['plan_s']:.2f} s) {planning:.2f} s; "
          f"another writer's start-up (process start to the plan unpickled, no "
          f"transformers, overlapping the planning) {write['writer_startup_s']:.2f} s, "
          f"{write['writer_startup_cpu']:.2f} CPU s")  # fmt: skip


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
