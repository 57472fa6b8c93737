"""torch.distributed.checkpoint's format, written by ``dcp.save`` from pieces generated
when its storage writer asks for them.

Every tensor is saved as chunks of whole rows along dim 0 (each at most the buffer size,
one row at least), as a sharded tensor is: the checkpoint's metadata lists them and
``dcp.load`` reads them into any layout. The chunks are divided among the writers; this
writer's planner lists its own and generates each in :meth:`resolve_data`, which the
storage writer calls one item at a time, so no more than a few chunks are held.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._program import Writer
from .checkpoint_files import DCP_FILE_SUFFIX
from .checkpoint_plan import Entry, Fingerprinter, PieceTarget, split_bytes


@dataclass(frozen=True)
class Chunk:
    """Rows ``[start_row, stop_row)`` of one tensor (the whole tensor for 0-d ones)."""

    entry: Entry
    start_row: int
    stop_row: int

    @property
    def row_numel(self) -> int:
        return math.prod(self.entry.shape[1:])

    @property
    def offsets(self) -> tuple[int, ...]:
        return (self.start_row, *([0] * (len(self.entry.shape) - 1)))[: len(self.entry.shape)]

    @property
    def sizes(self) -> tuple[int, ...]:
        rows = self.stop_row - self.start_row
        return (rows, *self.entry.shape[1:])[: len(self.entry.shape)]

    @property
    def nbytes(self) -> int:
        return math.prod(self.sizes) * self.entry.dtype.itemsize


def chunks(entries: Sequence[Entry], piece_bytes: int) -> list[Chunk]:
    """Every key's chunks (tied keys too: a loader asks for each key of the state dict)."""
    found: list[Chunk] = []
    for entry in entries:
        if not entry.shape:
            found.append(Chunk(entry, 0, 1))
            continue
        row_bytes = max(1, math.prod(entry.shape[1:]) * entry.dtype.itemsize)
        step = max(1, piece_bytes // row_bytes)
        found += [
            Chunk(entry, start, min(entry.shape[0], start + step))
            for start in range(0, entry.shape[0], step)
        ]
    return found


def my_chunks(entries: Sequence[Entry], piece_bytes: int, rank: int, world: int) -> list[Chunk]:
    """The chunks writer ``rank`` of ``world`` writes (balanced by bytes)."""
    every = chunks(entries, piece_bytes)
    owner = split_bytes([chunk.nbytes for chunk in every], world)
    return [chunk for chunk, writer in zip(every, owner, strict=True) if writer == rank]


def files_of_rank(directory: Path, rank: int) -> list[str]:
    """The data files writer ``rank`` writes into ``directory`` (found there now)."""
    prefix = f"__{rank}_"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [n for n in names if n.startswith(prefix) and n.endswith(DCP_FILE_SUFFIX)]


def missing_files(directory: Path) -> list[str]:
    """The files ``.metadata`` names that are absent or shorter than it says (all of
    them, by name, when ``.metadata`` itself is missing)."""
    try:
        with (directory / ".metadata").open("rb") as stream:
            metadata = pickle.load(stream)  # what dcp itself wrote just now
    except (OSError, pickle.UnpicklingError, EOFError):
        return [".metadata"]
    needed: dict[str, int] = {}
    for info in metadata.storage_data.values():
        needed[info.relative_path] = max(
            needed.get(info.relative_path, 0), info.offset + info.length
        )
    missing = []
    for name, size in sorted(needed.items()):
        path = directory / name
        if not path.is_file() or path.stat().st_size < size:
            missing.append(name)
    return missing


def write_dcp(
    directory: Path, mine: Sequence[Chunk], *, advance: Callable[[int], None], writer: Writer
) -> dict[str, int]:
    """Saves this writer's chunks ``mine`` with ``dcp.save`` (a collective when a
    process group is initialized), their values by ``writer``; returns this writer's
    fingerprint term per key."""
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.state_dict_saver import save

    planner = _planner_class()(mine, advance, writer)
    storage = FileSystemWriter(str(directory))
    failures: list[OSError] = []
    storage.fs = _recording_file_system(failures)
    try:
        with warnings.catch_warnings():
            # One writer without a process group is what this call means: dcp.save warns
            # that it assumes so.
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            save({}, storage_writer=storage, planner=planner, no_dist=not _in_group())
    except CheckpointException as error:
        # torch.save reports a failed write as "unexpected pos": the recorded OSError is
        # the cause; else the first writer's own exception (dcp wraps it).
        wrapped = [exc for exc, _ in error.failures.values()]
        causes = failures or [e for e in wrapped if isinstance(e, OSError)] or wrapped
        if causes:
            raise causes[0] from None
        raise
    terms: dict[str, int] = planner.terms
    return terms


def _recording_file_system(failures: list[OSError]) -> Any:
    """dcp's file system, recording into ``failures`` the OSError a write or sync
    raised (torch.save turns it into a RuntimeError that names no cause)."""
    from torch.distributed.checkpoint.filesystem import FileSystem

    class RecordingFileSystem(FileSystem):
        @contextlib.contextmanager
        def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[Any]:
            try:
                with super().create_stream(path, mode) as stream:
                    yield _RecordingStream(stream, failures)
            except OSError as error:
                failures.append(error)
                raise

    return RecordingFileSystem()


class _RecordingStream:
    """A stream that records the OSError of a write, flush or fsync before raising it."""

    def __init__(self, stream: Any, failures: list[OSError]) -> None:
        self._stream = stream
        self._failures = failures

    def write(self, data: Any) -> int:
        try:
            written: int = self._stream.write(data)
        except OSError as error:
            if error.filename is None:
                error.filename = getattr(self._stream, "name", None)
            self._failures.append(error)
            raise
        return written

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            if error.filename is None:
                error.filename = getattr(self._stream, "name", None)
            self._failures.append(error)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _in_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _planner_class() -> type:
    """The planner class (torch.distributed.checkpoint imported on first use only)."""
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        MetadataIndex,
        TensorProperties,
    )
    from torch.distributed.checkpoint.planner import (
        SavePlan,
        TensorWriteData,
        WriteItem,
        WriteItemType,
    )

    class SeedSavePlanner(DefaultSavePlanner):
        """Lists this writer's chunks as shard write items and generates each on request."""

        def __init__(
            self, mine: Sequence[Chunk], advance: Callable[[int], None], writer: Writer
        ) -> None:
            super().__init__()
            self.writer = writer
            self.by_index = {(c.entry.key, c.offsets): c for c in mine}
            self.advance = advance
            self.terms: dict[str, int] = {c.entry.key: 0 for c in mine}

        def create_local_plan(self) -> SavePlan:
            items = [_write_item(chunk) for chunk in self.by_index.values()]
            self.plan = SavePlan(items, planner_data={})  # nothing flattened
            return self.plan

        def resolve_data(self, write_item: WriteItem) -> torch.Tensor:
            index = write_item.index
            chunk = self.by_index[(index.fqn, tuple(index.offset or ()))]
            values = _generate(chunk, self.writer)
            self.terms[chunk.entry.key] += _term(chunk, values)
            self.advance(chunk.nbytes)
            return values

    def _write_item(chunk: Chunk) -> WriteItem:
        offsets = torch.Size(chunk.offsets)
        return WriteItem(
            index=MetadataIndex(chunk.entry.key, offsets),
            type=WriteItemType.SHARD,
            tensor_data=TensorWriteData(
                chunk=ChunkStorageMetadata(offsets=offsets, sizes=torch.Size(chunk.sizes)),
                properties=TensorProperties(dtype=chunk.entry.dtype),
                size=torch.Size(chunk.entry.shape),
            ),
        )

    return SeedSavePlanner


def _flat_range(chunk: Chunk) -> tuple[int, int]:
    if not chunk.entry.shape:
        return 0, 1
    return chunk.start_row * chunk.row_numel, chunk.stop_row * chunk.row_numel


def _generate(chunk: Chunk, writer: Writer) -> torch.Tensor:
    """The chunk's values, in a tensor of its own (the storage writer holds it until
    written)."""
    start, stop = _flat_range(chunk)
    out = torch.empty(stop - start, dtype=chunk.entry.dtype)
    PieceTarget(chunk.entry, start, stop, out).fill(chunk.entry.values, writer)
    return out.view(chunk.sizes)


def _term(chunk: Chunk, values: torch.Tensor) -> int:
    start, stop = _flat_range(chunk)
    fingerprint = Fingerprinter(chunk.entry)
    fingerprint.add(PieceTarget(chunk.entry, start, stop, values.reshape(-1)))
    return fingerprint.total
