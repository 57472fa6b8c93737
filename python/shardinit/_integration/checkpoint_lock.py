"""One run per checkpoint directory: an exclusive ``flock`` on ``DIR/.shardinit-lock``,
held for the run's whole life.

The kernel releases a flock when its holder dies (however it dies), so a lock left by a
dead run is simply taken: the pid and host written into the file only serve the
message a refused run prints. The holder removes the file when it ends, while still
holding the lock; a run that locked a file removed meanwhile sees another inode at the
path and tries again, so two runs never hold locks on two different files.

Within one thread the lock is taken once (``shardinit checkpoint`` takes it before
building the model, then ``save_seed_checkpoint`` finds it held; another thread of the
process is another run, and refused); the writer processes
of ``--workers N`` inherit the launcher's open file (its descriptor is named by
:data:`INHERITED_ENV`), and a flock on the same open file is theirs too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import ShardInitError

__all__ = ["INHERITED_ENV", "LOCK_NAME", "directory_lock", "inheritable_lock_fd"]

LOCK_NAME = ".shardinit-lock"
#: ``FD:PATH``: the lock a launcher holds for its writer processes.
INHERITED_ENV = "SHARDINIT_CHECKPOINT_LOCK"
#: Seconds a refused run waits for the holder to write its pid (it does so right after
#: taking the lock).
_HOLDER_WAIT_S = 0.5

#: Locks this process holds: the lock file's path -> its descriptor and the thread
#: whose run holds it.
_held: dict[Path, tuple[int, int]] = {}
_held_guard = threading.Lock()


@contextlib.contextmanager
def directory_lock(directory: Path) -> Iterator[None]:
    """Holds the exclusive lock of ``directory`` (which exists) for the ``with`` block.

    Raises:
        ShardInitError: another live run holds it (one line naming its pid and host).
    """
    path = (directory / LOCK_NAME).absolute()
    with _held_guard:
        holder = _held.get(path)
        if holder is not None and holder[1] != threading.get_ident():
            raise _refused(path)  # another thread's run, in this process
        if holder is not None or _inherited(path):
            mine = None  # this run, or the launcher of this writer, holds it already
        else:
            mine = _acquire(path)
            _held[path] = (mine, threading.get_ident())
    if mine is None:
        yield
        return
    try:
        yield
    finally:
        with _held_guard:
            del _held[path]
            with contextlib.suppress(OSError):
                path.unlink()  # still holding it: a waiting run finds the path gone, retries
            os.close(mine)


def inheritable_lock_fd(directory: Path) -> tuple[int, str]:
    """The held lock of ``directory`` as ``(fd, value of INHERITED_ENV)`` for writer
    processes (pass the descriptor to them)."""
    path = (directory / LOCK_NAME).absolute()
    fd = _held[path][0]
    return fd, f"{fd}:{path}"


def _acquire(path: Path) -> int:
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise ShardInitError(
                f"save_seed_checkpoint: path {path.parent} is not writable "
                f"(cannot create {path.name}: {error.strerror})"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refused(path) from None
        if _same_file(fd, path):
            break
        os.close(fd)  # its holder removed it between our open and our lock: again
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    return fd


def _refused(path: Path) -> ShardInitError:
    return ShardInitError(
        f"save_seed_checkpoint: path {path.parent} is being written by another run "
        f"({_holder(path)}); wait for it to end, or choose another directory"
    )


def _same_file(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(path: Path) -> str:
    """``pid P on host H`` as the holder wrote it (it writes right after locking)."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        try:
            fields = path.read_text().split()
        except OSError:
            fields = []
        if len(fields) == 2:
            return f"pid {fields[0]} on host {fields[1]}"
        if time.monotonic() > deadline:
            return "pid unknown"
        time.sleep(0.02)


def _inherited(path: Path) -> bool:
    """Whether this process inherited ``path``'s lock from its launcher."""
    value = os.environ.get(INHERITED_ENV, "")
    fd_text, _, locked = value.partition(":")
    if not fd_text.isdigit() or Path(locked) != path:
        return False
    fd = int(fd_text)
    try:
        if not _same_file(fd, path):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the same open file: ours already
    except OSError:
        return False
    return True
