"""Tiny real client models (transformers 5.23: Llama, GPT-2, BERT, ModernBERT, T5, and
Mamba, Mamba2, Jamba, Qwen3-Next, NemotronH, Kimi Linear, Whisper, RWKV, CLIP, whose
init code computes values;
torchtitan 0.3.0: Llama3, Qwen3.5) built from configs,
nothing downloaded, and the init flows a user runs on them.

Each entry of :data:`MODELS` builds a fresh model (on the current default device, so a
``torch.device("meta")`` context gives a meta model), names its init code, and says
what the library's own CPU init gives each parameter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from tiny_configs import HEADS, HIDDEN, LAYERS, VOCAB, hf_llama_config, titan_llama3_config
from torch import nn


def _hf(kind: str) -> nn.Module:
    import transformers as tf

    common = {"vocab_size": VOCAB, "num_attention_heads": HEADS}
    if kind in ("llama_tied", "llama_untied"):
        return tf.LlamaForCausalLM(hf_llama_config(tied=kind == "llama_tied"))
    if kind == "gpt2":
        config = tf.GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=64,
                               vocab_size=VOCAB)  # fmt: skip
        return tf.GPT2LMHeadModel(config)
    if kind == "bert":
        config = tf.BertConfig(
            hidden_size=HIDDEN, num_hidden_layers=LAYERS, intermediate_size=128,
            max_position_embeddings=64, pad_token_id=0, **common,
        )  # fmt: skip
        return tf.BertForMaskedLM(config)
    if kind == "modernbert":
        config = tf.ModernBertConfig(
            hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
            max_position_embeddings=64, pad_token_id=0, **common,
        )  # fmt: skip
        return tf.ModernBertForMaskedLM(config)
    assert kind == "t5", kind
    config = tf.T5Config(
        d_model=HIDDEN, d_kv=16, d_ff=128, num_layers=LAYERS, num_heads=HEADS,
        vocab_size=VOCAB, pad_token_id=0, decoder_start_token_id=0,
    )  # fmt: skip
    return tf.T5ForConditionalGeneration(config)


def _mamba() -> nn.Module:
    import transformers as tf

    config = tf.MambaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, state_size=8, num_hidden_layers=LAYERS,
        expand=2, conv_kernel=4, time_step_rank=8,
    )  # fmt: skip
    return tf.MambaForCausalLM(config)


def _mamba2() -> nn.Module:
    import transformers as tf

    config = tf.Mamba2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, state_size=8, num_hidden_layers=LAYERS,
        expand=2, conv_kernel=4, num_heads=8, head_dim=16, n_groups=1, time_step_rank=8,
    )  # fmt: skip
    return tf.Mamba2ForCausalLM(config)


def _jamba() -> nn.Module:
    import transformers as tf

    config = tf.JambaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=2, num_experts=2,
        num_experts_per_tok=1, expert_layer_period=2, expert_layer_offset=1,
        attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_d_conv=4,
        mamba_expand=2, mamba_dt_rank=8, pad_token_id=0,
    )  # fmt: skip
    return tf.JambaForCausalLM(config)


def _qwen3_next() -> nn.Module:
    import transformers as tf

    config = tf.Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=2, head_dim=16,
        linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, num_experts=2, num_experts_per_tok=1,
        moe_intermediate_size=32, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    return tf.Qwen3NextForCausalLM(config)


def _nemotron_h() -> nn.Module:
    """A Mamba2 / attention / MoE hybrid. Its init (``rescale_prenorm_residual``, on by
    default) reads the Mamba ``out_proj``'s own values back into it:
    ``kaiming_uniform_(p); copy_(p, p / sqrt(num_hidden_layers))``."""
    import transformers as tf

    config = tf.NemotronHConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=3,
        layers_block_type=["mamba", "attention", "moe"], num_attention_heads=HEADS,
        num_key_value_heads=2, head_dim=16, mamba_num_heads=8, mamba_head_dim=16,
        ssm_state_size=8, n_groups=1, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, moe_shared_expert_intermediate_size=32, pad_token_id=0,
    )  # fmt: skip
    return tf.NemotronHForCausalLM(config)


def _kimi_linear() -> nn.Module:
    """Kimi Linear's forget gate: ``copy_(A_log, uniform_(A_log, 1, 16).log())`` (the
    parameter's own values back into it, a (1, 1, heads, 1) shape) and
    ``uniform_(dt_bias, ...)``, then ``dt = dt_bias.exp().clamp_min(1e-4)`` and
    ``copy_(dt_bias, dt + log(-expm1(-dt)))``."""
    import transformers as tf

    config = tf.KimiLinearConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=HEADS, moe_intermediate_size=32,
        num_local_experts=4, num_experts_per_tok=2, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16, linear_head_dim=16, linear_num_heads=HEADS,
        max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    return tf.KimiLinearForCausalLM(config)


def _whisper() -> nn.Module:
    import transformers as tf

    config = tf.WhisperConfig(
        vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=128,
        decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=1500,
        max_target_positions=32, pad_token_id=0, decoder_start_token_id=1, bos_token_id=1,
        eos_token_id=2,
    )  # fmt: skip
    # 1500 positions, as every Whisper checkpoint has: its sinusoid table's sin half, at
    # the cos half's columns, takes arguments beyond TRIG_MAX (never selected, so never
    # refused; 32 positions stayed below it and hid a refusal).
    return tf.WhisperForConditionalGeneration(config)


def _rwkv() -> nn.Module:
    """RWKV's ``_init_weights`` computes its time-decay and time-mix tables from Python
    lists (``torch.tensor``, ``pow``, ``+ 0.3``), sets ``time_first`` by
    ``ones_like(time_first * log(0.3) + zigzag)`` (the parameter's shape only) and its
    Linear and Embedding weights by ``orthogonal_``."""
    import transformers as tf

    config = tf.RwkvConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        attention_hidden_size=HIDDEN, intermediate_size=128, context_length=64,
    )  # fmt: skip
    return tf.RwkvForCausalLM(config)


def _clip() -> nn.Module:
    """CLIP sets ``logit_scale = nn.Parameter(torch.tensor(2.6592))`` in its constructor
    (not in ``_init_weights``): built under :func:`shardinit.record_constructors`."""
    import transformers as tf

    import shardinit

    layers = {"hidden_size": HIDDEN, "intermediate_size": 128, "num_hidden_layers": 1,
              "num_attention_heads": HEADS}  # fmt: skip
    config = tf.CLIPConfig(
        text_config={"vocab_size": VOCAB, "max_position_embeddings": 32, "bos_token_id": 1,
                     "eos_token_id": 2, **layers},
        vision_config={"image_size": 32, "patch_size": 8, **layers},
        projection_dim=32,
    )  # fmt: skip
    with shardinit.record_constructors():
        return tf.CLIPModel(config)


def _titan(fuse_qkv: bool, tied: bool = False) -> nn.Module:
    return titan_llama3_config(fuse_qkv, tied).build()


def _titan_qwen3_5() -> nn.Module:
    """torchtitan 0.3.0's Qwen3.5 (Gated DeltaNet: ``param.data.uniform_(0.01, 16.0)
    .log_()``), one DeltaNet and one attention layer, a one-layer vision encoder. Its
    model code imports fla (fla-core and flash-linear-attention 0.6.0, installed without
    dependencies)."""
    import warnings

    with warnings.catch_warnings():
        # fla at import: "Triton is not supported on current platform, roll back to
        # CPU." (UserWarning), "Flash Attention is not installed" (ImportWarning).
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", ImportWarning)
        from torchtitan.models import qwen3_5 as q
        from torchtitan.models.common import Embedding, Linear
        from torchtitan.models.qwen3_5.rope import MRoPE

    rope = MRoPE.Config(dim=16, max_seq_len=64, theta=10_000_000.0, mrope_section=[3, 3, 2])
    config = q.Qwen35Model.Config(
        vocab_size=VOCAB, dim=HIDDEN, norm=q._offset_norm(HIDDEN),
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB, embedding_dim=HIDDEN, param_init=q._EMBEDDING_INIT
        ),
        lm_head=Linear.Config(
            in_features=HIDDEN, out_features=VOCAB, param_init=q._output_linear_init(HIDDEN)
        ),
        layers=q._build_qwen35_layers(
            rope=rope, attn_backend="flex", n_layers=LAYERS, dim=HIDDEN, n_heads=HEADS,
            n_kv_heads=2, head_dim=16, rotary_dim=16, hidden_dim=128, n_key_heads=2,
            n_value_heads=4, key_head_dim=16, value_head_dim=16, full_attention_interval=2,
        ),
        vision_encoder=q._qwen35_vision_encoder_config(
            dim=HIDDEN, ffn_dim=128, num_layers=1, num_heads=HEADS, patch_size=16,
            temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=HIDDEN,
            num_position_embeddings=16,
        ),
    )  # fmt: skip
    return config.build()


@dataclass(frozen=True)
class ClientModel:
    """One tiny model.

    Attributes:
        name: the test id.
        build: makes it (on the current default device).
        init: its own init code, as a user passes it as ``init_fn``.
        blocks: the submodules ``fully_shard`` wraps one by one (then the root).
        tp_plan: whether transformers has a TP plan for it (the 2x2 FSDP2+TP check).
    """

    name: str
    build: Callable[[], nn.Module]
    init: Callable[[nn.Module], Callable[[], object]]
    blocks: Callable[[nn.Module], list[nn.Module]]
    tp_plan: bool = False


def _hf_blocks(model: nn.Module) -> list[nn.Module]:
    # Llama's DecoderLayer, GPT-2's Block, BERT's Layer, T5's Block, Mamba's Block; the
    # outermost only (Jamba's and Qwen3-Next's SparseMoeBlock sit inside a layer).
    names = ("DecoderLayer", "Block", "Layer")
    blocks: list[nn.Module] = []
    inside: set[int] = set()
    for m in model.modules():
        name = type(m).__name__
        if id(m) in inside or not name.endswith(names) or name.endswith("LayerNorm"):
            continue
        blocks.append(m)
        inside.update(id(sub) for sub in m.modules())
    return blocks


def _titan_blocks(model: nn.Module) -> list[nn.Module]:
    return list(model.layers.values())  # type: ignore[operator]


def _init_weights(model: nn.Module) -> Callable[[], object]:
    return model.init_weights  # type: ignore[return-value]


def _apply_init(model: nn.Module) -> Callable[[], object]:
    return lambda: model.apply(model._init_weights)  # type: ignore[operator]


MODELS: dict[str, ClientModel] = {
    m.name: m
    for m in [
        # transformers 5.23's apply_tensor_parallelism cannot shard the tied lm_head
        # (KeyError 'lm_head.weight'): the TP check runs on the untied Llama.
        ClientModel("llama_tied", lambda: _hf("llama_tied"), _init_weights, _hf_blocks),
        ClientModel("llama_untied", lambda: _hf("llama_untied"), _init_weights, _hf_blocks, True),
        ClientModel("llama_apply", lambda: _hf("llama_tied"), _apply_init, _hf_blocks),
        ClientModel("gpt2", lambda: _hf("gpt2"), _init_weights, _hf_blocks),
        ClientModel("bert", lambda: _hf("bert"), _init_weights, _hf_blocks),
        ClientModel("bert_apply", lambda: _hf("bert"), _apply_init, _hf_blocks),
        ClientModel("t5", lambda: _hf("t5"), _init_weights, _hf_blocks),
        # Its root initializes the tied decoder weight with a depth-scaled std: the
        # embedding's own init must win (issue 14, defect 5).
        ClientModel("modernbert", lambda: _hf("modernbert"), _init_weights, _hf_blocks),
        # Init code that computes values (issue 19): init programs.
        ClientModel("mamba", _mamba, _init_weights, _hf_blocks),
        ClientModel("mamba2", _mamba2, _init_weights, _hf_blocks),
        ClientModel("jamba", _jamba, _init_weights, _hf_blocks),
        ClientModel("qwen3_next", _qwen3_next, _init_weights, _hf_blocks),
        ClientModel("nemotron_h", _nemotron_h, _init_weights, _hf_blocks),
        ClientModel("kimi_linear", _kimi_linear, _init_weights, _hf_blocks),
        ClientModel("whisper", _whisper, _init_weights, _hf_blocks),
        ClientModel("rwkv", _rwkv, _init_weights, _hf_blocks),
        ClientModel("clip", _clip, _init_weights, _hf_blocks),
        ClientModel("titan_fused", lambda: _titan(True), _init_weights, _titan_blocks),
        ClientModel("titan_unfused", lambda: _titan(False), _init_weights, _titan_blocks),
        ClientModel("titan_tied", lambda: _titan(True, tied=True), _init_weights, _titan_blocks),
        ClientModel("titan_qwen3_5", _titan_qwen3_5, _init_weights, _titan_blocks),
    ]
}


def cpu_reference(name: str, seed: int = 0) -> nn.Module:
    """The library's own CPU init, without shardinit: transformers initializes in its
    constructor (untied, then tied); torchtitan builds and then runs ``init_weights``."""
    torch.manual_seed(seed)
    model = MODELS[name].build()
    if name.startswith("titan"):
        with torch.no_grad():
            model.init_weights()  # type: ignore[operator]
    return model
