"""What a writer holds: its peak memory is its buffer above the imports, not the model
(a model of 192 MiB is written through a 4 MiB buffer by a fresh process whose peak RSS
grows by about the buffer); its threads are its share of the cores, and the idle
writers' share too where there are fewer files than writers; its hashing releases the
GIL, so the thread that writes and hashes a piece overlaps the next piece's generation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gil_ticker import ticks_inside

from shardinit import _core
from shardinit._integration.checkpoint import _sharing_idle_threads
from shardinit._program import Writer

MIB = 2**20

PEAK_SCRIPT = textwrap.dedent(
    """
    import sys, torch, shardinit
    from torch import nn

    def status_kib(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise KeyError(key)

    def model(width, depth):
        with torch.device("meta"):
            return nn.Sequential(*(nn.Linear(width, width, bias=False) for _ in range(depth)))

    buffer_bytes = int(sys.argv[2])
    # Warm up: imports, thread pools, code pages, the writer thread.
    shardinit.save_seed_checkpoint(model(64, 2), sys.argv[1] + "/warm", seed=0,
                                   buffer_bytes=buffer_bytes, progress=False)
    # Reset the peak (VmHWM) to the current RSS (Linux >= 4.0), so the warm-up's
    # imports do not count.
    open("/proc/self/clear_refs", "w").write("5")
    before = status_kib("VmHWM")
    shardinit.save_seed_checkpoint(model(2048, 6), sys.argv[1] + "/big", seed=0,
                                   buffer_bytes=buffer_bytes, progress=False)
    after = status_kib("VmHWM")
    print((after - before) * 1024)
    """
)


@pytest.mark.processes
def test_a_writers_peak_memory_is_its_buffer_not_the_model(tmp_path: Path) -> None:
    """96 MiB of float32 weights (6 x 2048 x 2048) through a 4 MiB buffer: the peak
    grows by at most the buffer and 24 MiB of slack (allocator, the plan, the writing
    thread). Shown to fail (2026-12-05) with a writer's buffer sized to twice its files
    instead of ``buffer_bytes`` (128 MiB measured with 192 MiB of weights)."""
    buffer_bytes = 4 * MIB
    result = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, str(tmp_path), str(buffer_bytes)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    grown = int(result.stdout.split()[-1])
    written = sum(p.stat().st_size for p in (tmp_path / "big").glob("*.safetensors"))
    assert written > 96 * MIB  # the model really is larger than the bound
    print(f"peak grew by {grown / MIB:.1f} MiB")
    assert grown <= buffer_bytes + 24 * MIB, grown


@pytest.mark.parametrize(
    ("threads", "world", "busy", "cores", "expected"),
    [
        (1, 2, 2, 2, 1),  # every writer busy: each keeps its share
        (1, 2, 1, 2, 2),  # one file, two writers: the busy one takes the idle one's core
        (2, 8, 2, 16, 8),
        (2, 8, 2, 6, 6),  # never more than the CPUs this process may use
        (4, 2, 1, 2, 4),  # nor fewer than it was given
        (1, 3, 0, 2, 1),  # nothing to write anywhere
    ],
)
def test_a_busy_writer_takes_the_idle_writers_threads(
    monkeypatch: pytest.MonkeyPatch, threads: int, world: int, busy: int, cores: int, expected: int
) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)))
    given = Writer(threads, 1 << 20)
    assert _sharing_idle_threads(given, world, busy=busy).threads == expected


def test_the_gil_is_released_while_a_piece_is_hashed() -> None:
    """While one thread hashes a 64 MiB piece (the core's ``flat_range_term``), another
    Python thread keeps running: with the GIL held no bytecode could run anywhere, so
    the ticker could record no time from 10 % to 60 % of the call (a proof, not a
    timing heuristic). The window ends well before the call's measured end: after the
    call returns, the caller waits for the GIL while the ticker holds it, which puts
    ticks late in the measured span even when the GIL was held throughout (a build
    without ``py.detach`` passed a window to 90 %; it fails this one). Up to 3
    attempts (a loaded machine may starve the ticker once); 5 ticks needed."""
    bits = np.arange(1 << 25, dtype=np.uint16)
    inside, span = ticks_inside(lambda: _core.flat_range_term(bits, 0), (0.1, 0.6))
    assert inside >= 5, (inside, span)


def test_hashing_refuses_what_is_not_raw_bits() -> None:
    with pytest.raises(TypeError, match="unsigned 8-, 16-, 32- or 64-bit"):
        _core.flat_range_term(np.zeros(4, dtype=np.float32), 0)
    with pytest.raises(TypeError, match="unsigned"):
        _core.flat_range_term("bits", 0)
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.flat_range_term(np.zeros(8, dtype=np.uint16)[::2], 0)
