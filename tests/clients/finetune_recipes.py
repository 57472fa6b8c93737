"""The fine-tuning recipe of docs/capturing-init.md: peft LoRA on FSDP2, the base loaded
from a checkpoint, the adapters filled by shardinit. docs/capturing-init.md quotes each
function of this module verbatim, and tests/clients/test_finetune.py checks that the
quotes are current and runs the recipe on gloo at W = 1, 2, 3.

Each recipe is user code: it imports what it uses, so a block copied from the doc runs as
written inside a process group (torchrun). ``model_class`` and ``config`` are a
transformers model class and its config (``LlamaForCausalLM``, ``LlamaConfig(...)``);
``lora_config`` is a ``peft.LoraConfig``; ``checkpoint`` the base model's full state
dict (its own keys, e.g. ``model.layers.0.self_attn.q_proj.weight``), on every rank.
"""

from __future__ import annotations

from typing import Any


def peft_lora_from_checkpoint(
    model_class: Any, config: Any, lora_config: Any, checkpoint: dict[str, Any], seed: int
) -> Any:
    import torch
    import torch.distributed as dist
    from peft import get_peft_model
    from peft.tuners.lora import LoraLayer
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import shardinit

    # Built and wrapped on meta inside record_constructors: modules_to_save deep-copies
    # lm_head, and the copy is recorded as a copy of the original.
    with torch.device("meta"), shardinit.record_constructors():
        base = model_class(config)
        model = get_peft_model(base, lora_config)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in base.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)

    def base_key(name: str) -> str:  # peft's name of a base tensor -> the checkpoint's
        name = name.removeprefix("base_model.model.")
        for inserted in (".base_layer.", ".original_module.", ".modules_to_save.default."):
            name = name.replace(inserted, ".")
        return name

    # The checkpoint under peft's names: the head's copy (modules_to_save) gets the
    # checkpoint's head too, as peft copies a loaded head.
    keys = {name: base_key(name) for name in model.state_dict()}
    state = {name: checkpoint[key] for name, key in keys.items() if key in checkpoint}
    # What the checkpoint lacks, named before loading: set_model_state_dict adds the
    # model's own meta tensors to the dict it is given and reports no missing keys.
    missing = [name for name in keys if name not in state]
    options = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(model, state, options=options)  # distributes onto the shards

    def init_fn() -> None:  # the whole model's init: transformers', then peft's adapters'
        base.init_weights()  # also computes the rotary buffers, which stay on meta
        for module in model.modules():
            if isinstance(module, LoraLayer):
                module.reset_lora_parameters("default", lora_config.init_lora_weights)

    # Only the adapters get values (those of the whole model's materialize).
    shardinit.materialize(model, seed=seed, init_fn=init_fn, only=missing)
    return model
