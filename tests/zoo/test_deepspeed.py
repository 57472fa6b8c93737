"""shardinit.materialize on DeepSpeed ZeRO-3 models, against real DeepSpeed on gloo CPU.

Each rank builds a small model with odd sizes (so partitions end in padding), an
Embedding with ``padding_idx`` and a tied head, under stock ``deepspeed.zero.Init`` or
``shardinit.deepspeed.Init``, with torch.nn defaults or a captured HF-style
``_init_weights``; fills it; and checks its partitions against ``shardinit.materialize``
of a meta copy of the model at world 1 (the generic path, tested elsewhere): the real
elements are that model's flat range, the padding is zero, and ``GatheredParameters``
gives the whole tensor. World 1, 2 and 3 each run every case, so all equal world 1.

One launch per world size serves all checks. The first DeepSpeed run on a machine
JIT-compiles its CPU comm op (about 1-6 minutes on 2 cores, then cached).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from zoo_checks import expect_refusal

import shardinit
import shardinit.deepspeed

pytestmark = [
    pytest.mark.zoo,
    pytest.mark.distributed,
]

SEED = 4242
VOCAB, DIM, HIDDEN, PAD = 37, 11, 7, 3
Checks = dict[str, str | None]


class ZooNet(nn.Module):
    """Odd sizes (407, 77, 7, 11 elements), an Embedding with ``padding_idx``, a
    LayerNorm and a head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.proj = nn.Linear(DIM, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.out = nn.Linear(HIDDEN, DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.out(torch.tanh(self.norm(self.proj(self.embed(tokens))))))


def hf_init_weights(module: nn.Module) -> None:
    """An HF-style ``_init_weights`` (as in BERT/Llama of transformers 4.x)."""
    if isinstance(module, nn.Linear):
        module.weight.data.normal_(mean=0.0, std=0.02)
        if module.bias is not None:
            module.bias.data.zero_()
    elif isinstance(module, nn.Embedding):
        module.weight.data.normal_(mean=0.0, std=0.02)
        if module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        module.weight.data.fill_(1.0)
        module.bias.data.zero_()


def _meta_zoonet(dtype: torch.dtype = torch.float32) -> ZooNet:
    with torch.device("meta"):
        return ZooNet().to(dtype)


def _captured(dtype: torch.dtype = torch.float32) -> shardinit.CapturedInit:
    meta = _meta_zoonet(dtype)
    return shardinit.capture_init(meta, lambda: meta.apply(hf_init_weights))


def _reference(
    captured: shardinit.CapturedInit | None, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """World-1 values: shardinit.materialize of a meta ZooNet (the generic path)."""
    meta = _meta_zoonet(dtype)
    shardinit.materialize(meta, seed=SEED, init_fn=captured)
    return {name: param.detach() for name, param in meta.named_parameters()}


# --------------------------------------------------------------------------- rank side


def _deepspeed() -> Any:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # DeepSpeed's CPU backend JIT-builds its comm op with ninja, looked up on PATH.
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ["PATH"].split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ["PATH"]
    import deepspeed
    import deepspeed.comm

    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed


def _config(dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 3},
        "zero_allow_untested_optimizer": True,
        "bf16": {"enabled": dtype == torch.bfloat16},
    }


def _count_broadcasts() -> Callable[[], int]:
    calls = [0]
    original = torch.distributed.broadcast

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    torch.distributed.broadcast = counting  # restored by the caller's `restore`
    counting.restore = lambda: setattr(torch.distributed, "broadcast", original)  # type: ignore[attr-defined]
    return lambda: calls[0]


def _build(ours: bool, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, int]:
    """A ZooNet under zero.Init (stock or shardinit's), and the broadcasts it made."""
    deepspeed = _deepspeed()
    calls = _count_broadcasts()
    try:
        context = (shardinit.deepspeed.Init if ours else deepspeed.zero.Init)(
            config_dict_or_path=_config(dtype), remote_device="cpu"
        )
        with context:
            model = ZooNet()
    finally:
        torch.distributed.broadcast.restore()  # type: ignore[attr-defined]
    return model, calls()


def _check_partitions(model: nn.Module, reference: dict[str, torch.Tensor]) -> None:
    deepspeed = _deepspeed()
    rank = torch.distributed.get_rank()
    for name, param in model.named_parameters():
        want = reference[name].reshape(-1)
        size = param.ds_tensor.ds_numel
        start = rank * size
        count = max(0, min(want.numel() - start, size))
        local = param.ds_tensor.detach()
        assert tuple(param.ds_shape) == tuple(reference[name].shape), name
        assert torch.equal(local[:count], want[start : start + count]), f"{name}: real part"
        assert bool((local[count:] == 0).all()), f"{name}: padding not zero"
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        for name, param in model.named_parameters():
            assert torch.equal(param.detach(), reference[name]), f"{name}: gathered"


def _fill_case(
    ours: bool, captured_init: bool, dtype: torch.dtype = torch.float32
) -> Callable[[], None]:
    def run() -> None:
        captured = _captured(dtype) if captured_init else None
        model, broadcasts = _build(ours, dtype)
        assert model.proj.weight.dtype == dtype
        params = len(list(model.parameters()))
        if ours:
            assert broadcasts == 0, f"{broadcasts} broadcasts with shardinit.deepspeed.Init"
        elif torch.distributed.get_world_size() > 1:
            assert broadcasts >= params, f"stock zero.Init made only {broadcasts} broadcasts"
        shardinit.materialize(model, seed=SEED, init_fn=captured, overwrite=not ours)
        reference = _reference(captured, dtype)
        _check_partitions(model, reference)
        # fingerprint reads the partitions in place (one all_reduce, nothing gathered)
        want = {name: shardinit.fingerprint(tensor) for name, tensor in reference.items()}
        assert shardinit.fingerprint_model(model) == want

    return run


def _hpz_secondary_partitions() -> None:
    """hpZ (``zero_hpz_partition_size``): the secondary partitions are filled like the
    primary ones, over their own group, padding zero."""
    deepspeed = _deepspeed()
    config = {**_config(), "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}}
    with shardinit.deepspeed.Init(config_dict_or_path=config, remote_device="cpu"):
        model = ZooNet()
    shardinit.materialize(model, seed=SEED)
    reference = _reference(None)
    for name, param in model.named_parameters():
        secondary = param.ds_secondary_tensor
        assert secondary is not None, f"{name}: no secondary partition"
        want = reference[name].reshape(-1)
        rank = torch.distributed.get_rank(group=param.ds_zero_param_process_group)
        start = rank * secondary.ds_numel
        count = max(0, min(want.numel() - start, secondary.ds_numel))
        assert torch.equal(secondary[:count], want[start : start + count]), name
        assert bool((secondary[count:] == 0).all()), f"{name}: padding not zero"
    _check_partitions(model, reference)
    del deepspeed


def _stock_needs_overwrite() -> None:
    model, _ = _build(ours=False)
    with expect_refusal("already materialized"):
        shardinit.materialize(model, seed=SEED)


def _digest(model: nn.Module) -> str:
    deepspeed = _deepspeed()
    digest = hashlib.sha256()
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        for name, param in model.named_parameters():
            digest.update(name.encode())
            digest.update(param.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _engine(model: nn.Module) -> Any:
    deepspeed = _deepspeed()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=_config())
    return engine


def _one_step() -> None:
    """Fill, deepspeed.initialize, one SGD step on the same batch everywhere: the
    gathered parameters' digest goes to a file the parent compares across worlds."""
    model, _ = _build(ours=True)
    shardinit.materialize(model, seed=SEED, init_fn=_captured())
    engine = _engine(model)
    tokens = torch.tensor([[1, 3, 5, 7], [36, 0, 2, 3]])
    logits = engine(tokens)
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens.reshape(-1))
    engine.backward(loss)
    engine.step()
    digest = _digest(engine.module)
    if torch.distributed.get_rank() == 0:
        world = torch.distributed.get_world_size()
        path = Path(os.environ["ZOO_DS_OUT"], f"step_world{world}.json")
        path.write_text(json.dumps({"loss": float(loss), "digest": digest}))


def _guards() -> None:
    deepspeed = _deepspeed()
    model, _ = _build(ours=True)
    gathered = deepspeed.zero.GatheredParameters([model.proj.weight])
    with gathered, expect_refusal("gathered right now"):
        shardinit.materialize(model, seed=SEED)
    with expect_refusal("ZeRO-3: on a meta copy of the model"):
        shardinit.materialize(model, seed=SEED, init_fn=lambda: model.apply(hf_init_weights))
    model.proj.bias.ds_tensor.final_location = "nvme"  # as DeepSpeed marks NVMe partitions
    with expect_refusal("NVMe"):
        shardinit.materialize(model, seed=SEED)
    model.proj.bias.ds_tensor.final_location = None
    model.out.bias.ds_tensor.ds_quant_scale = torch.ones(1)  # as quantized partitions carry
    with expect_refusal("quantized"):
        shardinit.materialize(model, seed=SEED)
    del model.out.bias.ds_tensor.ds_quant_scale
    engine = _engine(model)
    with expect_refusal(r"before deepspeed\.initialize"):
        shardinit.materialize(engine.module, seed=SEED)
    with expect_refusal("DeepSpeedEngine"):
        shardinit.materialize(engine, seed=SEED)


def _config_path() -> None:
    """A config given as the path of a JSON file, an ``os.PathLike`` or a str, builds the
    same partitions as the dict (a Path failed inside DeepSpeed: "not iterable")."""
    _deepspeed()
    reference, _ = _build(ours=True)
    shardinit.materialize(reference, seed=SEED)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "ds.json")
        path.write_text(json.dumps(_config()))
        for config in (path, str(path)):
            with shardinit.deepspeed.Init(config_dict_or_path=config, remote_device="cpu"):
                model = ZooNet()
            shardinit.materialize(model, seed=SEED)
            pairs = zip(model.named_parameters(), reference.parameters(), strict=True)
            for (name, ours), theirs in pairs:
                assert torch.equal(ours.ds_tensor, theirs.ds_tensor), f"{config!r}: {name}"


