"""transformers' sharded safetensors layout, written one bounded piece at a time, in one
sequential pass at the disk's speed.

The split into files is huggingface_hub's (the one ``save_pretrained`` uses), from the
saved tensors' sizes, their shared storages and ``max_shard_size``. Each file's header
is the one safetensors writes: safetensors itself serializes the same names, dtypes
and ranks with no data, which gives the order it stores the tensors in and its header's
exact form (checked: the header of that empty file, rebuilt here, is byte for byte the
one safetensors wrote); the real shapes and offsets then go into that form. The data
follows in that order, generated a piece at a time into one slot of the writer's buffer
while threads hash and write the slots filled before (both release the GIL; the writes go
straight from the buffer to the disk where the file system allows it:
:mod:`.checkpoint_output`), each piece's fingerprint terms taken from the bytes as
generated (no second read). A file is written under ``NAME.partial`` and renamed when
complete.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import queue
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._layout import Run
from .._program import Writer
from ..errors import ShardInitError
from .checkpoint_hub import Saved
from .checkpoint_output import DIRECT_ALIGN, SLOTS, SequentialFile, aligned_slots
from .checkpoint_plan import Entry, pieces
from .fingerprint import flat_range_term, shard_term

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
#: What ``save_pretrained`` writes into every file's header.
FILE_METADATA = {"format": "pt"}

#: ``progress(bytes)``: called with the bytes just written (or found written).
Advance = Callable[[int], None]
#: Fills the given uint8 buffer with a piece; returns the piece's bytes (a view of the
#: buffer's start) and how to compute its fingerprint term from them (the thread that
#: writes the bytes computes it, while the next piece is generated).
PieceFill = Callable[[torch.Tensor, Writer], tuple[torch.Tensor, Callable[[], int]]]


@dataclass(frozen=True)
class ShardFile:
    """One file of the checkpoint and the tensors it holds, in the split's order."""

    name: str
    tensors: tuple[Saved, ...]

    @property
    def nbytes(self) -> int:
        return sum(tensor.nbytes for tensor in self.tensors)


def shard_files(saved: Sequence[Saved], max_shard_size: int) -> list[ShardFile]:
    """The files of the checkpoint: huggingface_hub's split of the saved tensors (as
    ``save_pretrained`` calls it: tensors sharing a storage go in one file, that
    storage counted once), ``model.safetensors`` when one file holds them all."""
    from huggingface_hub import split_state_dict_into_shards_factory

    by_key = {tensor.key: tensor for tensor in saved}
    split = split_state_dict_into_shards_factory(
        by_key,
        get_storage_size=lambda tensor: tensor.storage_bytes or tensor.nbytes,
        get_storage_id=lambda tensor: tensor.storage,
        filename_pattern="model{suffix}.safetensors",
        max_shard_size=max_shard_size,
    )
    return [
        ShardFile(name, tuple(by_key[key] for key in keys))
        for name, keys in split.filename_to_tensors.items()
    ]


