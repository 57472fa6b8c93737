"""Exceptions raised by shardinit.

``ShardInitError`` is a ``ValueError``: invalid values (out-of-range ranks, bad shapes,
bad initializer parameters, ``out`` tensors of the wrong shape). Wrong Python types
raise ``TypeError``. ``InternalError`` (a ``RuntimeError``) reports a bug instead of
crashing the interpreter. ``UnsupportedInitOpError`` (a ``ShardInitError``) names
what a captured ``init_fn`` did that cannot be replayed; ``CudaBackendWarning`` says CUDA
fills take the host path.
"""

from ._core import InternalError, ShapeTooLargeError, ShardInitError

__all__ = [
    "CudaBackendWarning",
    "InternalError",
    "ShapeTooLargeError",
    "ShardInitError",
    "UnsupportedInitOpError",
]


class UnsupportedInitOpError(ShardInitError):
    """``init_fn`` did something to a parameter that cannot be replayed shard-locally
    (or wrote a region that is not a box). The message names the parameter, the
    operation and where it was called from."""


class CudaBackendWarning(UserWarning):
    """The device kernel is unavailable, so CUDA fills take the host path (same bits,
    slower). Silence it with ``shardinit.set_cuda_backend("host")``."""
