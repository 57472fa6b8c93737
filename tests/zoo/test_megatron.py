"""shardinit.megatron against real megatron-core on gloo CPU.

Every rank builds tiny GPT / MoE models at several TP/PP/EP layouts inside
``shardinit.megatron.deferred_init()``, fills them, and checks each local partition
against ``shardinit.full`` of the parameter's canonical name and GLOBAL shape, cut with
Megatron's own split formula (``torch.split`` into ``world * stride`` pieces, rank r
takes ``r::world``). Expected names, shapes, partitions and initializers are written out
here from the model's dimensions, independently of shardinit. Equal to ``full`` on every
rank of every layout means equal across layouts, bit for bit.

The layout test runs Megatron's own CPU init (``_initialize_affine_weight_cpu``) with an
init method that copies a shardinit master, and compares with the fill.

One process group per world size serves all checks (starting ranks costs seconds).
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from zoo_checks import expect_refusal

import shardinit
import shardinit.megatron
from shardinit import init

pytestmark = [
    pytest.mark.zoo,
    pytest.mark.distributed,
]

SEED = 20261130
HIDDEN, HEADS, GROUPS, FFN, VOCAB, SEQ, LAYERS, EXPERTS = 16, 4, 2, 24, 64, 8, 4, 4
STD = 0.02

Checks = dict[str, str | None]


# --------------------------------------------------------------------------- rank side


def _megatron() -> Any:
    warnings.simplefilter("ignore")  # Megatron warns about missing Apex/TE on import
    from megatron.core import parallel_state

    return parallel_state


def _config(**overrides: Any) -> Any:
    from megatron.core.transformer.transformer_config import TransformerConfig

    fields: dict[str, Any] = dict(
        num_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_query_groups=GROUPS,
        ffn_hidden_size=FFN,
        gated_linear_unit=True,
        add_bias_linear=False,
        use_cpu_initialization=True,
        perform_initialization=True,  # inside deferred_init: tag only, nothing generated
        init_method_std=STD,
    )
    fields.update(overrides)
    fields.setdefault("pipeline_dtype", fields.get("params_dtype", torch.float32))
    return TransformerConfig(**fields)


def _gpt(config: Any, moe: bool, tied: bool = False, deferred: bool = True) -> Any:
    """This rank's stage of the GPT, built inside ``deferred_init()`` (else as Megatron
    builds it: with ``use_cpu_initialization``, its CPU path)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    ps = _megatron()
    spec = get_gpt_layer_local_spec(
        num_experts=EXPERTS if moe else None, moe_grouped_gemm=False if moe else None
    )
    with shardinit.megatron.deferred_init() if deferred else contextlib.nullcontext():
        return GPTModel(
            config,
            spec,
            vocab_size=VOCAB,
            max_sequence_length=SEQ,
            pre_process=ps.is_pipeline_first_stage(),
            post_process=ps.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=tied,
        )


def _expected(name: str) -> tuple[tuple[int, ...], init.Initializer, int | None, int]:
    """(global shape, initializer, partition dim or None, stride) of a canonical name,
    from the model's dimensions (Megatron's init choices for the local GPT spec)."""
    kv = HIDDEN // HEADS
    out_std = STD / math.sqrt(2 * LAYERS)
    leaf = name.split(".")[-2] + "." + name.split(".")[-1]
    table: dict[str, tuple[tuple[int, ...], init.Initializer, int | None, int]] = {
        "word_embeddings.weight": ((VOCAB, HIDDEN), init.normal(0.0, STD), 0, 1),
        "position_embeddings.weight": ((SEQ, HIDDEN), init.normal(0.0, STD), None, 1),
        "linear_qkv.weight": (((HEADS + 2 * GROUPS) * kv, HIDDEN), init.normal(0.0, STD), 0, 1),
        "linear_proj.weight": ((HIDDEN, HIDDEN), init.normal(0.0, out_std), 1, 1),
        "linear_fc1.weight": ((2 * FFN, HIDDEN), init.normal(0.0, STD), 0, 2),
        "linear_fc2.weight": ((HIDDEN, FFN), init.normal(0.0, out_std), 1, 1),
        "router.weight": ((EXPERTS, HIDDEN), init.normal(0.0, STD), None, 1),
        "output_layer.weight": ((VOCAB, HIDDEN), init.normal(0.0, STD), 0, 1),
    }
    if leaf in table:
        return table[leaf]
    if name.endswith("layernorm.weight"):
        return (HIDDEN,), init.ones(), None, 1
    if name.endswith("layernorm.bias"):
        return (HIDDEN,), init.zeros(), None, 1
    raise AssertionError(f"unexpected parameter {name}")


