"""The project's one launcher of local gloo worker processes: the CLI's demo and
fingerprint, the benchmarks and the multi-rank tests all start their ranks here.

Workers are ``python -m <module>`` (or ``python <script>.py``) subprocesses that
rendezvous on a free TCP port of 127.0.0.1 only, get their rank from ``RANK`` /
``WORLD_SIZE`` and write one JSON result file each into a temporary directory.

It ships in the wheel because users need it: ``shardinit demo`` and ``shardinit
fingerprint --world`` start their ranks with it. The tests and benchmarks reuse it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "RANK_BYTES",
    "LaunchError",
    "exit_worker",
    "free_port",
    "launch",
    "max_local_ranks",
    "physical_memory",
    "threads_per_rank",
]


class LaunchError(RuntimeError):
    """A worker process failed or timed out: the first line says which rank and how
    (its signal or exit status), the next lines are its last lines of stderr."""


def exit_worker(code: int) -> NoReturn:
    """Ends a worker process that has written its result and destroyed its process
    group, skipping the interpreter's teardown: on a loaded machine, torch's gloo
    teardown has aborted a finished rank there ("terminate called without an active
    exception"), failing a run whose results were complete."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def join_worker_group() -> tuple[int, int]:
    """In a worker started by :func:`launch`: the torch and core thread counts its
    launcher gave it, and the gloo group joined; returns ``(rank, world)``."""
    import torch
    import torch.distributed as dist

    from ..shard import set_num_threads

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return rank, world


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


#: Memory one local rank needs: a Python process with torch and gloo, the built-in
#: models' ranks peak at about 720 MiB of RSS (``shardinit demo`` reports it), of which
#: torch's shared libraries are a part every rank shares.
RANK_BYTES = 512 * 2**20


#: Where a container's memory limit is read (cgroup v2, then v1); "max" or a huge v1
#: value means none.
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def physical_memory() -> int:
    """Bytes of memory this process's ranks may use: the machine's physical memory, or
    its container's (cgroup's) memory limit where that is lower."""
    memory: int = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            memory = min(memory, int(text))
    return memory


def max_local_ranks() -> int:
    """The most ranks :func:`launch` starts on this machine: as many as its memory holds
    at :data:`RANK_BYTES` each (at least 1). More would swap or be killed for memory
    long before gloo's rendezvous completes, and a mistyped world size must not start
    an unbounded number of processes."""
    return max(1, physical_memory() // RANK_BYTES)


def threads_per_rank(world: int) -> int:
    """CPU threads each of ``world`` local ranks may use without oversubscribing."""
    return max(1, (os.cpu_count() or 1) // world)


def _command(module: str) -> list[str]:
    """``python -m module``, or ``python path`` for a script path ending in ``.py``."""
    return [sys.executable, module] if module.endswith(".py") else [sys.executable, "-m", module]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def launch(
    module: str,
    world: int,
    args: Sequence[str],
    *,
    timeout: float = 600.0,
    on_line: Callable[[str], None] | None = None,
    attempts: int = 2,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """Runs ``python -m module args --out DIR`` (``python module ...`` for a ``.py``
    path) as ``world`` ranks and returns the JSON
    object each rank wrote to ``DIR/rank<r>.json``, by rank.

    Args:
        module: the worker module (it must call ``init_process_group`` with
            ``MASTER_ADDR``/``MASTER_PORT`` from the environment).
        world: number of ranks.
        args: extra command-line arguments for every rank.
        timeout: seconds before the workers are killed.
        on_line: called with each line rank 0 prints (progress); default: discarded.
        attempts: tries (a new port each) when the rendezvous port was taken meanwhile.
        env: the ranks' environment (the launcher adds the rendezvous and rank
            variables); default: this process's, as it is now (a caller in another
            thread passes a copy taken before, e.g. with its own ``PYTHONPATH``).

    Returns:
        One dict per rank.

    Raises:
        LaunchError: ``world`` beyond :func:`max_local_ranks`, or a rank exited non-zero,
            wrote no result or ran past ``timeout``.
    """
    if not 1 <= world <= max_local_ranks():
        raise LaunchError(
            f"world must be in [1, {max_local_ranks()}] on this machine (its memory holds "
            f"that many ranks of about {RANK_BYTES >> 20} MiB each), got {world}"
        )
    environ = dict(os.environ if env is None else env)
    for attempt in range(attempts):
        try:
            return _launch_once(module, world, args, timeout, on_line, environ, pass_fds)
        except LaunchError as error:
            if "address already in use" not in str(error).lower() or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _launch_once(
    module: str,
    world: int,
    args: Sequence[str],
    timeout: float,
    on_line: Callable[[str], None] | None,
    environ: Mapping[str, str],
    pass_fds: Sequence[int],
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="shardinit-") as tmp:
        out_dir = Path(tmp)
        command = [*_command(module), *args, "--out", str(out_dir)]
        procs = _start_ranks(command, world, out_dir, environ, pass_fds)
        try:
            first_failed = _wait_for_ranks(
                procs, out_dir, time.monotonic() + timeout, timeout, on_line
            )
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
        return _collect_results(procs, out_dir, first_failed)


def _start_ranks(
    command: list[str],
    world: int,
    out_dir: Path,
    environ: Mapping[str, str],
    pass_fds: Sequence[int] = (),
) -> list[subprocess.Popen[str]]:
    """Starts ``world`` ranks of ``command`` in ``environ``; rank 0's stdout is piped
    (progress), every rank's stderr goes to ``out_dir/rank<r>.stderr``."""
    port = free_port()
    threads = threads_per_rank(world)
    procs: list[subprocess.Popen[str]] = []
    for rank in range(world):
        env = dict(environ)
        env.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(rank),
            OMP_NUM_THREADS=str(threads),
            PYTHONUNBUFFERED="1",
        )
        stdout: Any = subprocess.PIPE if rank == 0 else subprocess.DEVNULL
        with (out_dir / f"rank{rank}.stderr").open("w") as stderr:
            procs.append(
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                    text=True,
                    pass_fds=tuple(pass_fds),
                )
            )
    return procs


#: Seconds the other ranks get to end by themselves after one failed (they usually fail
#: at their next collective), before they are killed.
_GRACE_S = 10.0


def _wait_for_ranks(
    procs: list[subprocess.Popen[str]],
    out_dir: Path,
    deadline: float,
    timeout: float,
    on_line: Callable[[str], None] | None,
) -> int | None:
    """Forwards rank 0's lines to ``on_line`` and waits for every rank until
    ``deadline`` (``time.monotonic()``); returns the first rank seen failing (None if
    none did). After one fails the others get :data:`_GRACE_S`, then are killed: a
    rank waiting on its dead peer must not hold the run until the timeout.

    Raises:
        LaunchError: a rank ran past the deadline.
    """
    reader = threading.Thread(target=_forward, args=(procs[0], on_line), daemon=True)
    reader.start()
    first_failed: int | None = None
    while True:
        codes = [proc.poll() for proc in procs]
        if first_failed is None:
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                first_failed = failed[0]
                deadline = min(deadline, time.monotonic() + _GRACE_S)
        if all(code is not None for code in codes):
            break
        if time.monotonic() > deadline:
            if first_failed is not None:
                break  # the rest are killed by the caller
            rank = next(r for r, code in enumerate(codes) if code is None)
            raise LaunchError(
                f"rank {rank} of {len(procs)} ran past {timeout:.0f} s\n"
                + _tail(out_dir / f"rank{rank}.stderr")
            )
        time.sleep(0.05)
    reader.join(timeout=1.0)
    return first_failed


def _forward(proc: subprocess.Popen[str], on_line: Callable[[str], None] | None) -> None:
    if proc.stdout is None:
        return
    try:
        for line in proc.stdout:
            if on_line is not None:
                on_line(line.rstrip("\n"))
    except (OSError, ValueError):  # closed when the rank was killed
        return


def exit_text(returncode: int) -> str:
    """``killed by SIGKILL`` or ``exited with status 3``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


def _collect_results(
    procs: list[subprocess.Popen[str]], out_dir: Path, first_failed: int | None
) -> list[dict[str, Any]]:
    """Each rank's JSON result, by rank.

    Raises:
        LaunchError: a rank exited non-zero or wrote no result (the first that failed:
            the others usually just lost their peer).
    """
    world = len(procs)
    if first_failed is not None:
        rank = first_failed
        raise LaunchError(
            f"rank {rank} of {world} {exit_text(procs[rank].returncode)}\n"
            + _tail(out_dir / f"rank{rank}.stderr")
        )
    results = []
    for rank in range(world):
        path = out_dir / f"rank{rank}.json"
        if not path.exists():
            raise LaunchError(f"rank {rank} of {world} wrote no result")
        results.append(json.loads(path.read_text()))
    return results
