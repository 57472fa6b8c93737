"""Constructor buffers of real libraries (issue 29, item 3): built on meta inside
``shardinit.record_constructors()`` and materialized without ``buffer_init``, each meta
buffer equals (``torch.equal``) the library's own CPU construction: diffusers'
``PatchEmbed`` sin-cos ``pos_embed`` (alone, SD3's cropped table, and in tiny DiT, PixArt
and SD3 transformers), open_clip's
causal ``attn_mask`` (``TextTransformer``, a tiny ``CLIP``), transformers BERT's
``position_ids`` / ``token_type_ids``. At worlds 1, 2 and 3 (gloo, ``fully_shard`` per
block and the root) the buffers are the same and the gathered parameters equal, byte for
byte, the unsharded materialization."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from materialize_workers import expect_equal
from torch import nn

import shardinit
from shardinit._integration.placements import is_dtensor

pytestmark = pytest.mark.clients


def _patch_embed(**extra: int) -> Callable[[], nn.Module]:
    embeddings = pytest.importorskip("diffusers.models.embeddings")
    shape = {"height": 8, "width": 8, "patch_size": 2, "in_channels": 3, "embed_dim": 16}
    return lambda: embeddings.PatchEmbed(**shape, **extra)


def _diffusers_model(kind: str) -> Callable[[], nn.Module]:
    diffusers = pytest.importorskip("diffusers")
    common = {"num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 4,
              "num_layers": 1, "sample_size": 8, "patch_size": 2}  # fmt: skip
    if kind == "DiT":
        return lambda: diffusers.DiTTransformer2DModel(**common, num_embeds_ada_norm=10)
    if kind == "PixArt":
        return lambda: diffusers.PixArtTransformer2DModel(
            **common, out_channels=8, cross_attention_dim=16, caption_channels=12
        )
    return lambda: diffusers.SD3Transformer2DModel(
        **common, joint_attention_dim=12, caption_projection_dim=16, pooled_projection_dim=8,
        out_channels=4, pos_embed_max_size=8,
    )  # fmt: skip


def _text_transformer() -> Callable[[], nn.Module]:
    transformer = pytest.importorskip("open_clip.transformer")
    return lambda: transformer.TextTransformer(
        context_length=7, vocab_size=50, width=16, heads=2, layers=1, output_dim=8
    )


def _clip() -> Callable[[], nn.Module]:
    open_clip = pytest.importorskip("open_clip")
    vision = {"image_size": 16, "patch_size": 8, "width": 16, "layers": 1, "head_width": 8}
    text = {"context_length": 7, "vocab_size": 50, "width": 16, "heads": 2, "layers": 1}
    return lambda: open_clip.CLIP(embed_dim=8, vision_cfg=vision, text_cfg=text)


def _bert() -> Callable[[], nn.Module]:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=24, max_position_embeddings=12,
    )  # fmt: skip
    return lambda: transformers.BertModel(config)


MODELS: dict[str, Callable[[], Callable[[], nn.Module]]] = {
    "diffusers PatchEmbed": _patch_embed,
    "diffusers PatchEmbed (SD3 crop)": lambda: _patch_embed(pos_embed_max_size=6),
    "diffusers DiT": lambda: _diffusers_model("DiT"),
    "diffusers PixArt": lambda: _diffusers_model("PixArt"),
    "diffusers SD3": lambda: _diffusers_model("SD3"),
    "open_clip TextTransformer": _text_transformer,
    "open_clip CLIP": _clip,
    "transformers BERT": _bert,
}


@pytest.mark.parametrize("name", list(MODELS))
def test_constructor_buffers_equal_the_library(name: str) -> None:
    make = MODELS[name]()
    with torch.device("meta"), shardinit.record_constructors():
        model = make()
    meta = [n for n, b in model.named_buffers() if b.is_meta]
    assert meta, "the model has meta buffers to compute"
    shardinit.materialize(model, seed=0)
    torch.manual_seed(0)
    reference = dict(make().named_buffers())
    ours = dict(model.named_buffers())
    for buffer in meta:
        assert ours[buffer].dtype == reference[buffer].dtype, buffer
        assert torch.equal(ours[buffer], reference[buffer]), buffer


# --------------------------------------------------------------------------- worlds 1-3

SHARDED = {"diffusers DiT": "transformer_blocks", "open_clip TextTransformer": "transformer"}


def _sharded(name: str, mesh: object) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    with torch.device("meta"), shardinit.record_constructors():
        model = MODELS[name]()()
    blocks = getattr(model, SHARDED[name])
    for block in getattr(blocks, "resblocks", blocks):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    shardinit.materialize(model, seed=0)
    return model


def _expect_as_unsharded(name: str, mesh: object) -> None:
    sharded = _sharded(name, mesh)
    with torch.device("meta"), shardinit.record_constructors():
        plain = MODELS[name]()()
    shardinit.materialize(plain, seed=0)
    params = dict(plain.named_parameters())
    for param_name, param in sharded.named_parameters():
        full = param.full_tensor() if is_dtensor(param) else param.detach()
        expect_equal(param_name, full, params[param_name].detach())
    reference = dict(MODELS[name]()().named_buffers())
    for buffer_name, buffer in sharded.named_buffers():
        expect_equal(buffer_name, buffer, reference[buffer_name])


@gloo_scenario(1, 2, 3)
def buffers_scenario(rank: int, world: int) -> Checks:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    checks: Checks = {}
    for name in sorted(SHARDED):
        check(checks, name, lambda name=name: _expect_as_unsharded(name, mesh))
    return checks


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(SHARDED))
def test_fsdp2_worlds_give_the_librarys_buffers(name: str, world: int) -> None:
    assert_check_passed(run_group(world, buffers_scenario), name)