def _hf_llama() -> None:
    """A tiny transformers Llama under ZeRO-3, built with shardinit's Init and filled
    with its own ``_init_weights`` (captured on a meta copy), equals the meta copy
    materialized at world 1."""
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.initialization import no_init_weights

    config = LlamaConfig(
        hidden_size=16,
        intermediate_size=26,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=51,
        max_position_embeddings=16,
    )

    def meta_llama() -> Any:
        with torch.device("meta"):
            return LlamaForCausalLM(config)

    meta = meta_llama()
    captured = shardinit.capture_init(meta, lambda: meta.apply(meta._init_weights))
    _deepspeed()
    with no_init_weights(), shardinit.deepspeed.Init(config_dict_or_path=_config()):
        model = LlamaForCausalLM(config)
    shardinit.materialize(model, seed=SEED, init_fn=captured)
    reference = meta_llama()
    shardinit.materialize(
        reference,
        seed=SEED,
        init_fn=captured,
        buffer_init=lambda module, name, tensor: tensor.zero_(),
    )
    _check_partitions(model, {n: p.detach() for n, p in reference.named_parameters()})


def _tiny_gpt2_config() -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        n_embd=16, n_layer=2, n_head=2, n_positions=16, vocab_size=53, tie_word_embeddings=True
    )


