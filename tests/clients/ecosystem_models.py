"""Tiny models of timm 1.0.31, torchvision 0.29.2, diffusers 0.42.1, peft 0.21.2,
OLMo-core 3.0.0, open_clip 3.3.0, litgpt 0.5.13 and a transformers vision model (issue
29), built from configs, nothing downloaded.

Each :class:`Setup` materializes its model by a recipe of ``ecosystem_recipes`` (the
library's most natural route) and builds the library's own CPU init without shardinit,
the reference its values are compared with."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ecosystem_recipes as recipes
import torch
from torch import nn

#: materialize(parallelize, mesh, seed): the recipe run (``mesh`` only for OLMo-core,
#: which shards itself with its own ``apply_fsdp``).
Materialize = Callable[[recipes.Parallelize, Any, int], nn.Module]


@dataclass(frozen=True)
class Setup:
    """One tiny model and its recipe.

    Attributes:
        name: the test id.
        materialize: the recipe, on the meta device, sharded by its ``parallelize``.
        reference: the library's own CPU init (run after ``torch.manual_seed``).
    """

    name: str
    materialize: Materialize
    reference: Callable[[], nn.Module]


# --------------------------------------------------------------------------- timm

#: name -> (timm model name, create_model kwargs), tiny versions of each family.
TIMM: dict[str, tuple[str, dict[str, Any]]] = {
    "vit": ("vit_tiny_patch16_224", {"img_size": 32, "patch_size": 8, "depth": 2}),
    "vit_jax": (
        "vit_tiny_patch16_224",
        {"img_size": 32, "patch_size": 8, "depth": 2, "weight_init": "jax"},
    ),
    "convnext": ("convnext_atto", {"depths": (1, 1, 1, 1), "dims": (16, 32, 64, 128)}),
    "swin": (
        "swin_tiny_patch4_window7_224",
        {"img_size": 32, "embed_dim": 16, "depths": (1, 1), "num_heads": (1, 2), "window_size": 4},
    ),
    "resnet": ("resnet10t", {"stem_width": 8, "channels": (8, 16, 32, 64)}),
    # TinyNet E: timm's EfficientNet at its smallest width and depth multipliers.
    "efficientnet": ("tinynet_e", {}),
    "mobilenetv3": ("mobilenetv3_small_050", {}),
    # Families no issue names (issue 29: "checked against models nobody listed").
    "deit_distilled": (
        "deit_tiny_distilled_patch16_224",
        {"img_size": 32, "patch_size": 8, "depth": 2},
    ),
    "beit": (
        "beit_base_patch16_224",
        {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 2},
    ),
    "eva02": (
        "eva02_tiny_patch14_224",
        {"img_size": 28, "patch_size": 7, "depth": 2, "embed_dim": 64, "num_heads": 2},
    ),
    "regnet": ("regnetx_002", {}),
    # Swin V2: relative_coords_table (log-spaced, sign * log2(1 + |x|)) and the index.
    "swinv2": (
        "swinv2_tiny_window8_256",
        {"img_size": 32, "embed_dim": 16, "depths": (1, 1), "num_heads": (2, 4), "window_size": 4},
    ),
    "convnextv2": ("convnextv2_atto", {"depths": (1, 1, 1, 1), "dims": (16, 32, 64, 128)}),
}


def _timm(name: str) -> Setup:
    model, kwargs = TIMM[name]
    kwargs = {"num_classes": 10, **kwargs}

    def reference() -> nn.Module:
        import timm

        return timm.create_model(model, pretrained=False, **kwargs)

    return Setup(
        f"timm_{name}",
        lambda parallelize, mesh, seed: recipes.timm_model(model, kwargs, parallelize, seed),
        reference,
    )


# --------------------------------------------------------------------------- torchvision


def _torchvision_builds() -> dict[str, Callable[[], nn.Module]]:
    """name -> a tiny torchvision classifier, built from its classes' own arguments
    (imported when asked: torchvision imports its datasets' dependencies)."""
    from torchvision.models import (
        convnext,
        densenet,
        efficientnet,
        maxvit,
        mnasnet,
        mobilenetv3,
        regnet,
        resnet,
        shufflenetv2,
        squeezenet,
        swin_transformer,
        vision_transformer,
    )

    swin = swin_transformer
    swin_args = {"patch_size": [4, 4], "embed_dim": 16, "depths": [1, 1], "num_heads": [1, 2],
                 "window_size": [4, 4], "num_classes": 10}  # fmt: skip
    return {
        "resnet": lambda: resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=10),
        # Its stage widths come from round(log(...)).int().tolist() in the constructor.
        "regnet": lambda: regnet.RegNet(
            regnet.BlockParams.from_init_params(
                depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25
            ),
            num_classes=10,
            stem_width=8,
        ),
        "mobilenet_v3": lambda: mobilenetv3.mobilenet_v3_small(num_classes=10, width_mult=0.25),
        "efficientnet": lambda: efficientnet.EfficientNet(
            efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)[0],
            0.2,
            num_classes=10,
        ),
        "swin": lambda: swin.SwinTransformer(**swin_args),
        "swin_v2": lambda: swin.SwinTransformer(
            **swin_args, block=swin.SwinTransformerBlockV2, downsample_layer=swin.PatchMergingV2
        ),
        "vit": lambda: vision_transformer.VisionTransformer(
            image_size=32,
            patch_size=8,
            num_layers=1,
            num_heads=2,
            hidden_dim=16,
            mlp_dim=32,
            num_classes=10,
        ),
        "convnext": lambda: convnext.ConvNeXt(
            [convnext.CNBlockConfig(8, 16, 1), convnext.CNBlockConfig(16, None, 1)], num_classes=10
        ),
        "maxvit": lambda: maxvit.MaxVit(
            input_size=(32, 32),
            stem_channels=8,
            partition_size=2,
            block_channels=[8, 16],
            block_layers=[1, 1],
            head_dim=4,
            stochastic_depth_prob=0.0,
            num_classes=10,
        ),
        "densenet": lambda: densenet.DenseNet(
            growth_rate=4, block_config=(1, 1), num_init_features=8, num_classes=10
        ),
        "shufflenet": lambda: shufflenetv2.ShuffleNetV2([1, 1, 1], [8, 16, 32, 64, 128], 10),
        "squeezenet": lambda: squeezenet.SqueezeNet("1_1", num_classes=10),
        "mnasnet": lambda: mnasnet.MNASNet(0.25, num_classes=10),
    }


