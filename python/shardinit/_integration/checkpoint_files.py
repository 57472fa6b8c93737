"""What a seed checkpoint's launcher handles before and after its writers: the
directory (created, partial files removed, OS errors named) and ``max_shard_size``. No
torch here, so ``shardinit checkpoint --workers N`` starts its writers without
importing it (each writer imports it once).
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from ..errors import ShardInitError

__all__ = [
    "DCP_FILE_SUFFIX",
    "MANIFEST_NAME",
    "default_max_shard_size",
    "make_directory",
    "os_error_text",
    "remove_unfinished",
    "shard_size_bytes",
]

#: Written last: a checkpoint without it is not complete.
MANIFEST_NAME = "shardinit-manifest.json"
#: dcp's data files: ``__RANK_N.distcp`` (FileSystemWriter's names).
DCP_FILE_SUFFIX = ".distcp"


def os_error_text(failure: OSError) -> str:
    """``writing PATH: No space left on device (ENOSPC)``: the cause, its errno's name."""
    name = errno.errorcode.get(failure.errno or 0)
    cause = (failure.strerror or str(failure)) + (f" ({name})" if name else "")
    return f"{failure.filename}: {cause}" if failure.filename else cause


def make_directory(directory: Path) -> None:
    """Creates ``directory`` (and its parents).

    Raises:
        ShardInitError: it cannot be created, or is not writable.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ShardInitError(
            f"save_seed_checkpoint: path {directory} cannot be created: "
            + os_error_text(OSError(error.errno, error.strerror))
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ShardInitError(f"save_seed_checkpoint: path {directory} is not writable")


def remove_unfinished(directory: Path, format: str) -> None:
    """Every writer's unfinished files in ``directory`` (their writers died): safetensors'
    ``NAME.partial``; dcp's data files while no manifest says the checkpoint is complete.
    The caller holds the directory's lock."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    complete = MANIFEST_NAME in names
    for name in names:
        dcp_file = format == "dcp" and not complete and name.endswith(DCP_FILE_SUFFIX)
        if name.endswith(".partial") or dcp_file:
            with contextlib.suppress(OSError):
                (directory / name).unlink()


def shard_size_bytes(max_shard_size: object) -> int:
    """``max_shard_size`` in bytes, as ``save_pretrained`` reads it: an int, or a size
    such as ``"5GB"`` (huggingface_hub's parser, units KB, MB, GB, TB), or a number of
    bytes as text (``"1000000"``); None: ``save_pretrained``'s own default.

    Raises:
        ShardInitError: not one of these, or not at least one byte.
    """
    if max_shard_size is None:
        max_shard_size = default_max_shard_size()
    size: int | None = None
    if isinstance(max_shard_size, int) and not isinstance(max_shard_size, bool):
        size = max_shard_size
    elif isinstance(max_shard_size, str):
        from huggingface_hub.serialization._base import parse_size_to_int

        text = max_shard_size.strip()
        try:
            size = int(text) if text.lstrip("+-").isdigit() else parse_size_to_int(text)
        except ValueError:
            size = None
    if size is None or size < 1:
        raise ShardInitError(
            "max_shard_size must be a positive number of bytes (1000000) or a size such as "
            f"'5GB' (units KB, MB, GB, TB), got {max_shard_size!r}"
            + (f" ({size} bytes)" if size is not None else "")
        )
    return size


def default_max_shard_size() -> int | str:
    """``save_pretrained``'s default ``max_shard_size`` in the installed transformers
    (huggingface_hub's, which ``save_pretrained`` calls, without transformers)."""
    import importlib.util
    import inspect

    if importlib.util.find_spec("transformers") is not None:
        from transformers import PreTrainedModel

        default = inspect.signature(PreTrainedModel.save_pretrained).parameters["max_shard_size"]
        if isinstance(default.default, (int, str)):
            return default.default
    from huggingface_hub.serialization._base import MAX_SHARD_SIZE

    return MAX_SHARD_SIZE