def _alias_groups(model: nn.Module) -> set[frozenset[str]]:
    """Which parameter names share one Parameter object (every name once)."""
    groups: dict[int, set[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), set()).add(name)
    return {frozenset(names) for names in groups.values()}


def _hf_gpt2_tied() -> None:
    """docs/megatron-deepspeed.md's transformers recipe on a tied GPT-2: the model keeps
    the library's ties (one Parameter for ``lm_head.weight`` and ``transformer.wte.weight``),
    equals the meta copy materialized at world 1, and its gathered bytes go to a file the
    parent compares across worlds."""
    from transformers import GPT2LMHeadModel
    from transformers.initialization import no_init_weights

    config = _tiny_gpt2_config()
    library = _alias_groups(GPT2LMHeadModel(config))  # built normally, on the CPU
    assert frozenset({"lm_head.weight", "transformer.wte.weight"}) in library, library

    def meta_gpt2() -> Any:
        with torch.device("meta"):
            return GPT2LMHeadModel(config)

    meta = meta_gpt2()
    captured = shardinit.capture_init(meta, lambda: meta.apply(meta._init_weights))
    _deepspeed()
    with no_init_weights(), shardinit.deepspeed.Init(config_dict_or_path=_config()):
        model = GPT2LMHeadModel(config)
    shardinit.materialize(model, seed=SEED, init_fn=captured)
    differ = sorted(sorted(group) for group in _alias_groups(model) ^ library)
    assert not differ, f"tied groups that differ from the library's model: {differ}"
    assert model.lm_head.weight is model.transformer.wte.weight
    reference = meta_gpt2()
    shardinit.materialize(
        reference,
        seed=SEED,
        init_fn=captured,
        buffer_init=lambda module, name, tensor: tensor.zero_(),
    )
    _check_partitions(model, {n: p.detach() for n, p in reference.named_parameters()})
    digest = _digest(model)
    if torch.distributed.get_rank() == 0:
        world = torch.distributed.get_world_size()
        path = Path(os.environ["ZOO_DS_OUT"], f"gpt2_world{world}.json")
        path.write_text(json.dumps({"digest": digest, "params": len(list(model.parameters()))}))


