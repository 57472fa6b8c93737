"""``shardinit plan --generate RANK``: one rank's shards of a planned model, for real.

Every rank of a cluster runs the same shard-local computation with no communication, so
generating one rank here shows what each rank of the cluster spends: time, bytes and
peak memory. The values are those :func:`shardinit.materialize` gives the same model:
the same names (``named_parameters()``), global shapes and initializers (torch.nn's
default for the module type, :func:`shardinit._integration.defaults.default_init`), so
each local tensor equals the matching region of :func:`shardinit.full` of that spec.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from .. import init
from .._caches import cached
from .._integration.defaults import default_init
from .._integration.fingerprint import shard_term
from .._program import ParamRecord, Writer, base_ops
from ..init import Initializer
from ..shard import init_box, writer
from ..spec import SUPPORTED_DTYPES, ParamSpec
from ._args import rss_bytes
from .layout import LayoutPlan, ParamLayout
from .models import ParamKind

__all__ = ["RankShards", "generate_rank", "param_spec"]

# A plan names dtypes (it imports no torch); a spec takes the torch dtype of that name.
_TORCH_DTYPES = {name: dtype for dtype, name in SUPPORTED_DTYPES.items()}


@cached
def _initializer(kind: ParamKind) -> Initializer:
    """The initializer ``materialize`` chooses for a parameter of this kind by default."""
    if kind == "experts":  # torchtitan's GroupedExperts.init_weights; no torch.nn module
        return init.trunc_normal(std=0.02)
    # Meta modules only to ask for their defaults; the Embedding gets its weight handed in,
    # because its reset_parameters on meta imports torch._dynamo (~10 s on a loaded box).
    modules: dict[str, nn.Module] = {
        "linear": nn.Linear(1, 1, bias=False, device="meta"),
        "embedding": nn.Embedding(1, 1, _weight=torch.empty(1, 1, device="meta")),
        "norm": nn.RMSNorm(1, device="meta"),
    }
    default = default_init(modules[kind], "weight", {"weight": (1, 1)})
    assert default is not None and not default.zero_rows
    return default.init


def param_spec(param: ParamLayout, kind: ParamKind, seed: int) -> ParamSpec:
    """The spec of ``param`` that :func:`shardinit.materialize` would use."""
    dtype = _TORCH_DTYPES[param.dtype]
    return ParamSpec(param.name, param.shape, dtype, _initializer(kind), seed=seed)


def _reset_peak_rss() -> bool:
    """Resets ``VmHWM`` to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


@dataclass
class RankShards:
    """One rank's generated shards and what they cost.

    Attributes:
        tensors: each parameter's local shard (empty tensors for empty shards).
        terms: each parameter's fingerprint term (0 where this rank holds a replicated
            copy that another rank counts): added over all ranks, mod 2^64, they give
            every parameter's :func:`shardinit.fingerprint`.
        seconds: wall time of allocation and fill.
        cpu_seconds: CPU time of this process meanwhile, over all its threads (what the
            work costs, whatever else the machine runs).
        peak_rss: peak RSS while generating (None where it cannot be reset here).
    """

    rank: int
    tensors: dict[str, torch.Tensor]
    seconds: float
    cpu_seconds: float
    nbytes: int
    rss_before: int
    peak_rss: int | None
    terms: dict[str, int]

    @property
    def slice_fingerprint(self) -> str:
        """16 hex digits over the names and terms of this rank's shards."""
        text = "".join(f"{name}\0{term:016x}\0" for name, term in self.terms.items())
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _fill(fills: Writer, spec: ParamSpec, runs: list[list[tuple[int, int]]]) -> torch.Tensor:
    """The local tensor of ``runs``, written by materialize's one writer (``fills``)
    from the spec's one-source program."""
    local = torch.empty(
        [sum(b - a for a, b in dim) for dim in runs], dtype=spec.dtype, device="cpu"
    )
    record = ParamRecord(spec.name, spec.shape, spec.dtype, base_ops(spec.init, spec.shape))
    fills.write_runs(record, spec.seed, runs, local)
    return local


def generate_rank(
    plan: LayoutPlan, kinds: Mapping[str, ParamKind], rank: int, seed: int
) -> RankShards:
    """Generates ``rank``'s local shards of every parameter of ``plan``.

    Args:
        plan: the layout.
        kinds: each parameter's kind (:class:`shardinit.cli.models.ParamEntry`).
        rank: in ``[0, plan.world)``.
        seed: the materialize seed.

    Returns:
        The shards, time (allocation and fill), bytes, RSS and fingerprint terms.
    """
    for kind in set(kinds.values()):  # one-time set-up (thread pool, initializers) untimed
        init_box(
            ParamSpec("warm-up", (2, 2), torch.float32, _initializer(kind), seed=0),
            [(0, 1), (0, 1)],
        )
    # Parameters laid out alike (126 layers' wq) share their runs: computed once.
    regions = {layout: plan.runs(layout, rank) for layout in plan.distinct}
    tracked = _reset_peak_rss()
    rss_before = rss_bytes()
    start, cpu_start = time.perf_counter(), time.process_time()
    tensors: dict[str, torch.Tensor] = {}
    fills = writer()
    for param in plan.params:
        spec = param_spec(param, kinds[param.name], seed)
        tensors[param.name] = _fill(fills, spec, regions[param.layout])
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    peak = rss_bytes("VmHWM") if tracked else None
    terms = {
        param.name: shard_term(tensors[param.name], param.shape, regions[param.layout])
        if plan.counts_once(param, rank)
        else 0
        for param in plan.params
    }
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    return RankShards(rank, tensors, seconds, cpu_seconds, nbytes, rss_before, peak, terms)


def threads_note() -> str:
    """``N threads`` as shardinit generates (its own pool, or the CPU count)."""
    from ..shard import get_num_threads

    return f"{get_num_threads()} thread(s) of {os.cpu_count()} CPU(s)"