def _megatron_split(
    full: torch.Tensor, dim: int | None, stride: int, rank: int, world: int
) -> torch.Tensor:
    """Megatron's CPU split (tensor_parallel.layers._initialize_affine_weight_cpu)."""
    if dim is None or world == 1:
        return full
    pieces = torch.split(full, full.shape[dim] // (world * stride), dim=dim)
    return torch.cat(pieces[rank::world], dim=dim)


def _check_model(chunks: list[Any], dtype: torch.dtype, expected_names: set[str]) -> None:
    """Every local partition equals Megatron's split of ``shardinit.full``."""
    ps = _megatron()
    names = shardinit.megatron.partition_names(chunks)
    params = {
        (f"{index}." if len(chunks) > 1 else "") + name: param
        for index, chunk in enumerate(chunks)
        for name, param in chunk.named_parameters()
    }
    seen = set()
    for raw, param in params.items():
        canonical = names[raw]
        seen.add(canonical)
        shape, initializer, dim, stride = _expected(canonical)
        expert = ".local_experts." in canonical
        tp_rank = (
            ps.get_expert_tensor_parallel_rank() if expert else ps.get_tensor_model_parallel_rank()
        )
        tp_world = (
            ps.get_expert_tensor_parallel_world_size()
            if expert
            else ps.get_tensor_model_parallel_world_size()
        )
        full = shardinit.full(shardinit.ParamSpec(canonical, shape, dtype, initializer, seed=SEED))
        want = _megatron_split(full, dim, stride, tp_rank, tp_world)
        assert param.dtype == dtype, f"{raw}: dtype {param.dtype}"
        assert torch.equal(param.detach(), want), f"{raw} ({canonical}) differs from full"
    assert seen == expected_names, sorted(seen ^ expected_names)


def _gpt_names(
    moe: bool, layers: Iterable[int], first: bool, last: bool, experts: Iterable[int] = ()
) -> set[str]:
    """The canonical names a rank holds: its layers, its experts (global indices)."""
    names = set()
    if first:
        names |= {"embedding.word_embeddings.weight", "embedding.position_embeddings.weight"}
    for layer in layers:
        prefix = f"decoder.layers.{layer}."
        names |= {
            prefix + n
            for n in ("self_attention.linear_qkv.weight", "self_attention.linear_proj.weight")
        }
        names |= {
            prefix + f"{norm}.{attr}"
            for norm in ("input_layernorm", "pre_mlp_layernorm")
            for attr in ("weight", "bias")
        }
        if moe:
            names.add(prefix + "mlp.router.weight")
            names |= {
                prefix + f"mlp.experts.local_experts.{e}.linear_fc{k}.weight"
                for e in experts
                for k in (1, 2)
            }
        else:
            names |= {prefix + "mlp.linear_fc1.weight", prefix + "mlp.linear_fc2.weight"}
    if last:
        names |= {"decoder.final_layernorm.weight", "decoder.final_layernorm.bias"}
        names.add("output_layer.weight")
    return names


def _layout(tp: int = 1, pp: int = 1, ep: int = 1, etp: int | None = None) -> None:
    ps = _megatron()
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
    )


