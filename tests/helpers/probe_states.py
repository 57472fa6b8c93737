"""Init code run by shardinit and eagerly on the same model, compared by state: the
harness of the capture's probe files (tests/capture/test_capture_probes_51.py,
tests/capture/test_probe_ordinary.py), which differ in their models and comparisons."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

import shardinit


def state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``model``, unsharded (a DTensor's full tensor), copied."""
    return {
        name: (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
        for name, t in model.state_dict().items()
    }


def ours(model: nn.Module, init: Callable[[nn.Module], None], seed: int) -> dict[str, torch.Tensor]:
    """``model`` (on meta) materialized with ``init`` as its captured init code."""

    def init_fn() -> None:
        with torch.no_grad():
            init(model)

    shardinit.materialize(model, seed=seed, init_fn=init_fn)
    return state(model)


def eager(
    model: nn.Module, init: Callable[[nn.Module], None], seed: int
) -> dict[str, torch.Tensor]:
    """``model`` (on meta) materialized without init code (the values before it:
    shardinit's), then ``init`` run eagerly on the CPU."""
    shardinit.materialize(model, seed=seed)
    with torch.no_grad():
        init(model)
    return state(model)
