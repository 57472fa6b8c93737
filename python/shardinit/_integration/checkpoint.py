"""``save_seed_checkpoint``: a meta-device model's shardinit initialization, written as
a checkpoint by every process of a group, each writing its share.

Phases: plan (``materialize``'s plan of the same model: :mod:`.checkpoint_plan`) ->
prepare the directory (rank 0: refuse another checkpoint, record the plan) -> write
(each writer its files or chunks, through one bounded buffer: :mod:`.checkpoint_safetensors`,
:mod:`.checkpoint_dcp`) -> finish (rank 0: the index, then the manifest, last). An error
on any rank is raised on every rank, so no rank waits for a peer that failed.

The directory's ``.shardinit-checkpoint/`` holds the plan and one record per finished
file: a killed run is resumed by calling again with the same arguments.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from torch import nn

from .._names import listing
from .._program import Writer
from .._validate import check_seed
from ..errors import ShardInitError
from ..shard import writer
from . import checkpoint_dcp, checkpoint_safetensors
from .checkpoint_files import (
    MANIFEST_NAME,
    make_directory,
    os_error_text,
    remove_unfinished,
    shard_size_bytes,
)
from .checkpoint_lock import directory_lock
from .checkpoint_output import aligned_buffer
from .checkpoint_plan import Entry, split_bytes
from .fingerprint import FINGERPRINT_FORMAT, digest_of_total, model_digest
from .progress import ProgressBar

if TYPE_CHECKING:  # the planning's types: a writer given a plan never imports them
    from .capture import CapturedInit
    from .plan import BufferInit
    from .rules import Rules

__all__ = ["SeedPlan", "plan_seed_checkpoint", "save_seed_checkpoint", "write_seed_checkpoint"]

MANIFEST_FORMAT = "shardinit-seed-checkpoint-v1"
STATE_DIR = ".shardinit-checkpoint"
#: Names that belong to a checkpoint: a directory holding one of them and no plan of
#: ours holds another checkpoint, which is never overwritten.
_CHECKPOINT_NAME = re.compile(
    r".*\.(safetensors|distcp|bin|pt|pth|partial)|.*\.index\.json|\.metadata|"
    + re.escape(MANIFEST_NAME)
)
_MIB = 2**20

#: ``progress(done_bytes, total_bytes)`` of this writer's share.
ProgressHook = Callable[[int, int], None]
_T = TypeVar("_T")


def save_seed_checkpoint(
    model: nn.Module,
    path: str | os.PathLike[str],
    *,
    seed: int,
    init_fn: Callable[[], object] | CapturedInit | None = None,
    format: Literal["safetensors", "dcp"] = "safetensors",
    rules: Rules | None = None,
    buffer_init: BufferInit | None = None,
    max_shard_size: int | str | None = None,
    buffer_bytes: int = 64 * _MIB,
    progress: bool | ProgressHook | None = None,
) -> Path:
    """Writes the checkpoint of ``model``'s shardinit initialization into ``path``.

    The values are exactly those ``shardinit.materialize(model, seed=seed,
    init_fn=init_fn, rules=rules)`` gives. Call it in every process of the default
    process group (each writes its share; the call is collective) or in one process.
    No process holds the model: each fills one buffer of ``buffer_bytes`` at a time
    (a tensor larger than that is generated and written in pieces), with
    :func:`shardinit.get_num_threads` threads (a writer also takes the threads of
    writers that have no file to write, up to the CPUs it may use).

    * ``"safetensors"``: the files ``save_pretrained`` writes by default for the
      materialized model, byte for byte (``model.safetensors``, or
      ``model-0000k-of-0000n.safetensors`` files and ``model.safetensors.index.json``):
      for a transformers model its tied weights removed and its weight conversions
      reverted (MoE experts saved per expert, under the Hub's names), with
      ``config.json`` and ``generation_config.json``; for another model each key of
      ``model.state_dict()`` once (a tied parameter under its first key). The split
      into files depends on the sizes and ``max_shard_size`` only; writers divide the
      files among themselves; the files are byte-identical for any number of writers.
    * ``"dcp"``: ``torch.distributed.checkpoint``'s format, every key of
      ``model.state_dict()``; ``dcp.load`` reads it into any layout (FSDP2, TP).

    ``path`` also gets ``shardinit-manifest.json`` (written last: a checkpoint without
    it is not complete), with each tensor's :func:`shardinit.fingerprint` and the
    :func:`shardinit.model_digest`, and ``.shardinit-checkpoint/`` (the plan and a
    record per finished file). One run at a time: the directory is locked for the
    call's life (a dead run's lock is taken). A failed call removes its partial files;
    a killed run is resumed by the same call: finished files are checked against their
    records (size, header, fingerprints read back) and kept, the rest written (dcp:
    written again whole).

    Args:
        model: a model built on the meta device, not wrapped or sharded. Its
            parameters stay on meta; its meta buffers are allocated on the CPU and set
            as ``materialize`` sets them (they are small, and written whole).
        path: the checkpoint directory (created; it may hold other files, such as
            ``config.json``, but no other checkpoint).
        seed: the run's seed, an int in [0, 2^64).
        init_fn: the model's own init code (e.g. ``model.init_weights``), as
            :func:`shardinit.materialize` takes it.
        format: ``"safetensors"`` or ``"dcp"``.
        rules, buffer_init: as :func:`shardinit.materialize` takes them.
        max_shard_size: safetensors' largest file (bytes, or a size such as ``"5GB"``),
            as ``save_pretrained`` takes it; None: ``save_pretrained``'s default in the
            installed transformers.
        buffer_bytes: the bound on each writer's piece of a tensor, at least 1 MiB.
        progress: a bar of bytes, rate and ETA on stderr (rank 0): None shows it when
            stderr is a terminal; or ``progress(done_bytes, total_bytes)``, called with
            this writer's share.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        TypeError: arguments of the wrong type.
        ShardInitError: ``format``, ``buffer_bytes`` or ``max_shard_size`` out of
            range, a model that is not a plain meta-device model, everything
            :func:`shardinit.materialize` raises for it, a ``path`` that cannot be
            created or written, that holds another checkpoint or that another live
            run is writing, a write that fails (its cause: ``ENOSPC``...), a reverse
            weight conversion that is not a view of one model tensor.

    Example:
        >>> with torch.device("meta"):
        ...     model = nn.Linear(4, 3)
        >>> out = save_seed_checkpoint(model, tmp_path / "ckpt", seed=0)  # doctest: +SKIP
    """
    seed, directory = _check_arguments(model, path, seed, format, buffer_bytes, progress)
    plan = plan_seed_checkpoint(
        model,
        seed=seed,
        init_fn=init_fn,
        format=format,
        rules=rules,
        buffer_init=buffer_init,
        max_shard_size=max_shard_size,
        buffer_bytes=buffer_bytes,
    )
    return write_seed_checkpoint(plan, directory, progress=progress)


@dataclass(frozen=True)
class SeedPlan:
    """What a seed checkpoint holds, planned once from the model: its entries (each
    tensor's values as init programs, its buffers' values), its files, and the config
    files ``save_pretrained`` writes beside them. It holds no model and pickles, so
    writer processes that never built the model (nor imported transformers) write
    from it: :func:`write_seed_checkpoint`."""

    entries: list[Entry]
    files: list[checkpoint_safetensors.ShardFile]
    format: str
    seed: int
    max_shard_size: int
    buffer_bytes: int
    #: File name -> bytes: transformers' ``config.json`` (and generation config).
    config_files: dict[str, bytes]


def plan_seed_checkpoint(
    model: nn.Module,
    *,
    seed: int,
    init_fn: Callable[[], object] | CapturedInit | None = None,
    format: Literal["safetensors", "dcp"] = "safetensors",
    rules: Rules | None = None,
    buffer_init: BufferInit | None = None,
    max_shard_size: int | str | None = None,
    buffer_bytes: int = 64 * _MIB,
) -> SeedPlan:
    """The plan of :func:`save_seed_checkpoint`, without writing: every process of a
    group may plan, or one plans and hands the plan (it pickles) to writers that never
    built the model.

    Args:
        model, seed, init_fn, format, rules, buffer_init, max_shard_size, buffer_bytes:
            as :func:`save_seed_checkpoint` takes them.

    Returns:
        The plan; ``model`` is not needed after it (its config files are in it).

    Raises:
        TypeError, ShardInitError: what :func:`save_seed_checkpoint` raises for these
            arguments and this model before it writes.
    """
    from .checkpoint_hub import config_files_as_save_pretrained, saved_tensors
    from .checkpoint_plan import plan_entries
    from .collector import collector_paused
    from .rules import check_rules

    seed, _ = _check_arguments(model, ".", seed, format, buffer_bytes, None)
    shard_bytes = shard_size_bytes(max_shard_size) if format == "safetensors" else 0
    with collector_paused():  # why: collector.py
        entries = plan_entries(
            model,
            seed=seed,
            rules=check_rules(rules),
            init_fn=init_fn,
            buffer_init=buffer_init,
            who="save_seed_checkpoint",
        )
        files = (
            checkpoint_safetensors.shard_files(saved_tensors(model, entries), shard_bytes)
            if format == "safetensors"
            else []
        )
    # What from_pretrained reads beside the weights (written at the end, before the
    # manifest).
    config = config_files_as_save_pretrained(model) if format == "safetensors" else {}
    return SeedPlan(entries, files, format, seed, shard_bytes, buffer_bytes, config)


def write_seed_checkpoint(
    plan: SeedPlan,
    path: str | os.PathLike[str],
    *,
    progress: bool | ProgressHook | None = None,
) -> Path:
    """Writes ``plan``'s checkpoint into ``path``: :func:`save_seed_checkpoint` after
    its plan (collective the same way: every process of the default group calls it
    with the same plan, each writes its share).

    Args:
        plan: from :func:`plan_seed_checkpoint` (in this process or, unpickled, another).
        path, progress: as :func:`save_seed_checkpoint` takes them.

    Returns:
        ``path`` as a ``Path``.

    Raises:
        TypeError, ShardInitError: what :func:`save_seed_checkpoint` raises while it
            writes (the directory, its lock, a write that fails).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise TypeError(f"progress must be a bool, callable or None, got {type(progress).__name__}")
    directory = Path(os.fspath(path))
    rank, world = _group()
    job = _Job(directory, plan, rank, world)
    with contextlib.ExitStack() as held:  # rank 0 holds the directory's lock until the end
        _agreed(world, lambda: job.prepare(held) if rank == 0 else None)
        try:
            terms = _agreed(world, lambda: job.write(progress))
            every = _gathered(world, terms)
            _agreed(world, lambda: job.finish(every) if rank == 0 else None)
        except BaseException:
            job.remove_partials()  # a failed run leaves only what a rerun keeps
            raise
    return directory