#: The torchvision classifiers of :func:`_torchvision_builds` (no issue names them:
#: issue 51's "checked against more models").
TORCHVISION = (
    "resnet", "regnet", "mobilenet_v3", "efficientnet", "swin", "swin_v2", "vit", "convnext",
    "maxvit", "densenet", "shufflenet", "squeezenet", "mnasnet",
)  # fmt: skip


def _torchvision(name: str) -> Setup:
    def build() -> nn.Module:
        return _torchvision_builds()[name]()

    return Setup(
        f"torchvision_{name}",
        lambda parallelize, mesh, seed: recipes.torchvision_model(build, parallelize, seed),
        build,
    )


# --------------------------------------------------------------------------- diffusers

_UNET_BLOCKS = {"block_out_channels": (8, 16), "norm_num_groups": 4, "layers_per_block": 1,
                "cross_attention_dim": 16, "attention_head_dim": 2}  # fmt: skip
_DIT = {"num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 4, "num_layers": 1,
        "sample_size": 8, "patch_size": 2}  # fmt: skip
#: name -> (diffusers class name, config).
DIFFUSERS: dict[str, tuple[str, dict[str, Any]]] = {
    "dit": ("DiTTransformer2DModel", {**_DIT, "num_embeds_ada_norm": 10}),
    "pixart": (
        "PixArtTransformer2DModel",
        {**_DIT, "out_channels": 8, "cross_attention_dim": 16, "caption_channels": 16},
    ),
    "sd3": (
        "SD3Transformer2DModel",
        {
            "sample_size": 8,
            "patch_size": 2,
            "in_channels": 4,
            "num_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 16,
            "caption_projection_dim": 16,
            "pooled_projection_dim": 16,
            "out_channels": 4,
            "pos_embed_max_size": 16,
        },
    ),
    "flux": (
        "FluxTransformer2DModel",
        {
            "patch_size": 1,
            "in_channels": 4,
            "num_layers": 1,
            "num_single_layers": 1,
            "attention_head_dim": 8,
            "num_attention_heads": 2,
            "joint_attention_dim": 16,
            "pooled_projection_dim": 16,
            "axes_dims_rope": (2, 2, 4),
        },
    ),
    "unet2d_condition": (
        "UNet2DConditionModel",
        {
            **_UNET_BLOCKS,
            "sample_size": 8,
            "in_channels": 4,
            "out_channels": 4,
            "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
            "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
        },
    ),
    "autoencoder_kl": (
        "AutoencoderKL",
        {
            "block_out_channels": (8, 16),
            "norm_num_groups": 4,
            "layers_per_block": 1,
            "down_block_types": ("DownEncoderBlock2D",) * 2,
            "latent_channels": 4,
            "up_block_types": ("UpDecoderBlock2D",) * 2,
        },
    ),
    "controlnet": (
        "ControlNetModel",
        {
            **_UNET_BLOCKS,
            "in_channels": 4,
            "conditioning_embedding_out_channels": (4, 8),
            "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
        },
    ),
    # Beyond the list.
    "unet2d": (
        "UNet2DModel",
        {
            "sample_size": 8,
            "in_channels": 3,
            "out_channels": 3,
            "block_out_channels": (8, 16),
            "norm_num_groups": 4,
            "layers_per_block": 1,
            "down_block_types": ("DownBlock2D", "AttnDownBlock2D"),
            "up_block_types": ("AttnUpBlock2D", "UpBlock2D"),
        },
    ),
}


