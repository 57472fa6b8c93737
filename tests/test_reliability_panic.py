"""No Rust panic crosses into Python: the glue catches it and raises
``shardinit.InternalError`` (a RuntimeError), and the process stays usable.

No test-only hook is needed: the core panics (an ``expect``) when the operating system
refuses to start its worker threads. A subprocess lowers its address-space limit just
above what it already uses, so the 2 MiB stacks of a new thread pool cannot be mapped,
and asks for 64 threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import resource, torch, shardinit
    spec = shardinit.ParamSpec("panic.w", (1 << 20,), seed=0)   # > one 64 Ki-element chunk
    out = torch.empty(1 << 20)
    shardinit.set_num_threads(1)
    reference = shardinit.full(spec)                            # single-threaded

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    shardinit.set_num_threads(64)                               # a pool not built yet
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (32 << 20), hard))
    try:
        shardinit.init_flat(spec, 0, 1 << 20, out=out)
    except shardinit.InternalError as error:
        caught = error
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert isinstance(caught, RuntimeError)
    print("MESSAGE", str(caught).splitlines()[0])

    # Still usable afterwards, with the same values (and the pool cache not poisoned).
    shardinit.set_num_threads(3)
    assert torch.equal(shardinit.full(spec), reference)
    shardinit.set_num_threads(64)
    assert torch.equal(shardinit.full(spec), reference)
    print("OK")
    """
)


def test_a_panic_in_the_core_becomes_internal_error() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "OK"
    message = next(line for line in lines if line.startswith("MESSAGE "))
    assert message.startswith("MESSAGE internal error in shardinit (please report): ")
    assert "failed to spawn shardinit worker threads" in message
    # The panic was reported by Rust's hook on stderr, and nothing aborted.
    assert "panicked at" in result.stderr