def index_text(files: Sequence[ShardFile], total_parameters: int) -> str | None:
    """``model.safetensors.index.json`` as ``save_pretrained`` writes it (None for one
    file, which has no index)."""
    if len(files) == 1:
        return None
    document = {
        "metadata": {
            "total_parameters": total_parameters,
            "total_size": sum(file.nbytes for file in files),
        },
        "weight_map": {tensor.key: file.name for file in files for tensor in file.tensors},
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def file_header(file: ShardFile) -> tuple[bytes, list[Saved]]:
    """The file's header as safetensors writes it (length prefix included) and its
    tensors in the order safetensors stores their data.

    Raises:
        ShardInitError: the installed safetensors writes headers in a form this
            writer does not rebuild exactly.
    """
    import safetensors

    specs = {
        t.key: safetensors.TensorSpec(
            dtype=str(t.dtype).split(".")[-1], shape=[0], data_ptr=0, data_len=0
        )
        for t in file.tensors
    }
    empty = bytes(safetensors.serialize(specs, metadata=FILE_METADATA))
    (length,) = struct.unpack("<Q", empty[:8])
    layout: dict[str, Any] = json.loads(empty[8 : 8 + length])
    if _header_bytes(layout) != empty[: 8 + length]:
        raise ShardInitError(
            f"safetensors {safetensors.__version__} writes headers in a form this writer "
            "does not rebuild exactly; seed checkpoints need another safetensors version"
        )
    by_key = {t.key: t for t in file.tensors}
    order = [by_key[key] for key in layout if key != "__metadata__"]
    offset = 0
    for tensor in order:
        layout[tensor.key]["shape"] = list(tensor.shape)
        layout[tensor.key]["data_offsets"] = [offset, offset + tensor.nbytes]
        offset += tensor.nbytes
    return _header_bytes(layout), order


def _header_bytes(layout: dict[str, Any]) -> bytes:
    """safetensors' form: compact JSON padded with spaces to 8 bytes, after its u64
    little-endian length."""
    text = json.dumps(layout, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_file(
    directory: Path, file: ShardFile, buffer: torch.Tensor, advance: Advance, writer: Writer
) -> dict[str, Any]:
    """Writes ``file`` into ``directory`` through ``buffer`` (uint8, from
    :func:`~.checkpoint_output.aligned_buffer`: the bound on what is held, in slots,
    one filled while those before are hashed and written), its values by ``writer``; returns its
    record: size, header digest, and the fingerprint terms of the model tensors it
    holds (per key: a tensor may be split over files)."""
    header, order = file_header(file)
    partial = directory / f"{file.name}.partial"
    slots = aligned_slots(buffer)
    piece_bytes = slots[0].numel() - DIRECT_ALIGN  # room for the lead of a direct write
    output = SequentialFile(partial)
    try:
        with _BackgroundWrites(output) as background:
            background.write_now(header)
            position = len(header)  # of the next piece in the file
            for tensor in order:
                for fill in piece_fills(tensor, piece_bytes):
                    index = background.free_slot()
                    lead = output.lead(position, tensor.source.dtype.itemsize)
                    data, term = fill(slots[index][lead:], writer)
                    key = tensor.source.key
                    background.submit(index, slots[index], lead, data.numel(), key, term)
                    position += data.numel()
                    advance(data.numel())
        output.finish()
    finally:
        output.close()
    record = {
        "file": file.name,
        "size": partial.stat().st_size,
        "header_sha256": hashlib.sha256(header[8:]).hexdigest(),
        "terms": {key: str(value) for key, value in background.terms.items()},
    }
    os.replace(partial, directory / file.name)
    return record


class _BackgroundWrites:
    """Two threads that take the filled slots of a buffer in order: one writes them to
    ``output``, the other adds up their fingerprint terms per key (:attr:`terms`, read
    after the ``with`` block); a slot is handed back once both are done with it. The
    first OSError of a write is raised in the caller (at the next slot it asks for, or
    at the end). The hashing (the core's, one pass over the piece's bytes) and the
    writes release the GIL: each piece's hashing overlaps its write (on a slow disk the
    write alone is then the bound, not the write and the hashing in turn), and both
    overlap the generation of the next piece."""

    def __init__(self, output: SequentialFile) -> None:
        self.output = output
        self.terms: dict[str, int] = {}
        self.to_write: queue.Queue[tuple[int, torch.Tensor, int, int] | None] = queue.Queue()
        self.to_hash: queue.Queue[tuple[str, Callable[[], int]] | None] = queue.Queue()
        self.hashed: queue.Queue[None] = queue.Queue()  # one per piece hashed, in order
        self.free: queue.Queue[int] = queue.Queue()
        for index in range(SLOTS):
            self.free.put(index)
        self.error: BaseException | None = None
        # Daemons: an interrupt anywhere in the caller (Ctrl-C) must never leave the
        # process waiting at exit for a thread whose queue nobody ends.
        self.threads = [
            threading.Thread(target=self._write, name="seed-checkpoint-writes", daemon=True),
            threading.Thread(target=self._hash, name="seed-checkpoint-hashes", daemon=True),
        ]

    def __enter__(self) -> _BackgroundWrites:
        for thread in self.threads:
            thread.start()
        return self

    def write_now(self, data: bytes) -> None:
        self.output.put_bytes(data)

    def free_slot(self) -> int:
        index = self.free.get()
        self._raise()
        return index

    def submit(
        self,
        index: int,
        slot: torch.Tensor,
        lead: int,
        nbytes: int,
        key: str,
        term: Callable[[], int],
    ) -> None:
        """Queues the piece ``slot[lead : lead + nbytes]`` (``slot`` is slot ``index``
        of the buffer, uint8) and its fingerprint term, a term of tensor ``key``."""
        self.to_hash.put((key, term))
        self.to_write.put((index, slot, lead, nbytes))

    def __exit__(self, *exc: object) -> None:
        self.to_hash.put(None)
        self.to_write.put(None)
        for thread in self.threads:
            thread.join()
        if exc[0] is None:
            self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _write(self) -> None:
        while (item := self.to_write.get()) is not None:
            index, slot, lead, nbytes = item
            if self.error is None:
                try:
                    self.output.put(slot.numpy().data, lead, nbytes)
                except OSError as error:
                    self.error = error
            self.hashed.get()  # the slot is read by the hashing until then
            self.free.put(index)

    def _hash(self) -> None:
        while (item := self.to_hash.get()) is not None:
            key, term = item
            try:
                self.terms[key] = (self.terms.get(key, 0) + term()) & (2**64 - 1)
            except BaseException as error:  # raised in the caller, never a hang
                self.error = self.error or error
            self.hashed.put(None)


def piece_fills(tensor: Saved, piece_bytes: int) -> Iterator[PieceFill]:
    """How to fill ``tensor``'s bytes in order, a piece of at most ``piece_bytes`` at a
    time: flat ranges of its model tensor when it is one (the whole tensor, or e.g.
    one expert of a fused MoE weight), else boxes of it (transposed when the saved
    tensor transposes it)."""
    entry = tensor.source
    start = tensor.flat_start()
    step = max(1, piece_bytes // entry.dtype.itemsize)
    if start is not None:
        for first in range(start, start + tensor.numel, step):
            last = min(start + tensor.numel, first + step)
            yield _flat_fill(entry, first, last)
        return
    assert tensor.box is not None
    dims = list(tensor.order or [d for d, (a, b) in enumerate(tensor.box) if b - a > 1])
    shape = [tensor.box[d][1] - tensor.box[d][0] for d in dims]
    for runs in _sub_boxes(shape, step):
        box = [(a, a + 1) for a, _ in tensor.box]
        for d, (a, b) in zip(dims, runs, strict=True):
            box[d] = (tensor.box[d][0] + a, tensor.box[d][0] + b)
        yield _box_fill(entry, tuple(box), dims)


def _flat_fill(entry: Entry, first: int, last: int) -> PieceFill:
    def fill(buffer: torch.Tensor, writer: Writer) -> tuple[torch.Tensor, Callable[[], int]]:
        (piece,) = pieces(entry, buffer, buffer.numel(), writer, first, last)
        return piece.out.view(torch.uint8), lambda: flat_range_term(piece.out, first)

    return fill


def _box_fill(entry: Entry, box: tuple[Run, ...], dims: Sequence[int]) -> PieceFill:
    def fill(buffer: torch.Tensor, writer: Writer) -> tuple[torch.Tensor, Callable[[], int]]:
        shape = [b - a for a, b in box]
        count = math.prod(shape)
        out = buffer[: count * entry.dtype.itemsize].view(entry.dtype)
        transposed = list(dims) != sorted(dims)
        local = torch.empty(shape, dtype=entry.dtype) if transposed else out.view(shape)
        if entry.values is not None:
            entry.values.write_runs(writer, [[run] for run in box], local)
        else:
            assert entry.tensor is not None
            local.copy_(entry.tensor[tuple(slice(a, b) for a, b in box)])
        if transposed:
            kept = local.reshape([shape[d] for d in sorted(dims)])
            permutation = [sorted(dims).index(d) for d in dims]
            out.view([shape[d] for d in dims]).copy_(kept.permute(permutation))
        runs = [[run] for run in box]
        return out.view(torch.uint8), lambda: shard_term(local, entry.shape, runs)

    return fill


def _sub_boxes(shape: Sequence[int], step: int) -> Iterator[list[Run]]:
    """Boxes of a tensor of ``shape`` that cover it in row-major order, each of at most
    ``step`` elements (one at least)."""
    if not shape:
        yield []
        return
    split = next(d for d in range(len(shape)) if math.prod(shape[d + 1 :]) <= step)
    rows = max(1, step // math.prod(shape[split + 1 :]))
    tail = [(0, size) for size in shape[split + 1 :]]
    for outer in itertools.product(*(range(size) for size in shape[:split])):
        for first in range(0, shape[split], rows):
            yield [*((i, i + 1) for i in outer), (first, min(shape[split], first + rows)), *tail]


def file_intact(
    directory: Path, file: ShardFile, record: dict[str, Any], buffer: torch.Tensor
) -> bool:
    """Whether the finished ``file`` still holds what its ``record`` says: its size,
    its header, and the fingerprint terms recomputed from the bytes on disk."""
    path = directory / file.name
    if not path.is_file() or path.stat().st_size != record.get("size"):
        return False
    header, order = file_header(file)
    if hashlib.sha256(header[8:]).hexdigest() != record.get("header_sha256"):
        return False
    terms: dict[str, int] = {}
    with path.open("rb") as stream:
        if stream.read(len(header)) != header:
            return False
        for tensor in order:
            key = tensor.source.key
            for term in _read_terms(stream, tensor, buffer):
                terms[key] = (terms.get(key, 0) + term) & (2**64 - 1)
    return {key: str(value) for key, value in terms.items()} == record.get("terms")


def _read_terms(stream: Any, tensor: Saved, buffer: torch.Tensor) -> Iterator[int]:
    """The fingerprint terms of ``tensor``'s bytes read from ``stream``, as
    :func:`write_file` took them (a short file gives a term that matches nothing)."""
    entry = tensor.source
    start = tensor.flat_start()
    step = max(1, buffer.numel() // entry.dtype.itemsize)
    if start is not None:
        for first in range(start, start + tensor.numel, step):
            last = min(start + tensor.numel, first + step)
            raw = buffer[: (last - first) * entry.dtype.itemsize]
            if stream.readinto(raw.numpy().data) != raw.numel():
                yield -1
                return
            yield flat_range_term(raw.view(entry.dtype), first)
        return
    whole = bytearray(tensor.nbytes)  # a resumed file only: checked once, not written
    if stream.readinto(whole) != len(whole):
        yield -1
        return
    saved = torch.frombuffer(whole, dtype=entry.dtype).view(tensor.shape)
    assert tensor.box is not None
    dims = list(tensor.order or [d for d, (a, b) in enumerate(tensor.box) if b - a > 1])
    kept = saved.reshape([tensor.box[d][1] - tensor.box[d][0] for d in dims])
    local = kept.permute([dims.index(d) for d in sorted(dims)]).contiguous()
    local = local.reshape([b - a for a, b in tensor.box])
    yield shard_term(local, entry.shape, [[run] for run in tensor.box])