def _diffusers(name: str) -> Setup:
    class_name, config = DIFFUSERS[name]

    def model_class() -> Any:
        import diffusers

        return getattr(diffusers, class_name)

    return Setup(
        f"diffusers_{name}",
        lambda parallelize, mesh, seed: recipes.diffusers_model(
            model_class(), config, parallelize, seed
        ),
        lambda: model_class().from_config(config),
    )


# --------------------------------------------------------------------------- peft

#: name -> (peft config class name, its arguments), on an untied tiny Llama, each through
#: ``peft_adapter``: LoRA, then other tuners (beyond issue 29's list).
PEFT: dict[str, tuple[str, dict[str, Any]]] = {
    "lora": ("LoraConfig", {"r": 4, "target_modules": ["q_proj", "v_proj"]}),
    "lora_gaussian": ("LoraConfig", {"r": 4, "target_modules": ["q_proj", "v_proj"],
                                     "init_lora_weights": "gaussian"}),
    "lora_embed_tokens": ("LoraConfig", {"r": 4,
                          "target_modules": ["q_proj", "v_proj", "embed_tokens"]}),
    "ia3": ("IA3Config", {"target_modules": ["k_proj", "v_proj", "down_proj"],
                          "feedforward_modules": ["down_proj"]}),
    "loha": ("LoHaConfig", {"r": 4, "target_modules": ["q_proj", "v_proj"]}),
    "lokr": ("LoKrConfig", {"r": 4, "target_modules": ["q_proj", "v_proj"]}),
    "adalora": ("AdaLoraConfig", {"init_r": 4, "target_modules": ["q_proj", "v_proj"],
                                  "total_step": 10}),
}  # fmt: skip
# BOFT (its buffers built by indexing with tensors) and LN tuning (deep copies moved with
# module.to(weight.device)) pass too, but warn on this machine (BOFT: no ninja for its
# CUDA extension; LN tuning: Llama's RMSNorm is "unsupported"), and warnings fail tests.


# --------------------------------------------------------------------------- transformers


