"""shardinit for Megatron-core (tensor, pipeline, virtual-pipeline and expert parallel).

Build the model inside :func:`deferred_init` (megatron-core 0.16) or with
``perform_initialization=False`` (releases that tag their weights), then call
:func:`materialize` before building the optimizer: every rank fills exactly its
partitions, with no communication, and the gathered model is bit-identical for every
TP/PP/VPP/EP layout. See docs/megatron-deepspeed.md.

Example:
    >>> # import shardinit.megatron
    >>> # with shardinit.megatron.deferred_init():
    >>> #     model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=..., ...)
    >>> # shardinit.megatron.materialize(model, seed=1234, config=config)
"""

from __future__ import annotations

from ._integration.megatron import MegatronRules, deferred_init, materialize, partition_names

__all__ = ["MegatronRules", "deferred_init", "materialize", "partition_names"]