class _Job:
    """One writer's part of one checkpoint."""

    def __init__(self, directory: Path, plan: SeedPlan, rank: int, world: int) -> None:
        self.directory = directory
        self.entries = plan.entries
        self.format = plan.format
        self.buffer_bytes = plan.buffer_bytes
        self.rank, self.world = rank, world
        self.state = directory / STATE_DIR
        self.files = plan.files
        self.config_files = plan.config_files
        self.identity = _identity(plan.entries, plan.format, plan.seed, plan.max_shard_size)

    def prepare(self, held: contextlib.ExitStack) -> None:
        """Rank 0: creates the directory, takes its lock into ``held`` (one run at a
        time), refuses another checkpoint in it, records the plan (or finds the same
        plan: a resumed run)."""
        make_directory(self.directory)
        held.enter_context(directory_lock(self.directory))
        plan_path = self.state / "plan.json"
        if plan_path.is_file():
            if _read_json(plan_path) != self.identity:
                raise ShardInitError(
                    f"save_seed_checkpoint: path {self.directory} holds another seed "
                    "checkpoint (another model, seed, format or max_shard_size); choose "
                    "an empty directory, or remove it"
                )
            remove_unfinished(self.directory, self.format)  # a killed run's: never kept
            if self.format == "dcp" and not (self.directory / MANIFEST_NAME).is_file():
                (self.directory / ".metadata").unlink(missing_ok=True)  # rewritten whole
            return
        found = sorted(n for n in os.listdir(self.directory) if _CHECKPOINT_NAME.fullmatch(n))
        if found:
            raise ShardInitError(
                f"save_seed_checkpoint: path {self.directory} holds another checkpoint "
                f"({listing(found)}); choose an empty directory, or remove it"
            )
        (self.state / "done").mkdir(parents=True, exist_ok=True)
        _write_atomically(plan_path, json.dumps(self.identity, indent=1))

    def write(self, progress: bool | ProgressHook | None) -> dict[str, Any]:
        """Writes this writer's share; returns its fingerprint terms per key (of the
        pieces it wrote or found written)."""
        if self.format == "safetensors":
            owner = split_bytes([file.nbytes for file in self.files], self.world)
            mine = [f for f, rank in zip(self.files, owner, strict=True) if rank == self.rank]
            fills = _sharing_idle_threads(writer(), self.world, busy=len(set(owner)))
            with _Reporter(progress, sum(f.nbytes for f in mine), self.rank, self.world) as say:
                return self._write_files(mine, say, fills)
        if (self.directory / MANIFEST_NAME).is_file():
            return {}  # a complete dcp checkpoint of the same plan: nothing to write
        piece = self.buffer_bytes
        mine_chunks = checkpoint_dcp.my_chunks(self.entries, piece, self.rank, self.world)
        total = sum(chunk.nbytes for chunk in mine_chunks)
        with _Reporter(progress, total, self.rank, self.world) as say:
            return checkpoint_dcp.write_dcp(
                self.directory, mine_chunks, advance=say, writer=writer()
            )

    def _write_files(
        self,
        mine: list[checkpoint_safetensors.ShardFile],
        say: Callable[[int], None],
        fills: Writer,
    ) -> dict[str, int]:
        buffer = aligned_buffer(self.buffer_bytes)  # direct writes go from it to the disk
        terms: dict[str, int] = {}
        for file in mine:
            done = self.state / "done" / f"{file.name}.json"
            record = _read_json(done) if done.is_file() else None
            if record is None or not checkpoint_safetensors.file_intact(
                self.directory, file, record, buffer
            ):
                done.unlink(missing_ok=True)
                record = checkpoint_safetensors.write_file(self.directory, file, buffer, say, fills)
                _write_atomically(done, json.dumps(record, indent=1))
            else:
                say(file.nbytes)
            for key, term in record["terms"].items():
                terms[key] = terms.get(key, 0) + int(term)
        return terms

    def remove_partials(self) -> None:
        """This writer's unfinished files (safetensors: ``NAME.partial``; dcp: its
        ``.distcp`` files, written again whole by a rerun)."""
        if self.format == "safetensors":
            names = [f"{file.name}.partial" for file in self.files]
        else:
            names = checkpoint_dcp.files_of_rank(self.directory, self.rank)
        for name in names:
            with contextlib.suppress(OSError):
                (self.directory / name).unlink()

    def finish(self, every: list[dict[str, Any]]) -> None:
        """Rank 0: checks every file complete, then writes the index (safetensors,
        several files), then the manifest, last."""
        self._check_complete()
        fingerprints = self._fingerprints(every)
        if self.format == "safetensors":
            total_parameters = sum(e.numel for e in self.entries if e.values and not e.alias_of)
            index = checkpoint_safetensors.index_text(self.files, total_parameters)
            if index is not None:
                path = self.directory / checkpoint_safetensors.INDEX_NAME
                _write_atomically(path, index)
        for name, data in self.config_files.items():  # as save_pretrained writes them
            _write_atomically(self.directory / name, data)
        manifest = dict(self.identity)
        manifest["fingerprint_format"] = FINGERPRINT_FORMAT
        for key, tensor in manifest["tensors"].items():
            tensor["fingerprint"] = fingerprints[tensor.get("alias_of") or key]
        # The digest of the parameters, as model_digest(fingerprint_model(model)) gives
        # it for the loaded model (tied parameters once; buffers are left out there).
        params = {e.key for e in self.entries if e.values is not None and e.alias_of is None}
        manifest["model_digest"] = model_digest(
            {key: manifest["tensors"][key]["fingerprint"] for key in sorted(params)}
        )
        _write_atomically(self.directory / MANIFEST_NAME, json.dumps(manifest, indent=1) + "\n")

    def _check_complete(self) -> None:
        """Every file of the checkpoint is on disk as its writer recorded it.

        Raises:
            ShardInitError: one is missing or of another size (no manifest is written).
        """
        if self.format == "safetensors":
            missing = []
            for file in self.files:
                record = _read_json(self.state / "done" / f"{file.name}.json")
                path = self.directory / file.name
                size = path.stat().st_size if path.is_file() else None
                if record is None or size != record.get("size"):
                    missing.append(file.name)
        else:
            missing = checkpoint_dcp.missing_files(self.directory)
        if missing:
            raise ShardInitError(
                f"save_seed_checkpoint: path {self.directory}: {listing(missing)} missing or "
                "incomplete after every writer finished (removed or changed by another "
                "process?); no manifest written: run again to resume"
            )

    def _fingerprints(self, every: list[dict[str, Any]]) -> dict[str, str]:
        """Each tensor's fingerprint: the sum of its terms over every writer's pieces
        (a tensor may be split over files and writers)."""
        if self.format == "dcp" and not any(
            every
        ):  # a complete checkpoint found: its manifest stands
            return {
                k: t["fingerprint"]
                for k, t in _read_json(self.directory / MANIFEST_NAME)["tensors"].items()
            }
        totals: dict[str, int] = {}
        for part in every:
            for key, term in part.items():
                totals[key] = totals.get(key, 0) + term
        by_key = {entry.key: entry for entry in self.entries}
        return {
            key: digest_of_total(by_key[key].dtype, by_key[key].shape, total)
            for key, total in totals.items()
        }


