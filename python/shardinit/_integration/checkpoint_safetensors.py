"""transformers' sharded safetensors layout, written one bounded piece at a time.

The split into files is huggingface_hub's (the one ``save_pretrained`` uses), from the
tensors' sizes and ``max_shard_size`` only. Each file is laid out by safetensors itself:
``safetensors.serialize_file`` writes the header and a data section read from an
anonymous zero mapping (untouched pages of it take no memory), then each tensor's bytes
are written over its zeros piece by piece, at the offsets of the header the library
wrote. A file is written under ``NAME.partial`` and renamed when complete.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .._program import Writer
from ..errors import ShardInitError
from .checkpoint_plan import Entry, Fingerprinter, PieceTarget, pieces

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
#: What ``save_pretrained`` writes into every file's header.
FILE_METADATA = {"format": "pt"}

#: ``progress(bytes)``: called with the bytes just written (or found written).
Advance = Callable[[int], None]


@dataclass(frozen=True)
class ShardFile:
    """One file of the checkpoint and the tensors it holds, in the split's order."""

    name: str
    entries: tuple[Entry, ...]

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self.entries)


def shard_files(entries: Sequence[Entry], max_shard_size: int | str) -> list[ShardFile]:
    """The files of the checkpoint: huggingface_hub's split of the tensors that are not
    aliases (a tied parameter is saved once, under its first key, as transformers
    saves it), ``model.safetensors`` when one file holds them all."""
    from huggingface_hub import split_state_dict_into_shards_factory

    saved = {entry.key: entry for entry in entries if entry.alias_of is None}
    split = split_state_dict_into_shards_factory(
        saved,
        get_storage_size=lambda entry: entry.nbytes,
        filename_pattern="model{suffix}.safetensors",
        max_shard_size=max_shard_size,
    )
    return [
        ShardFile(name, tuple(saved[key] for key in keys))
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
        "weight_map": {entry.key: file.name for file in files for entry in file.entries},
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def write_file(
    directory: Path, file: ShardFile, buffer: torch.Tensor, advance: Advance, writer: Writer
) -> dict[str, Any]:
    """Writes ``file`` into ``directory`` through ``buffer`` (uint8, the bound on what
    is held), its values by ``writer``; returns its record: size, header digest, each
    tensor's fingerprint."""
    partial = directory / f"{file.name}.partial"
    _write_layout(file, partial)
    data_start, offsets = read_header(partial)
    fingerprints: dict[str, str] = {}
    with partial.open("r+b") as stream:
        for entry in file.entries:
            fingerprint = Fingerprinter(entry)
            stream.seek(data_start + offsets[entry.key])
            for piece in pieces(entry, buffer, buffer.numel(), writer):
                stream.write(piece.out.view(torch.uint8).numpy().data)
                fingerprint.add(piece)
                advance((piece.stop - piece.start) * entry.dtype.itemsize)
            fingerprints[entry.key] = fingerprint.digest()
        stream.flush()
        os.fsync(stream.fileno())
    record = {
        "file": file.name,
        "size": partial.stat().st_size,
        "header_sha256": _header_digest(partial),
        "fingerprints": fingerprints,
    }
    os.replace(partial, directory / file.name)
    return record


def file_intact(
    directory: Path, file: ShardFile, record: dict[str, Any], buffer: torch.Tensor
) -> bool:
    """Whether the finished ``file`` still holds what its ``record`` says: its size,
    its header, and each tensor's fingerprint recomputed from the bytes on disk."""
    path = directory / file.name
    if not path.is_file() or path.stat().st_size != record.get("size"):
        return False
    if _header_digest(path) != record.get("header_sha256"):
        return False
    data_start, offsets = read_header(path)
    expected = record.get("fingerprints", {})
    with path.open("rb") as stream:
        for entry in file.entries:
            stream.seek(data_start + offsets[entry.key])
            if _read_fingerprint(stream, entry, buffer) != expected.get(entry.key):
                return False
    return True


def _read_fingerprint(stream: Any, entry: Entry, buffer: torch.Tensor) -> str:
    fingerprint = Fingerprinter(entry)
    step = max(1, buffer.numel() // entry.dtype.itemsize)
    for start in range(0, entry.numel, step):
        stop = min(entry.numel, start + step)
        raw = buffer[: (stop - start) * entry.dtype.itemsize]
        if stream.readinto(raw.numpy().data) != raw.numel():
            return "truncated"
        fingerprint.add(PieceTarget(entry, start, stop, raw.view(entry.dtype)))
    return fingerprint.digest()


def _write_layout(file: ShardFile, path: Path) -> None:
    """safetensors writes the file: its header, and zeros where the data goes."""
    import safetensors

    largest = max((entry.nbytes for entry in file.entries), default=0)
    path.unlink(missing_ok=True)
    path.touch()  # the mode the umask gives: safetensors' own files are 0600
    mode = path.stat().st_mode
    zeros = mmap.mmap(-1, max(1, largest))  # anonymous: zero pages, no memory until written
    view = np.frombuffer(zeros, np.uint8)  # released before the mapping is closed
    try:
        address = view.ctypes.data
        specs = {
            entry.key: safetensors.TensorSpec(
                dtype=str(entry.dtype).split(".")[-1],  # the name safetensors.torch passes
                shape=list(entry.shape),
                data_ptr=address,
                data_len=entry.nbytes,
            )
            for entry in file.entries
        }
        try:
            safetensors.serialize_file(specs, str(path), metadata=FILE_METADATA)
            path.chmod(mode)
        except Exception as error:  # safetensors raises its own error type
            raise ShardInitError(f"safetensors cannot write {path}: {error}") from None
    finally:
        del view
        zeros.close()


def read_header(path: Path) -> tuple[int, dict[str, int]]:
    """Where a safetensors file's data section starts, and each tensor's offset in it
    (the format: a little-endian u64 header length, then the JSON header)."""
    with path.open("rb") as stream:
        (length,) = struct.unpack("<Q", stream.read(8))
        header = json.loads(stream.read(length))
    offsets = {
        key: value["data_offsets"][0] for key, value in header.items() if key != "__metadata__"
    }
    return 8 + length, offsets


def _header_digest(path: Path) -> str:
    with path.open("rb") as stream:
        (length,) = struct.unpack("<Q", stream.read(8))
        return hashlib.sha256(stream.read(length)).hexdigest()
