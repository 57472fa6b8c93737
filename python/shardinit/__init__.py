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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._core import STREAM_FORMAT_VERSION
from ._core import __version__ as __version__
from .errors import (
    CudaBackendWarning,
    InternalError,
    ShapeTooLargeError,
    ShardInitError,
    UnsupportedInitOpError,
)

if TYPE_CHECKING:  # what _LAZY imports on first access, spelled out for type checkers
    from . import deepspeed, init, megatron, presets
    from ._cuda.backend import get_cuda_backend, set_cuda_backend
    from ._integration.capture import CapturedInit, capture_init, record_constructors
    from ._integration.checkpoint import save_seed_checkpoint
    from ._integration.fingerprint import fingerprint, fingerprint_model, model_digest
    from ._integration.fsdp1 import fsdp1_param_init_fn
    from ._integration.materialize import materialize
    from ._names import canonical_name
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

#: The public names that need torch, by the module that defines them (a submodule: the
#: name itself). They are imported on first access (PEP 562), so ``import shardinit``
#: and ``shardinit plan`` do not import torch; tests/packaging/test_public_names.py
#: checks that this table and the ``TYPE_CHECKING`` imports above agree.
_LAZY: dict[str, str] = {
    "deepspeed": ".deepspeed",
    "init": ".init",
    "megatron": ".megatron",
    "presets": ".presets",
    "get_cuda_backend": "._cuda.backend",
    "set_cuda_backend": "._cuda.backend",
    "CapturedInit": "._integration.capture",
    "capture_init": "._integration.capture",
    "record_constructors": "._integration.capture",
    "save_seed_checkpoint": "._integration.checkpoint",
    "fingerprint": "._integration.fingerprint",
    "fingerprint_model": "._integration.fingerprint",
    "model_digest": "._integration.fingerprint",
    "fsdp1_param_init_fn": "._integration.fsdp1",
    "materialize": "._integration.materialize",
    "canonical_name": "._names",
    "box_of_shard": ".shard",
    "full": ".shard",
    "get_num_threads": ".shard",
    "init_box": ".shard",
    "init_flat": ".shard",
    "init_shard": ".shard",
    "set_num_threads": ".shard",
    "SUPPORTED_DTYPES": ".spec",
    "ParamSpec": ".spec",
    "key": ".stream",
    "stream_words": ".stream",
}

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
    "save_seed_checkpoint",
    "set_cuda_backend",
    "set_num_threads",
    "stream_words",
]


if not TYPE_CHECKING:  # type checkers see the imports above, and flag unknown names

    def __getattr__(name: str) -> Any:
        """Imports a name of :data:`_LAZY` on first access, then keeps it (PEP 562)."""
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(_LAZY[name], __name__)
        value = module if _LAZY[name] == f".{name}" else getattr(module, name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included (what ``dir(shardinit)`` lists)."""
    return sorted({*globals(), *_LAZY})
