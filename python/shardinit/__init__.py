"""shardinit: deterministic, shard-local initialization of sharded model weights.

Every element's value is a pure function of (seed, parameter name, global shape, dtype,
initializer, element index) under stream format v1 (Philox4x32-10), so any rank computes
exactly its slice and the gathered result is identical for every world size and layout.

Example:
    >>> import torch, shardinit
    >>> from shardinit import init
    >>> spec = shardinit.ParamSpec("layers.0.mlp.w1.weight", (1024, 512), torch.bfloat16,
    ...                            init.trunc_normal(std=0.02), seed=1234)
    >>> shard = shardinit.init_shard(spec, rank=1, world=8)   # rows 128:256
    >>> torch.equal(shard, shardinit.full(spec)[128:256])
    True
"""

from . import deepspeed, init, megatron, presets
from ._core import STREAM_FORMAT_VERSION
from ._core import __version__ as __version__
from ._cuda.backend import CudaBackendWarning, get_cuda_backend, set_cuda_backend
from ._integration.capture import (
    CapturedInit,
    UnsupportedInitOpError,
    capture_init,
    record_constructors,
)
from ._integration.fingerprint import fingerprint, fingerprint_model, model_digest
from ._integration.fsdp1 import fsdp1_param_init_fn
from ._integration.materialize import materialize
from ._names import canonical_name
from .errors import InternalError, ShapeTooLargeError, ShardInitError
from .shard import (
    box_of_shard,
    full,
    get_num_threads,
    init_box,
    init_flat,
    init_shard,
    set_num_threads,
)
from .spec import SUPPORTED_DTYPES, ParamSpec
from .stream import key, stream_words

__all__ = [
    "STREAM_FORMAT_VERSION",
    "SUPPORTED_DTYPES",
    "CapturedInit",
    "CudaBackendWarning",
    "InternalError",
    "ParamSpec",
    "ShapeTooLargeError",
    "ShardInitError",
    "UnsupportedInitOpError",
    "box_of_shard",
    "canonical_name",
    "capture_init",
    "deepspeed",
    "fingerprint",
    "fingerprint_model",
    "fsdp1_param_init_fn",
    "full",
    "get_cuda_backend",
    "get_num_threads",
    "init",
    "init_box",
    "init_flat",
    "init_shard",
    "key",
    "materialize",
    "megatron",
    "model_digest",
    "presets",
    "record_constructors",
    "set_cuda_backend",
    "set_num_threads",
    "stream_words",
]