def _untied_refused() -> None:
    """A tied transformers model built untied (stock zero.Init under no_init_weights, no
    tie_weights) is refused when the capture's meta copy is tied: never filled silently."""
    from transformers import GPT2LMHeadModel
    from transformers.initialization import no_init_weights

    config = _tiny_gpt2_config()
    with torch.device("meta"):
        meta = GPT2LMHeadModel(config)
    captured = shardinit.capture_init(meta, lambda: meta.apply(meta._init_weights))
    deepspeed = _deepspeed()
    with no_init_weights(), deepspeed.zero.Init(config_dict_or_path=_config()):
        model = GPT2LMHeadModel(config)
    assert model.lm_head.weight is not model.transformer.wte.weight  # stock: untied
    with expect_refusal(
        r"transformer\.wte\.weight = lm_head\.weight \(tied in the capture.*tie_weights"
    ):
        shardinit.materialize(model, seed=SEED, init_fn=captured, overwrite=True)
    model.tie_weights()
    shardinit.materialize(model, seed=SEED, init_fn=captured, overwrite=True)
    assert len(list(model.parameters())) == len(list(meta.parameters()))


def scenario(rank: int, world: int) -> Checks:
    from materialize_workers import check

    checks: Checks = {}
    for ours in (False, True):
        for captured in (False, True):
            name = f"fill_{'shardinit' if ours else 'stock'}_{'hf' if captured else 'defaults'}"
            check(checks, name, _fill_case(ours, captured))
    check(checks, "fill_shardinit_hf_bf16", _fill_case(True, True, torch.bfloat16))
    check(checks, "stock_needs_overwrite", _stock_needs_overwrite)
    check(checks, "hf_gpt2_tied", _hf_gpt2_tied)
    if world <= 2:
        check(checks, "untied_refused", _untied_refused)
        check(checks, "one_step", _one_step)
        check(checks, "hf_llama", _hf_llama)
    if world == 2:
        check(checks, "guards", _guards)
        check(checks, "hpz", _hpz_secondary_partitions)
        check(checks, "config_path", _config_path)
    return checks


# --------------------------------------------------------------------------- tests


@functools.cache
def _out_dir() -> str:
    """Where rank 0 writes its step digests (removed when the test process exits)."""
    path = tempfile.mkdtemp(prefix="shardinit-zoo-ds-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def _outcome(world: int) -> dict[str, list[str]]:
    from materialize_workers import run_group

    os.environ["ZOO_DS_OUT"] = _out_dir()
    return run_group(world, scenario)


FILLS = [f"fill_{ctx}_{init}" for ctx in ("stock", "shardinit") for init in ("defaults", "hf")]
FILLS.append("fill_shardinit_hf_bf16")


@pytest.mark.parametrize("world", [1, 2, 3])
@pytest.mark.parametrize("name", [*FILLS, "stock_needs_overwrite"])
def test_fill_equals_world1(world: int, name: str) -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(world), name)


@pytest.mark.parametrize("world", [1, 2])
def test_tiny_transformers_llama(world: int) -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(world), "hf_llama")


@pytest.mark.parametrize("world", [1, 2, 3])
def test_tied_transformers_gpt2_keeps_its_ties(world: int) -> None:
    """docs/megatron-deepspeed.md's transformers recipe (no_init_weights and
    shardinit.deepspeed.Init) keeps a tied GPT-2 tied, as the library builds it."""
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(world), "hf_gpt2_tied")


def test_tied_gpt2_bytes_equal_at_world_1_2_3() -> None:
    from materialize_workers import assert_check_passed

    for world in (1, 2, 3):
        assert_check_passed(_outcome(world), "hf_gpt2_tied")
    found = [json.loads(Path(_out_dir(), f"gpt2_world{w}.json").read_text()) for w in (1, 2, 3)]
    assert found[0]["params"] == 28
    assert found[0] == found[1] == found[2]


@pytest.mark.parametrize("world", [1, 2])
def test_untied_model_refused_against_tied_capture(world: int) -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(world), "untied_refused")


def test_hpz_secondary_partitions() -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(2), "hpz")


def test_guards() -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(2), "guards")


def test_config_as_a_path() -> None:
    from materialize_workers import assert_check_passed

    assert_check_passed(_outcome(2), "config_path")


def test_one_step_bit_identical_at_world_1_and_2() -> None:
    from materialize_workers import assert_check_passed

    for world in (1, 2):
        assert_check_passed(_outcome(world), "one_step")
    one, two = (json.loads(Path(_out_dir(), f"step_world{w}.json").read_text()) for w in (1, 2))
    assert one == two
