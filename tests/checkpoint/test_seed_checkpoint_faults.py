"""Seed checkpoints under faults: one run per directory (two started together: exactly
one writes, the other is refused in one line naming the first, and the bytes are a lone
run's); a full disk (a real one: a small tmpfs in a user namespace) and a killed writer
end in one line naming the cause, leave no partial file, and a rerun finishes the same
bytes; bad arguments are refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from seed_models import BUFFER, SEED, SHARD, file_digests, meta_tiny

import shardinit
from shardinit import ShardInitError
from shardinit._integration.checkpoint_files import shard_size_bytes
from shardinit.cli import run

#: How long each writer of a concurrent pair holds the directory after taking it: the
#: other one starts within that time.
_HOLD_S = 0.3


def _save(path: Path, **kwargs: object) -> Path:
    return shardinit.save_seed_checkpoint(
        meta_tiny(), path, seed=SEED, max_shard_size=SHARD, buffer_bytes=BUFFER, **kwargs
    )


@pytest.fixture(scope="module")
def lone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return file_digests(_save(tmp_path_factory.mktemp("lone") / "ckpt"))


def _pair_in_threads(path: Path) -> list[str | None]:
    """Two runs on ``path`` started together; each one's error (None: it wrote)."""
    start = threading.Barrier(2)
    outcome: list[str | None] = [None, None]

    def hold(done: int, total: int) -> None:
        if done == 0:
            time.sleep(_HOLD_S)  # holding the lock: the other run starts meanwhile

    def one(index: int) -> None:
        start.wait()
        try:
            _save(path, progress=hold)
        except ShardInitError as error:
            outcome[index] = str(error)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcome


@pytest.mark.parametrize(
    "pairs", [pytest.param(15, id="15"), pytest.param(60, id="60", marks=pytest.mark.slow)]
)
def test_two_runs_together_one_writes_one_is_refused(
    tmp_path: Path, lone: dict[str, str], pairs: int
) -> None:
    for trial in range(pairs):
        path = tmp_path / f"ckpt{trial}"
        outcome = _pair_in_threads(path)
        refused = [error for error in outcome if error is not None]
        assert len(refused) == 1, outcome
        assert (
            f"path {path} is being written by another run (pid {os.getpid()} on host" in refused[0]
        )
        assert "\n" not in refused[0]
        assert file_digests(path) == lone


_PROCESS_RUN = """
import sys, time
sys.path.insert(0, {helpers!r})
import shardinit
from seed_models import BUFFER, SEED, SHARD, meta_tiny
def hold(done, total):
    if done == 0:
        time.sleep({hold})
try:
    shardinit.save_seed_checkpoint(meta_tiny(), {path!r}, seed=SEED, max_shard_size=SHARD,
                                   buffer_bytes=BUFFER, progress=hold)
    print("wrote")
except shardinit.ShardInitError as error:
    print(error)
"""


# Processes under --runslow (about 17 s a pair on 2 cores); make test runs the thread
# pairs above.
@pytest.mark.parametrize(
    "pairs",
    [
        pytest.param(1, id="1", marks=pytest.mark.slow),
        pytest.param(10, id="10", marks=pytest.mark.slow),
    ],
)
def test_two_processes_together_one_writes_one_is_refused(
    tmp_path: Path, lone: dict[str, str], pairs: int
) -> None:
    helpers = str(Path(__file__).parent)
    for trial in range(pairs):
        path = tmp_path / f"ckpt{trial}"
        # Both import torch first (seconds): the hold covers the difference in start.
        script = _PROCESS_RUN.format(helpers=helpers, path=str(path), hold=5.0)
        procs = [
            subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        said = sorted(proc.communicate(timeout=300)[0].strip() for proc in procs)
        pids = {str(proc.pid) for proc in procs}
        assert said[1] == "wrote", said
        assert f"path {path} is being written by another run (pid " in said[0], said
        assert said[0].split("(pid ")[1].split()[0] in pids
        assert file_digests(path) == lone


def test_a_lock_left_by_a_dead_run_is_taken(tmp_path: Path, lone: dict[str, str]) -> None:
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / ".shardinit-lock").write_text("999999999 elsewhere\n")  # its holder is gone
    _save(path)
    assert file_digests(path) == lone
    assert not (path / ".shardinit-lock").exists()


_FULL_DISK = """
import json, subprocess, sys
mount, ckpt, fmt = sys.argv[1:4]
def run():
    command = [sys.executable, "-m", "shardinit", "checkpoint", "--model", "tiny", "--out",
               ckpt, "--seed", "5", "--format", fmt, "--no-progress"]
    done = subprocess.run(command, capture_output=True, text=True)
    return done.returncode, done.stderr
import os
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", mount], check=True)
first = run()
left = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []
subprocess.run(["mount", "-o", "remount,size=8m", mount], check=True)
second = run()
digests = {}
import hashlib
for name in sorted(os.listdir(ckpt)):
    full = os.path.join(ckpt, name)
    if os.path.isfile(full):
        digests[name] = hashlib.sha256(open(full, "rb").read()).hexdigest()
print(json.dumps({"first": first, "left": left, "second": second, "digests": digests}))
"""


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-rm", "sh", "-c", "mount -t tmpfs tmpfs /mnt"], capture_output=True
    )
    return probe.returncode == 0


