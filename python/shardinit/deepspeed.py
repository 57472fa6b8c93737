"""shardinit for DeepSpeed ZeRO-3.

:func:`shardinit.materialize` fills ZeRO-3 models: each rank writes exactly its padded
flat partition of every parameter (``ds_tensor``, and hpZ's ``ds_secondary_tensor``)
with zero padding, with no communication; the gathered model is bit-identical for every
data-parallel size. Fill before ``deepspeed.initialize``. :func:`Init` builds the model
without zero.Init's full-size module init and per-parameter broadcast. See
docs/megatron-deepspeed.md.

Example:
    >>> # with shardinit.deepspeed.Init(config_dict_or_path=ds_config):
    >>> #     model = MyModel()
    >>> # shardinit.materialize(model, seed=1234, init_fn=captured)   # captured on meta
    >>> # engine, *_ = deepspeed.initialize(model=model, config=ds_config, ...)
"""

from __future__ import annotations

from typing import Any

from ._integration.zero3 import CHECKED_DEEPSPEED, no_broadcast_init

__all__ = ["CHECKED_DEEPSPEED", "Init"]


def Init(*args: Any, **kwargs: Any) -> Any:
    """``deepspeed.zero.Init`` that skips the work shardinit replaces: use it as a
    context manager in place of ``deepspeed.zero.Init(*args, **kwargs)`` (same
    arguments), then call :func:`shardinit.materialize` before ``deepspeed.initialize``.

    * ``torch.nn.init`` is a no-op while modules are built, so no full-size parameter is
      generated (on CPU, the full ``torch.empty`` is never touched and never becomes
      resident; on GPU it is allocated for a moment per module, as with zero.Init);
    * each parameter is partitioned without zero.Init's broadcast from rank 0;
    * each transformers model is tied as its post-init would tie it
      (``model.tie_weights()``), which ``transformers.initialization.no_init_weights``
      turns off, so the model has the library's ties.

    The partitions hold uninitialized memory until :func:`shardinit.materialize` fills
    them (it does so without ``overwrite=True``; partitions made by stock zero.Init hold
    their module's init values and need ``overwrite=True``).

    Returns:
        The context manager (a ``deepspeed.zero.Init`` subclass instance).

    Raises:
        TypeError: ``config_dict_or_path`` (or DeepSpeed's deprecated ``config``), by
            keyword or position, not a dict, a path (str or ``os.PathLike``, passed on
            as a str) or None; DeepSpeed checks the other arguments.
        ShardInitError: a path that names no file (and is not a base64-encoded config,
            which DeepSpeed also takes).
    """
    return no_broadcast_init(*args, **kwargs)
