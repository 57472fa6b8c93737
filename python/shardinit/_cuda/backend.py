"""Which path fills CUDA destinations: the Triton device kernel or the host path (the
core's CPU fill copied in through pinned buffers). Both give the same bits.

The choice is ``set_cuda_backend``'s value, else the environment variable
``SHARDINIT_CUDA_BACKEND``, else ``"auto"``. It is read at the first CUDA fill, never at
import, so a bad environment value fails there, naming the variable.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from typing import Any

import torch

from .._caches import cached
from ..errors import CudaBackendWarning, ShardInitError

__all__ = [
    "BACKENDS",
    "ENV_VAR",
    "MIN_TRITON",
    "CudaBackendWarning",
    "get_cuda_backend",
    "kernel_unavailable_reason",
    "set_cuda_backend",
    "use_device_kernel",
]

#: The backend names: ``"auto"`` (the kernel where it is available, else the host path,
#: with one warning), ``"triton"`` (the kernel, or an error) and ``"host"``.
BACKENDS = ("auto", "triton", "host")
#: The environment variable that sets the initial backend.
ENV_VAR = "SHARDINIT_CUDA_BACKEND"
#: The oldest Triton the kernel is tested with (interpreter bits and compiled PTX).
MIN_TRITON = (3, 6)

_setting: str | None = None
_lock = threading.Lock()
_warned = False


def _check_backend(value: Any, what: str) -> str:
    if value not in BACKENDS:
        allowed = ", ".join(repr(name) for name in BACKENDS)
        raise ShardInitError(f"{what} must be one of {allowed}, got {value!r}")
    return str(value)


def set_cuda_backend(backend: str | None) -> None:
    """Selects how CUDA destinations are filled; ``None`` restores the default (the
    environment variable ``SHARDINIT_CUDA_BACKEND``, else ``"auto"``).

    Args:
        backend: ``"auto"``: the Triton kernel on the device where it is available
            (Triton >= 3.6 importable, an NVIDIA CUDA device, the Triton runtime starts),
            else the host path with one :class:`CudaBackendWarning` per process.
            ``"triton"``: the kernel, or a ``ShardInitError`` saying why not.
            ``"host"``: the host path (generated on the CPU, copied through pinned
            buffers); the right choice on GPUs with weak float64 (docs/gpu.md).

    Raises:
        TypeError: ``backend`` is not a str or None.
        ShardInitError: an unknown name.

    Example:
        >>> import shardinit
        >>> shardinit.set_cuda_backend("host")
        >>> shardinit.get_cuda_backend()
        'host'
        >>> shardinit.set_cuda_backend(None)
    """
    global _setting
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend must be a str or None, got {type(backend).__name__} {backend!r}")
    if backend is not None:
        backend = _check_backend(backend, "backend")
    with _lock:
        _setting = backend


def get_cuda_backend() -> str:
    """The backend the next CUDA fill uses: ``"auto"``, ``"triton"`` or ``"host"``.

    Raises:
        ShardInitError: ``SHARDINIT_CUDA_BACKEND`` holds an unknown name (and
            :func:`set_cuda_backend` was not called).
    """
    if _setting is not None:
        return _setting
    value = os.environ.get(ENV_VAR)
    if value is None or value == "":
        return "auto"
    return _check_backend(value, f"the environment variable {ENV_VAR}")


def _triton_version() -> tuple[int, int] | str:
    """Triton's (major, minor), or why it cannot be imported."""
    try:
        triton = importlib.import_module("triton")
    except ImportError as error:
        return f"triton cannot be imported ({error})"
    version = str(getattr(triton, "__version__", "0.0"))
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return f"triton reports an unreadable version {version!r}"
    return (major, minor)


def _runtime_reason(device: torch.device) -> str | None:
    """Starts Triton's CUDA runtime and runs the kernel once on ``device`` against the
    host path; why that failed, or None."""
    try:
        from .launch import self_check

        if not self_check(device):
            return "the kernel's self-check on this device gave bits that differ from the host"
    except Exception as error:  # any failure to start means: not available here
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"the Triton runtime did not start ({type(error).__name__}: {first_line})"
    return None


@cached
def kernel_unavailable_reason(device_index: int) -> str | None:
    """Why the device kernel cannot fill CUDA device ``device_index``, or None when it
    can (cached per process: the answer does not change while it runs)."""
    if torch.version.hip is not None:
        return "the device is ROCm (the kernel's lowering is verified for NVIDIA CUDA only)"
    version = _triton_version()
    if isinstance(version, str):
        return version
    if version < MIN_TRITON:
        floor = ".".join(map(str, MIN_TRITON))
        return f"triton {version[0]}.{version[1]} is older than {floor}, the tested minimum"
    return _runtime_reason(torch.device("cuda", device_index))


def use_device_kernel(device: torch.device) -> bool:
    """Whether a fill of a tensor on the CUDA ``device`` runs the device kernel.

    Raises:
        ShardInitError: the backend is ``"triton"`` and the kernel is unavailable, or
            ``SHARDINIT_CUDA_BACKEND`` holds an unknown name.
    """
    global _warned
    backend = get_cuda_backend()
    if backend == "host":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    reason = kernel_unavailable_reason(index)
    if reason is None:
        return True
    if backend == "triton":
        raise ShardInitError(
            f"the CUDA backend 'triton' is unavailable: {reason}. Use "
            f"shardinit.set_cuda_backend('auto') to fall back to the host path, or 'host'"
        )
    with _lock:
        first = not _warned
        _warned = True
    if first:
        warnings.warn(
            f"shardinit's CUDA kernel is unavailable ({reason}); CUDA fills use the host "
            f"path (same values, slower). shardinit.set_cuda_backend('host') selects it "
            f"without this warning",
            CudaBackendWarning,
            stacklevel=4,
        )
    return False
