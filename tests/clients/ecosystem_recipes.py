"""The recipes of docs/capturing-init.md for the torch ecosystem beyond transformers and
torchtitan (issue 29): timm, torchvision, diffusers, peft, OLMo-core, open_clip and litgpt, each by
the
library's most natural route, quoted verbatim there (tests/clients/test_ecosystem.py fails
when a quote is stale) and run by that file at world sizes 1, 2 and 3.

Each recipe builds the model on the meta device, hands it to ``parallelize`` (the
caller's ``fully_shard`` / TP code: a no-op for one process, ``fully_shard`` on each block
and the root on a mesh), and materializes it with the library's own init code. ``seed`` is
shardinit's seed; the arguments before it say which model to build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

Parallelize = Callable[[nn.Module], object]


def timm_model(name: str, kwargs: dict[str, Any], parallelize: Parallelize, seed: int) -> Any:
    import timm
    import torch

    import shardinit

    # timm initializes in its constructors (each model's init_weights, timm's
    # trunc_normal_, torch.nn defaults): record_constructors keeps all of it.
    with torch.device("meta"), shardinit.record_constructors():
        model = timm.create_model(name, pretrained=False, **kwargs)
    parallelize(model)
    shardinit.materialize(model, seed=seed)
    return model


def torchvision_model(build: Callable[[], nn.Module], parallelize: Parallelize, seed: int) -> Any:
    import torch

    import shardinit

    # torchvision initializes in its constructors (kaiming_normal_, normal_, uniform_,
    # trunc_normal_, torch.nn defaults) and computes tables there (Swin's
    # relative_position_index, RegNet's stage widths): record_constructors keeps all of it.
    with torch.device("meta"), shardinit.record_constructors():
        model = build()
    parallelize(model)
    shardinit.materialize(model, seed=seed)
    return model


def diffusers_model(model_class: Any, config: dict[str, Any], parallelize: Parallelize,
                    seed: int) -> Any:  # fmt: skip
    import torch

    import shardinit

    # diffusers has no init method: its models' values (and buffers such as PatchEmbed's
    # sin-cos pos_embed) come from their constructors.
    with torch.device("meta"), shardinit.record_constructors():
        model = model_class.from_config(config)
    parallelize(model)
    shardinit.materialize(model, seed=seed)
    return model


def transformers_vision(model_class: Any, config: Any, parallelize: Parallelize,
                        seed: int) -> Any:  # fmt: skip
    import torch

    import shardinit

    # Inside record_constructors, post_init runs transformers' init as on the CPU (on
    # meta it skips it: init_weights runs it there, and finds it done here). The buffers
    # its constructors compute (Swin's relative_position_index) come from
    # record_constructors.
    with torch.device("meta"), shardinit.record_constructors():
        model = model_class(config)
    parallelize(model)
    shardinit.materialize(model, seed=seed, init_fn=model.init_weights)
    return model


def peft_adapter(model_class: Any, config: Any, peft_config: Any, parallelize: Parallelize,
                 seed: int) -> Any:  # fmt: skip
    import torch
    from peft import get_peft_model

    import shardinit

    # Eager's order, all recorded: the base model's constructors, then transformers' own
    # init (post_init's, run as on the CPU inside record_constructors; init_weights finds
    # it done, and runs it where post_init skips it on meta), then peft's constructors,
    # which initialize the adapters (LoRA, IA3, LoHa, ...) over the base's init values.
    # An adapter computed from the base's values (PiSSA's SVD, OLoRA's QR, MiCA's SVD) is
    # refused by materialize, named.
    with shardinit.record_constructors():
        with torch.device("meta"):
            base = model_class(config)
        base.init_weights()
        with torch.device("meta"):
            model = get_peft_model(base, peft_config)
    parallelize(model)
    shardinit.materialize(model, seed=seed)
    return model


def olmo_core_transformer(config: Any, mesh: Any, seed: int) -> Any:
    import torch

    import shardinit

    model = config.build(init_device="meta")
    if mesh is not None:
        model.apply_fsdp(dp_mesh=mesh)
    # OLMo-core's own init entry point (it starts with self.to_empty(device)).
    shardinit.materialize(
        model, seed=seed, init_fn=lambda: model.init_weights(device=torch.device("cpu"))
    )
    return model


def open_clip_model(embed_dim: int, vision_cfg: Any, text_cfg: Any, parallelize: Parallelize,
                    seed: int) -> Any:  # fmt: skip
    import open_clip
    import torch

    import shardinit

    # CLIP's init runs in its towers' constructors (init_parameters), and its attn_mask
    # buffer and logit_scale are set there too.
    with torch.device("meta"), shardinit.record_constructors():
        model = open_clip.CLIP(embed_dim, vision_cfg, text_cfg)
    parallelize(model)
    shardinit.materialize(model, seed=seed)
    return model


def litgpt_gpt(config: Any, parallelize: Parallelize, seed: int) -> Any:
    import torch
    from litgpt.model import GPT

    import shardinit

    # RMSNorm's ones come from the constructor; the weights from GPT._init_weights ("meant
    # to be used with gpt.apply(gpt._init_weights)"); the rope cache from reset_parameters,
    # as litgpt's own training scripts call it after init.
    with torch.device("meta"), shardinit.record_constructors():
        model = GPT(config)
    parallelize(model)

    def init_fn() -> None:
        model.apply(model._init_weights)
        model.reset_parameters()

    shardinit.materialize(model, seed=seed, init_fn=init_fn)
    return model
