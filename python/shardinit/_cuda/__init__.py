"""Generation on the CUDA device: a Triton kernel that gives the Rust core's bits
(docs/gpu.md), and the choice between it and the host path.

Only :mod:`.backend` is imported with shardinit; triton is imported when a CUDA fill
first needs the kernel (:mod:`.launch`, :mod:`.kernel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .backend import (
    CudaBackendWarning,
    get_cuda_backend,
    set_cuda_backend,
    use_device_kernel,
)

if TYPE_CHECKING:
    import torch

    from ..spec import ParamSpec

__all__ = [
    "CudaBackendWarning",
    "fill_box",
    "fill_flat",
    "get_cuda_backend",
    "set_cuda_backend",
    "use_device_kernel",
]


def fill_box(spec: ParamSpec, box: Sequence[tuple[int, int]], out: torch.Tensor) -> None:
    """The validated ``box`` of ``spec`` into the validated contiguous CUDA ``out``, by the
    device kernel (asynchronous on ``out``'s current stream, like any torch op)."""
    from . import launch

    launch.fill_box(spec, box, out)


def fill_flat(spec: ParamSpec, start: int, out: torch.Tensor) -> None:
    """Global elements ``[start, start + out.numel())`` of ``spec`` into the validated
    contiguous CUDA ``out``, by the device kernel."""
    from . import launch

    launch.fill_flat(spec, start, out)