# DCP in make test; safetensors (about a minute on 2 cores: a run, the fault, a rerun) under
# --runslow.
@pytest.mark.processes
@pytest.mark.parametrize("format", [pytest.param("safetensors", marks=pytest.mark.slow), "dcp"])
def test_a_full_disk_is_one_line_leaves_nothing_and_a_rerun_finishes(
    tmp_path: Path, format: str
) -> None:
    if not _unshare_works():
        pytest.skip("no user namespaces here (unshare -rm): cannot mount a small tmpfs")
    mount = tmp_path / "mnt"
    mount.mkdir()
    ckpt = mount / "ckpt"
    result = subprocess.run(
        ["unshare", "-rm", sys.executable, "-c", _FULL_DISK, str(mount), str(ckpt), format],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    found = json.loads(result.stdout)
    code, err = found["first"]
    assert code == 1, err
    assert err.count("\n") == 1 and "No space left on device (ENOSPC)" in err, err
    assert err.startswith("shardinit checkpoint: save_seed_checkpoint: "), err
    assert found["left"] == [".shardinit-checkpoint"], found["left"]  # the plan only
    assert found["second"][0] == 0, found["second"]
    assert run(["checkpoint", "--model", "tiny", "--out", str(tmp_path / "lone"), "--seed", "5",
                "--format", format, "--no-progress"]) == 0  # fmt: skip
    lone = file_digests(tmp_path / "lone")
    if format == "dcp":  # its files depend on the writer's plan's uuid; the values do not
        lone = {name: d for name, d in lone.items() if name == "shardinit-manifest.json"}
        found["digests"] = {n: d for n, d in found["digests"].items() if n in lone}
    assert found["digests"] == lone


def test_a_read_only_file_system_is_one_line(tmp_path: Path) -> None:
    if not _unshare_works():
        pytest.skip("no user namespaces here (unshare -rm): cannot mount a read-only tmpfs")
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = (
        f"mount -t tmpfs -o ro tmpfs {mount} && {sys.executable} -m shardinit checkpoint "
        f"--model tiny --out {mount}/ckpt"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"shardinit checkpoint: save_seed_checkpoint: path {mount}/ckpt cannot be created: "
        "Read-only file system (EROFS)\n"
    )


def _rank_pid(parent: int, rank: int) -> int | None:
    """The pid of the writer ``rank`` that ``parent`` started, once it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(ppid) == parent and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


@pytest.mark.processes
def test_a_killed_writer_is_named_with_its_signal(tmp_path: Path) -> None:
    out = tmp_path / "ckpt"
    command = [sys.executable, "-m", "shardinit", "checkpoint", "--model", "tiny", "--workers",
               "2", "--out", str(out), "--no-progress"]  # fmt: skip
    cli = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    victim = None
    while victim is None and time.monotonic() < deadline and cli.poll() is None:
        victim = _rank_pid(cli.pid, 1)
        time.sleep(0.05)
    assert victim is not None, "writer 1 never started"
    os.kill(victim, signal.SIGKILL)
    err = cli.communicate(timeout=300)[1]
    assert cli.returncode == 1
    assert err.startswith("shardinit checkpoint: writer 1 of 2 killed by SIGKILL"), err
    assert err.count("\n") == 1, err
    left = [p.name for p in out.iterdir() if p.is_file()] if out.exists() else []
    assert left == [], left  # no partial file, no lock


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1000000", 1_000_000), ("5GB", 5 * 10**9), ("100KB", 100_000), (2048, 2048)],
)
def test_max_shard_size_takes_bytes_and_sizes(text: object, expected: int) -> None:
    assert shard_size_bytes(text) == expected


@pytest.mark.parametrize("text", ["0KB", "-5GB", "0", "-3", "5 parsecs", "0.0000001KB"])
def test_max_shard_size_at_most_zero_is_refused(
    text: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["checkpoint", "--model", "tiny", "--out", str(tmp_path / "o")]
    assert run([*argv, f"--max-shard-size={text}"]) == 2  # a usage error
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "max_shard_size must be a positive number of bytes" in last, last
    assert not (tmp_path / "o").exists()


def test_too_many_workers_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["checkpoint", "--model", "tiny", "--out", str(tmp_path / "o")]
    assert run([*argv, "--workers", "10000"]) == 2  # a usage error
    err = capsys.readouterr().err
    assert "expected at most" in err and "got 10000" in err and "a writer failed" not in err