def _gpt_case(
    tp: int,
    pp: int,
    dtype: torch.dtype,
    moe: bool = False,
    ep: int = 1,
    etp: int | None = None,
    tied: bool = False,
) -> Callable[[], None]:
    def run() -> None:
        _layout(tp, pp, ep, etp)
        ps = _megatron()
        extra: dict[str, Any] = {}
        if moe:
            extra = dict(
                num_moe_experts=EXPERTS,
                moe_router_topk=2,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=etp or tp,
            )
        config = _config(
            tensor_model_parallel_size=tp,
            pipeline_model_parallel_size=pp,
            params_dtype=dtype,
            bf16=dtype == torch.bfloat16,
            **extra,
        )
        model = _gpt(config, moe, tied)
        if dtype == torch.bfloat16:  # as Megatron's training loop wraps (and casts) it
            from megatron.core.transformer.module import Float16Module

            model = Float16Module(config, model)
        shardinit.megatron.materialize(model, seed=SEED, config=config)
        stage, per_stage = ps.get_pipeline_model_parallel_rank(), LAYERS // pp
        layers = range(stage * per_stage, (stage + 1) * per_stage)
        per_rank = EXPERTS // ep
        first_expert = ps.get_expert_model_parallel_rank() * per_rank
        experts = range(first_expert, first_expert + per_rank)  # the global expert indices
        names = _gpt_names(moe, layers, stage == 0, stage == pp - 1, experts)
        if tied:  # the output layer uses the embedding's weight
            names.discard("output_layer.weight")
        _check_model([model], dtype, names)

    return run


