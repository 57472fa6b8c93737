"""A checkpoint file's bytes, written in order from a writer's buffer, straight to the
disk where the file system allows it (``O_DIRECT``), else through the page cache.

Why direct: a writer is bound by its CPU (generation takes most of it), and a write
through the page cache costs CPU that generation then lacks: the copy into the cache,
and the kernel's writeback of it (measured on a 2-core VM: 0.17-0.78 s of system time
per 512 MiB buffered, 0.03 s direct). A direct write goes from the buffer to the disk.

Its rule: the memory address, the length and the file offset of each write are
multiples of :data:`DIRECT_ALIGN`. The caller fills a piece into an aligned slot of
its buffer at ``lead`` (the file position's remainder modulo the alignment, see
:meth:`SequentialFile.lead`), and :meth:`SequentialFile.put` puts the file's bytes
before it in the block (kept in :attr:`SequentialFile.tail`) in front of it, writes the
whole blocks, and keeps the rest for the next piece; the last partial block is written
through the page cache at the end. The bytes in the file are the same either way.
Where a direct write is refused (``EINVAL``: a file system or device with other
rules), the file goes on through the page cache, and nothing but the speed changes.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from pathlib import Path

import torch

__all__ = ["DIRECT_ALIGN", "SLOTS", "SequentialFile", "aligned_buffer", "aligned_slots"]

#: The alignment of direct writes: the largest logical block size of common disks
#: (4 KiB; 512-byte devices accept it too), and the page size.
DIRECT_ALIGN = 4096


def aligned_buffer(nbytes: int) -> torch.Tensor:
    """A uint8 tensor of ``nbytes`` whose first byte is page-aligned (anonymous memory,
    its pages taken as they are first written: a bound, not an allocation)."""
    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.uint8)


#: Slots of a writer's buffer: one is filled while the others wait to be hashed and
#: written. More than two, so that the generation runs ahead over a write that takes
#: longer than the others; not many, so that a piece (a quarter of the default 64 MiB)
#: stays large for the disk and the first piece's generation and the last one's write,
#: which overlap nothing, stay short.
SLOTS = 4


def aligned_slots(buffer: torch.Tensor) -> list[torch.Tensor]:
    """:data:`SLOTS` equal slots of ``buffer`` (from :func:`aligned_buffer`), each a
    multiple of :data:`DIRECT_ALIGN` long and starting at an aligned address."""
    size = buffer.numel() // SLOTS // DIRECT_ALIGN * DIRECT_ALIGN
    assert size > DIRECT_ALIGN, "a buffer of at least 2 blocks a slot"
    return [buffer[size * k : size * (k + 1)] for k in range(SLOTS)]


class SequentialFile:
    """A new file at ``path``, written in order: :meth:`put` pieces filled into aligned
    slots, or :meth:`put_bytes`; :meth:`finish` writes the last bytes and syncs.

    Attributes:
        position: the file's size once every byte put so far is written.
        tail: the file's bytes from the last block boundary to ``position`` (fewer than
            :data:`DIRECT_ALIGN`): not yet written when writing directly.
        direct: whether writes go straight to the disk.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self.fd = os.open(path, flags, 0o644)
        self.direct_fd: int | None = None
        with contextlib.suppress(OSError, AttributeError):  # no O_DIRECT here: cached
            self.direct_fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_DIRECT)
        self.position = 0
        self.tail = b""
        self.last_start = 0  # cached writes: where the last piece put starts

    @property
    def direct(self) -> bool:
        return self.direct_fd is not None

    def lead(self, position: int, itemsize: int) -> int:
        """Where in an aligned slot a piece that goes at ``position`` in the file goes
        (elements of ``itemsize`` bytes) for :meth:`put` to write it directly: the
        position's remainder modulo the alignment, or 0 where the piece's elements
        could not start there (a mixed-dtype file; that piece is written through the
        page cache). ``position``, not :attr:`position`: the caller fills a piece while
        the one before is still being put."""
        lead = position % DIRECT_ALIGN
        return lead if self.direct and lead % itemsize == 0 else 0

    def put(self, slot: memoryview, lead: int, nbytes: int) -> None:
        """Writes the piece ``slot[lead : lead + nbytes]``, the file's next bytes;
        ``slot`` starts at an aligned address and its first ``lead`` bytes are free."""
        if not (self.direct and lead == len(self.tail)):
            self.put_bytes(slot[lead : lead + nbytes])
            return
        slot[:lead] = self.tail
        end = lead + nbytes
        whole = end - end % DIRECT_ALIGN
        if whole:
            self._write_direct(slot[:whole], self.position - lead)
        self.tail = bytes(slot[whole:end])
        self.position += nbytes
        if not self.direct and self.tail:  # direct writes refused just now: the rest
            self._write_cached(memoryview(self.tail), self.position - len(self.tail))

    def put_bytes(self, data: memoryview | bytes) -> None:
        """Writes ``data``, the file's next bytes, through the page cache."""
        view = memoryview(data).cast("B")
        start = self.position
        if self.direct and self.tail:  # not written yet: it goes before data
            self._write_cached(memoryview(self.tail), start - len(self.tail))
        self._write_cached(view, start)
        self.position = start + view.nbytes
        kept = self.position % DIRECT_ALIGN  # the bytes after the last block boundary
        if kept > view.nbytes:  # the boundary is before data: in the old tail
            self.tail = (self.tail + bytes(view))[-kept:]
        else:
            self.tail = bytes(view[view.nbytes - kept :])
        if not self.direct:
            self._start_writeback(start)

    def finish(self) -> None:
        """Writes the last partial block and waits until every byte is on the disk."""
        if self.direct and self.tail:
            self._write_cached(memoryview(self.tail), self.position - len(self.tail))
        os.fsync(self.fd)

    def close(self) -> None:
        for fd in (self.fd, self.direct_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _write_direct(self, view: memoryview, offset: int) -> None:
        assert self.direct_fd is not None
        try:
            while view.nbytes:
                written = os.pwrite(self.direct_fd, view, offset)
                view, offset = view[written:], offset + written
        except OSError as error:
            if error.errno != errno.EINVAL:
                error.filename = str(self.path)
                raise
            # Refused (another alignment rule, or a short write left the rest
            # unaligned): the rest of the file goes through the page cache.
            os.close(self.direct_fd)
            self.direct_fd = None
            self._write_cached(view, offset)

    def _write_cached(self, view: memoryview, offset: int) -> None:
        try:
            while view.nbytes:
                written = os.pwrite(self.fd, view, offset)
                view, offset = view[written:], offset + written
        except OSError as error:
            error.filename = str(self.path)
            raise

    def _start_writeback(self, start: int) -> None:
        """Cached writes: starts the disk writes of the last two pieces' bytes (from the
        previous piece's ``last_start`` to the position) and drops from the page cache
        those already written (``POSIX_FADV_DONTNEED``: Linux starts the writeback of the
        range's dirty pages, then frees its clean ones), so the disk writes while the
        next pieces are generated instead of all at the final ``fsync``, and a
        checkpoint larger than the memory does not fill the page cache. Only advice: a
        refusal changes nothing but the speed."""
        if hasattr(os, "posix_fadvise"):
            with contextlib.suppress(OSError):
                os.posix_fadvise(
                    self.fd, self.last_start, self.position - self.last_start,
                    os.POSIX_FADV_DONTNEED,
                )  # fmt: skip
        self.last_start = start