#: name -> (transformers config and model class names, config kwargs): vision models
#: whose constructors compute buffers (Swin's relative_position_index, Swin V2's
#: relative_coords_table; issue 29's table names Swin and ConvNeXt, the rest are beyond it).
TRANSFORMERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "swin": ("SwinConfig", "SwinModel", {"image_size": 32, "patch_size": 4, "embed_dim": 16,
             "depths": [1, 1], "num_heads": [1, 2], "window_size": 4}),
    "swinv2": ("Swinv2Config", "Swinv2Model", {"image_size": 32, "patch_size": 4,
               "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 4], "window_size": 4}),
    "convnext": ("ConvNextConfig", "ConvNextModel", {"hidden_sizes": [8, 16, 32, 64],
                 "depths": [1, 1, 1, 1]}),
    "vit": ("ViTConfig", "ViTModel", {"image_size": 32, "patch_size": 8, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}),
    "dinov2": ("Dinov2Config", "Dinov2Model", {"image_size": 32, "patch_size": 8,
               "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}),
    "beit": ("BeitConfig", "BeitModel", {"image_size": 32, "patch_size": 8, "hidden_size": 32,
             "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
             "use_relative_position_bias": True}),
}  # fmt: skip


def _transformers(name: str) -> Setup:
    config_name, model_name, kwargs = TRANSFORMERS[name]

    def build() -> tuple[Any, Any]:
        import transformers

        config = getattr(transformers, config_name)(**kwargs)
        return getattr(transformers, model_name), config

    def reference() -> nn.Module:
        model_class, config = build()
        return model_class(config)

    return Setup(
        f"transformers_{name}",
        lambda parallelize, mesh, seed: recipes.transformers_vision(*build(), parallelize, seed),
        reference,
    )


def _llama() -> tuple[Any, Any]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=64, pad_token_id=0,
        tie_word_embeddings=False,
    )  # fmt: skip
    return LlamaForCausalLM, config


def _peft(name: str) -> Setup:
    class_name, kwargs = PEFT[name]

    def peft_config() -> Any:
        import peft

        return getattr(peft, class_name)(**kwargs)

    def reference() -> nn.Module:
        from peft import get_peft_model

        model_class, config = _llama()
        model: nn.Module = get_peft_model(model_class(config), peft_config())
        return model

    return Setup(
        f"peft_{name}",
        lambda parallelize, mesh, seed: recipes.peft_adapter(
            *_llama(), peft_config(), parallelize, seed
        ),
        reference,
    )


# --------------------------------------------------------------------------- the others


def _olmo_config() -> Any:
    with warnings.catch_warnings():
        # olmo_core.nn imports fla (its vision code): at import it warns "Triton is not
        # supported on current platform, roll back to CPU." (UserWarning), "Flash
        # Attention is not installed" (ImportWarning).
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", ImportWarning)
        from olmo_core.nn.transformer import TransformerConfig

    return TransformerConfig.olmo2_1M(vocab_size=1000, n_layers=2)


def _olmo_reference() -> nn.Module:
    model = _olmo_config().build(init_device="cpu")
    model.init_weights(device=torch.device("cpu"))
    return model  # type: ignore[no-any-return]


def _open_clip_configs() -> tuple[int, Any, Any]:
    from open_clip import CLIPTextCfg, CLIPVisionCfg

    vision = CLIPVisionCfg(layers=1, width=64, head_width=32, patch_size=8, image_size=32)
    text = CLIPTextCfg(context_length=16, vocab_size=1000, width=64, heads=2, layers=1)
    return 32, vision, text


def _open_clip_reference() -> nn.Module:
    import open_clip

    return open_clip.CLIP(*_open_clip_configs())  # type: ignore[no-any-return]


def _litgpt_config() -> Any:
    from litgpt import Config

    return Config(
        n_layer=2, n_embd=64, n_head=4, n_query_groups=2, vocab_size=1000,
        padded_vocab_size=1000, block_size=64, norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP", intermediate_size=128, bias=False,
    )  # fmt: skip


def _litgpt_reference() -> nn.Module:
    from litgpt.model import GPT

    model = GPT(_litgpt_config())
    model.apply(model._init_weights)
    return model


SETUPS: dict[str, Setup] = {
    s.name: s
    for s in [
        *(_timm(name) for name in TIMM),
        *(_torchvision(name) for name in TORCHVISION),
        *(_diffusers(name) for name in DIFFUSERS),
        *(_peft(name) for name in PEFT),
        *(_transformers(name) for name in TRANSFORMERS),
        Setup(
            "olmo_core",
            lambda parallelize, mesh, seed: recipes.olmo_core_transformer(
                _olmo_config(), mesh, seed
            ),
            _olmo_reference,
        ),
        Setup(
            "open_clip",
            lambda parallelize, mesh, seed: recipes.open_clip_model(
                *_open_clip_configs(), parallelize, seed
            ),
            _open_clip_reference,
        ),
        Setup(
            "litgpt",
            lambda parallelize, mesh, seed: recipes.litgpt_gpt(_litgpt_config(), parallelize, seed),
            _litgpt_reference,
        ),
    ]
}


def cpu_reference(name: str, seed: int = 0) -> nn.Module:
    """The library's own CPU init of setup ``name``, without shardinit."""
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        # peft 0.21.2 calls transformers' deprecated is_gradient_checkpointing (a
        # FutureWarning), as do the recipes (test_ecosystem.py ignores it there too).
        warnings.simplefilter("ignore", FutureWarning)
        return SETUPS[name].reference()