def _megatron_cpu_layouts() -> None:
    """Megatron's own CPU init of the GPT (``use_cpu_initialization``, every rank seeded
    alike): at TP2 each partition is Megatron's split of the TP1 tensor (TP-invariant);
    at PP2 the second stage draws its layers and output layer from the seed again, so
    they are not TP1's (not PP-invariant; Megatron's training script seeds ``seed + 100 *
    pp_rank`` on top). shardinit's values at the same layouts: the ``gpt_*`` cases."""
    ps = _megatron()

    def build(tp: int, pp: int) -> dict[str, torch.Tensor]:
        _layout(tp, pp)
        torch.manual_seed(SEED)
        config = _config(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        model = _gpt(config, False, deferred=False)
        names = shardinit.megatron.partition_names(model)
        return {names[raw]: param.detach() for raw, param in model.named_parameters()}

    # Every layout is built before anything is asserted: a rank that stopped early would
    # leave the other waiting in the next layout's process groups.
    reference = build(1, 1)
    tp2, tp_rank = build(2, 1), ps.get_tensor_model_parallel_rank()
    pp2, stage = build(1, 2), ps.get_pipeline_model_parallel_rank()
    assert set(reference) == _gpt_names(False, range(LAYERS), True, True)
    for name, local in tp2.items():
        _, _, dim, stride = _expected(name)
        want = _megatron_split(reference[name], dim, stride, tp_rank, 2)
        assert torch.equal(local, want), f"TP2 {name}: not Megatron's split of TP1's"
    differ = {name for name, tensor in pp2.items() if not torch.equal(tensor, reference[name])}
    drawn_again = set()  # the second stage's random tensors (norms are ones and zeros)
    if stage == 1:
        drawn_again = {n for n in pp2 if n.endswith(".weight") and "layernorm" not in n}
    assert differ == drawn_again, sorted(differ ^ drawn_again)


def _preset_equals_recorded() -> None:
    """The config preset gives what Megatron's recorded init methods give; deferred_init
    puts Megatron's own init functions back on exit."""
    _layout(2, 1)
    from megatron.core.tensor_parallel import layers
    from megatron.core.transformer.moe import experts

    originals = (layers._initialize_affine_weight_cpu, layers._initialize_affine_weight_gpu)
    config = _config(tensor_model_parallel_size=2)
    recorded, preset = _gpt(config, False), _gpt(config, False)
    # experts.py imports the two functions by name up to megatron-core 0.16, not in 0.19.
    for holder in (h for h in (layers, experts) if hasattr(h, "_initialize_affine_weight_cpu")):
        restored = (holder._initialize_affine_weight_cpu, holder._initialize_affine_weight_gpu)
        assert restored == originals, holder.__name__
    for param in preset.parameters():
        if hasattr(param, "_shardinit_init_method"):
            del param._shardinit_init_method
    shardinit.megatron.materialize(recorded, seed=SEED, config=config)
    shardinit.megatron.materialize(preset, seed=SEED, config=config)
    for (name, a), (_, b) in zip(
        recorded.named_parameters(), preset.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def _tied_last_stage() -> None:
    """PP2: the last stage's copy of a tied output layer (``shared_embedding``) gets the
    embedding's bits. (Megatron's tied PP>1 constructor needs CUDA, so the attribute it
    sets is set here by hand on an untied model.)"""
    _layout(1, 2)
    ps = _megatron()
    config = _config(pipeline_model_parallel_size=2)
    model = _gpt(config, False)
    if ps.is_pipeline_last_stage():
        model.output_layer.weight.shared_embedding = True
    shardinit.megatron.materialize(model, seed=SEED, config=config)
    weight = (
        model.output_layer.weight
        if ps.is_pipeline_last_stage()
        else (model.embedding.word_embeddings.weight)
    )
    spec = shardinit.ParamSpec(
        "embedding.word_embeddings.weight",
        (VOCAB, HIDDEN),
        torch.float32,
        init.normal(0.0, STD),
        seed=SEED,
    )
    assert torch.equal(weight.detach(), shardinit.full(spec))


def _vpp_chunks() -> None:
    """PP2 x VPP2: each rank's two chunks hold global layers {r, r + 2}, named as PP1."""
    ps = _megatron()
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(
        pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = _config(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2)
    stage = ps.get_pipeline_model_parallel_rank()
    chunks = []
    with shardinit.megatron.deferred_init():
        for vp in range(2):
            first = ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=vp)
            last = ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=vp)
            chunks.append(
                GPTModel(
                    config,
                    get_gpt_layer_local_spec(),
                    vocab_size=VOCAB,
                    max_sequence_length=SEQ,
                    pre_process=first,
                    post_process=last,
                    vp_stage=vp,
                )
            )
    shardinit.megatron.materialize(chunks, seed=SEED, config=config)
    layers = {stage, stage + 2}
    names = _gpt_names(False, sorted(layers), stage == 0, stage == 1)
    _check_model(chunks, torch.float32, names)
    held = {
        int(n.split(".")[2])
        for n in shardinit.megatron.partition_names(chunks).values()
        if n.startswith("decoder.layers.")
    }
    assert held == layers, held


def _layout_against_megatron_split(dtype: torch.dtype) -> Callable[[], None]:
    """Megatron's own CPU init of a shardinit master equals the fill: Column (stride
    1, 2, 3), Row (1, 2), Vocab."""

    def run() -> None:
        _layout(2, 1)
        from megatron.core import tensor_parallel

        config = _config(tensor_model_parallel_size=2, params_dtype=dtype)
        cases: list[tuple[str, Callable[[Callable[..., Any]], Any]]] = []
        for stride in (1, 2, 3):
            cases.append(
                (
                    f"column{stride}",
                    lambda method, s=stride: tensor_parallel.ColumnParallelLinear(
                        8, 12 * s, config=config, init_method=method, bias=False, stride=s
                    ),
                )
            )
        for stride in (1, 2):
            cases.append(
                (
                    f"row{stride}",
                    lambda method, s=stride: tensor_parallel.RowParallelLinear(
                        12 * s,
                        8,
                        config=config,
                        init_method=method,
                        bias=False,
                        input_is_parallel=True,
                        skip_bias_add=False,
                        stride=s,
                    ),
                )
            )
        cases.append(
            (
                "vocab",
                lambda method: tensor_parallel.VocabParallelEmbedding(
                    20, 8, init_method=method, config=config
                ),
            )
        )
        for name, build in cases:
            with shardinit.megatron.deferred_init():
                filled = build(torch.nn.init.xavier_uniform_)
            shardinit.megatron.materialize(filled, seed=SEED, config=config)
            global_shape = tuple(filled.weight.shape)
            dim = filled.weight.partition_dim
            global_shape = tuple(s * 2 if d == dim else s for d, s in enumerate(global_shape))
            spec32 = shardinit.ParamSpec(
                "weight", global_shape, torch.float32, init.xavier_uniform(), seed=SEED
            )
            master = shardinit.full(spec32)
            reference = build(lambda w, m=master: w.copy_(m))  # Megatron's own split
            assert torch.equal(filled.weight, reference.weight), name

    return run


def _tags_without_initialization() -> bool:
    """megatron-core 0.17+ tags its weights with their partition under
    ``perform_initialization=False``; 0.16 tags only biases (Megatron-Bridge#992)."""
    from megatron.core import __version__
    from packaging.version import Version

    return Version(__version__) >= Version("0.17")


def _guards() -> None:
    ps = _megatron()
    _layout(2, 1)
    config = _config(tensor_model_parallel_size=2, perform_initialization=False)
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    untagged = GPTModel(
        config, get_gpt_layer_local_spec(), vocab_size=VOCAB, max_sequence_length=SEQ
    )
    if _tags_without_initialization():  # the documented route there: no deferred_init
        shardinit.megatron.materialize(untagged, seed=SEED, config=config)
        _check_model([untagged], torch.float32, _gpt_names(False, range(LAYERS), True, True))
    else:
        qkv = untagged.decoder.layers[0].self_attention.linear_qkv.weight
        before = qkv.detach().clone().view(torch.int32)  # uninitialized memory may be NaN
        with expect_refusal("without partition attributes"):
            shardinit.megatron.materialize(untagged, seed=SEED, config=config)
        assert torch.equal(before, qkv.detach().view(torch.int32)), "refused, yet written"

    config = _config(tensor_model_parallel_size=2)
    model = _gpt(config, False)
    fc2 = model.decoder.layers[1].mlp.linear_fc2.weight
    fc2.main_param = fc2.detach().float()  # what Megatron's optimizers set
    with expect_refusal("already copied"):
        shardinit.megatron.materialize(model, seed=SEED, config=config)
    del fc2.main_param

    qkv = model.decoder.layers[1].self_attention.linear_qkv.weight
    qkv.partition_sizes = [4, 4]  # as 0.19's Mamba in_proj: blocks split each on its own
    with expect_refusal(r"linear_qkv.weight: packs blocks .*partition_sizes \[4, 4\]"):
        shardinit.megatron.materialize(model, seed=SEED, config=config)
    del qkv.partition_sizes

    model.decoder.layers[0].mlp.linear_fc1.weight.data = torch.empty(
        model.decoder.layers[0].mlp.linear_fc1.weight.shape, dtype=torch.float8_e4m3fn
    )
    with expect_refusal("quantized or fp8"):
        shardinit.megatron.materialize(model, seed=SEED, config=config)
    with expect_refusal("fp8_param"):
        shardinit.megatron.materialize(
            _gpt(config, False),
            seed=SEED,
            config=_config(tensor_model_parallel_size=2, fp8="e4m3", fp8_param=True),
        )
    del ps


def _rules_override() -> None:
    """Rules win over recorded init methods; a callable rule is captured on the GLOBAL
    shape (xavier sees global fans)."""
    _layout(2, 1)
    config = _config(tensor_model_parallel_size=2)
    model = _gpt(config, False)
    rules = {
        "decoder.layers.*.mlp.linear_fc2.weight": torch.nn.init.xavier_normal_,
        "*layernorm.weight": init.constant(0.5),
    }
    shardinit.megatron.materialize(model, seed=SEED, config=config, rules=rules)
    ps = _megatron()
    rank = ps.get_tensor_model_parallel_rank()
    spec = shardinit.ParamSpec(
        "decoder.layers.2.mlp.linear_fc2.weight",
        (HIDDEN, FFN),
        torch.float32,
        init.xavier_normal(),
        seed=SEED,
    )
    want = _megatron_split(shardinit.full(spec), 1, 1, rank, 2)
    assert torch.equal(model.decoder.layers[2].mlp.linear_fc2.weight, want)
    assert bool((model.decoder.final_layernorm.weight == 0.5).all())


def _config_edges() -> None:
    """A TransformerConfig init method that is not ``fn(tensor)`` and a class given as a
    rule are TypeErrors naming the field or the rule, raised before anything is written;
    a nested deferred_init() is refused and leaves Megatron's functions unpatched."""
    _layout(2, 1)
    config = _config(tensor_model_parallel_size=2)
    model = _gpt(config, False)
    embedding = model.embedding.word_embeddings.weight
    before = embedding.detach().clone().view(torch.int32)  # uninitialized: compare bits
    fields = {attr: getattr(config, attr) for attr in ("init_method", "output_layer_init_method")}
    for bad, got in ((None, "NoneType None"), (0.02, "float 0.02")):
        edited = SimpleNamespace(**fields, embedding_init_method=bad)
        with expect_refusal(
            rf"^config.embedding_init_method must be an init callable fn\(tensor\).*, got {got}$",
            TypeError,
        ):
            shardinit.megatron.materialize(model, seed=SEED, config=edited)
    edited = SimpleNamespace(**fields, embedding_init_method=lambda tensor, std: None)
    with expect_refusal(r"^config.embedding_init_method .* takes \(tensor, std\)", TypeError):
        shardinit.megatron.materialize(model, seed=SEED, config=edited)
    with expect_refusal(r"^rules\['\*'\] .*, got the class Normal \(an instance", TypeError):
        shardinit.megatron.materialize(model, seed=SEED, config=config, rules={"*": init.Normal})
    assert torch.equal(before, embedding.detach().view(torch.int32)), "refused, yet written"
    from megatron.core.tensor_parallel import layers

    original = layers._initialize_affine_weight_cpu
    nested = r"^shardinit.megatron.deferred_init\(\) called while .* is already running"
    deferred = shardinit.megatron.deferred_init
    with expect_refusal(nested), deferred(), deferred():
        pass
    assert layers._initialize_affine_weight_cpu is original
    shardinit.megatron.materialize(_gpt(config, False), seed=SEED, config=config)  # free again


def _run_all(cases: dict[str, Callable[[], None]]) -> Checks:
    from materialize_workers import check

    checks: Checks = {}
    for name, case in cases.items():
        check(checks, name, case)
    return checks


def scenario_world2(rank: int, world: int) -> Checks:
    cases: dict[str, Callable[[], None]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        tag = str(dtype).split(".")[-1]
        cases[f"gpt_tp1_pp1_{tag}"] = _gpt_case(1, 1, dtype)
        cases[f"gpt_tp2_pp1_{tag}"] = _gpt_case(2, 1, dtype)
        cases[f"gpt_tp1_pp2_{tag}"] = _gpt_case(1, 2, dtype)
        cases[f"layout_{tag}"] = _layout_against_megatron_split(dtype)
    cases["gpt_tp2_tied"] = _gpt_case(2, 1, torch.float32, tied=True)
    cases["moe_ep1"] = _gpt_case(1, 1, torch.float32, moe=True)
    cases["moe_ep2"] = _gpt_case(1, 1, torch.float32, moe=True, ep=2)
    cases["preset_equals_recorded"] = _preset_equals_recorded
    cases["megatron_cpu_layouts"] = _megatron_cpu_layouts
    cases["tied_last_stage"] = _tied_last_stage
    cases["vpp"] = _vpp_chunks
    cases["rules"] = _rules_override
    cases["guards"] = _guards
    cases["config_edges"] = _config_edges
    return _run_all(cases)


def scenario_world4(rank: int, world: int) -> Checks:
    return _run_all(
        {
            "gpt_tp2_pp2": _gpt_case(2, 2, torch.bfloat16),
            "moe_ep2_tp2": _gpt_case(2, 1, torch.float32, moe=True, ep=2, etp=2),
        }
    )


# --------------------------------------------------------------------------- tests


@functools.cache
def _outcome(world: int) -> dict[str, list[str]]:
    from materialize_workers import run_group

    return run_group(world, scenario_world2 if world == 2 else scenario_world4)


WORLD2 = [
    *(
        f"gpt_tp{tp}_pp{pp}_{d}"
        for d in ("float32", "bfloat16")
        for tp, pp in ((1, 1), (2, 1), (1, 2))
    ),
    "layout_float32",
    "layout_bfloat16",
    "moe_ep1",
    "moe_ep2",
    "preset_equals_recorded",
    "megatron_cpu_layouts",
    "gpt_tp2_tied",
    "tied_last_stage",
    "vpp",
    "rules",
    "guards",
    "config_edges",
]


@pytest.mark.parametrize("name", WORLD2)
def test_world2(name: str) -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(2), name)


@pytest.mark.parametrize("name", ["gpt_tp2_pp2", "moe_ep2_tp2"])
def test_world4(name: str) -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(4), name)
