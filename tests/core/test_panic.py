"""No Rust panic crosses into Python: the glue catches it and raises
``shardinit.InternalError`` (a RuntimeError), and the process stays usable. And the
operating system refusing worker threads is a clear error, not a panic."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import shardinit
from shardinit import _core


def test_a_panic_in_the_core_becomes_internal_error() -> None:
    # `_panic_for_test` panics inside the same GIL-released, catch_unwind-wrapped path
    # that every fill takes.
    with pytest.raises(shardinit.InternalError, match=r"please report.*boom at 42") as caught:
        _core._panic_for_test("boom at 42")
    assert isinstance(caught.value, RuntimeError)
    # The interpreter and the core are still usable, with the same values.
    spec = shardinit.ParamSpec("after.panic", (300, 7), seed=1)
    assert torch.equal(shardinit.init_shard(spec, 1, 2), shardinit.full(spec)[150:])


THREAD_LIMIT_SCRIPT = textwrap.dedent(
    """
    import resource, torch, shardinit
    spec = shardinit.ParamSpec("threads.w", (1 << 20,), seed=0)   # > one 64 Ki chunk
    out = torch.empty(1 << 20)
    shardinit.set_num_threads(1)
    reference = shardinit.full(spec)                             # single-threaded

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    shardinit.set_num_threads(64)                                # a pool not built yet
    # Just above what the process uses: the stacks of 64 new threads cannot be mapped.
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (32 << 20), hard))
    try:
        shardinit.init_flat(spec, 0, 1 << 20, out=out)
    except RuntimeError as error:
        caught = error
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert type(caught) is RuntimeError, type(caught)
    print("MESSAGE", str(caught).splitlines()[0])

    # Still usable afterwards, with the same values (and no broken pool cached).
    shardinit.set_num_threads(3)
    assert torch.equal(shardinit.full(spec), reference)
    shardinit.set_num_threads(64)
    assert torch.equal(shardinit.full(spec), reference)
    print("OK")
    """
)


def test_refused_worker_threads_are_a_clear_error() -> None:
    result = subprocess.run(
        [sys.executable, "-c", THREAD_LIMIT_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "OK"
    message = next(line for line in lines if line.startswith("MESSAGE "))
    assert message.startswith("MESSAGE could not start 64 worker threads"), message
    assert "shardinit.set_num_threads" in message
    assert "panicked" not in result.stderr