def _sharing_idle_threads(fills: Writer, world: int, busy: int) -> Writer:
    """``fills`` (the call's writer, with the settings now), or, where only ``busy`` of
    the ``world`` writers have a file to write (fewer files than writers: a model under
    ``max_shard_size`` is one file), the same with the idle writers' threads too, up to
    the CPUs this process may use. A launcher gives each of its local writers its share
    of the cores; a lone busy writer would leave the others' idle. Same bytes."""
    if not 0 < busy < world:
        return fills
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = min(cores or 1, fills.threads * world // busy)
    return dataclasses.replace(fills, threads=max(fills.threads, threads))


class _Reporter:
    """This writer's progress: a bar on stderr (rank 0), a caller's hook, or nothing."""

    def __init__(self, progress: bool | ProgressHook | None, total: int, rank: int, world: int):
        self.total, self.done = total, 0
        self.hook = progress if callable(progress) else None
        shown = sys.stderr.isatty() if progress is None else progress is True
        label = "seed checkpoint" + (f" (writer 0 of {world})" if world > 1 else "")
        self.bar = ProgressBar(label, total) if shown and rank == 0 else None

    def __enter__(self) -> Callable[[int], None]:
        self.advance(0)  # the total is known before the first byte: the rate starts now
        return self.advance

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        if self.bar is not None:
            self.bar.update(self.done)
        if self.hook is not None:
            self.hook(self.done, self.total)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def _identity(entries: list[Entry], format: str, seed: int, max_shard_size: int) -> dict[str, Any]:
    """What the checkpoint is: a resumed run must plan the same (and the manifest says it)."""
    tensors: dict[str, Any] = {}
    for entry in entries:
        tensor: dict[str, Any] = {"shape": list(entry.shape), "dtype": str(entry.dtype)[6:]}
        if entry.alias_of is not None:
            tensor["alias_of"] = entry.alias_of
        tensors[entry.key] = tensor
    return {
        "format": MANIFEST_FORMAT,
        "checkpoint_format": format,
        "seed": seed,
        "max_shard_size": max_shard_size if format == "safetensors" else None,
        "tensors": tensors,
    }


def _check_arguments(
    model: object,
    path: object,
    seed: int,
    format: object,
    buffer_bytes: object,
    progress: object,
) -> tuple[int, Path]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    seed = check_seed(seed)
    if format not in ("safetensors", "dcp"):
        raise ShardInitError(f"format must be 'safetensors' or 'dcp', got {format!r}")
    if type(buffer_bytes) is not int or buffer_bytes < _MIB:
        raise ShardInitError(f"buffer_bytes must be an int >= 1 MiB ({_MIB}), got {buffer_bytes!r}")
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise TypeError(f"progress must be a bool, callable or None, got {type(progress).__name__}")
    return seed, Path(os.fspath(path))


def _group() -> tuple[int, int]:
    """(rank, world) of the default process group, or (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _agreed(world: int, step: Callable[[], _T]) -> _T:
    """Runs ``step`` on every rank; an error on any rank is raised on all of them (one
    line, the first failing rank's), so no rank waits at the next collective."""
    error: str | None = None
    result: Any = None
    try:
        result = step()
    except OSError as failure:
        error = f"save_seed_checkpoint: {os_error_text(failure)}"
    except ShardInitError as failure:
        error = str(failure)
    except Exception as failure:  # a peer must not wait for this rank forever
        if world == 1:
            raise
        lines = str(failure).strip().splitlines() or [""]
        error = f"save_seed_checkpoint: a writer failed: {type(failure).__name__}: {lines[0]}"
    if world > 1:
        errors = _gathered(world, error)
        error = next((e for e in errors if e is not None), None)
    if error is not None:
        raise ShardInitError(error)
    return result  # type: ignore[no-any-return]


def _gathered(world: int, value: _T) -> list[_T]:
    if world == 1:
        return [value]
    import torch.distributed as dist

    every: list[Any] = [None] * world
    dist.all_gather_object(every, value)
    return every


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # unreadable: treated as absent (the file is written again)


def _write_atomically(path: Path, text: str | bytes) -> None:
    """A reader sees the old file or the whole new one, never part of it."""
    partial = path.with_name(path.name + ".partial")
    if isinstance(text, bytes):
        partial.write_bytes(text)
    else:
        partial.write_text(text)
    os.replace(partial, path)


def manifest_of(path: str | os.PathLike[str]) -> Mapping[str, Any] | None:
    """The manifest of a complete checkpoint at ``path``, or None."""
    found = _read_json(Path(path) / MANIFEST_NAME)
    return found if isinstance(found, dict) else None
