"""``materialize(init_fn=...)`` under FSDP2 on CPU meshes of 1-3 ranks (gloo): the gathered
parameters equal, bit for bit, the world-1 replay of the same captured init code on a
plain meta model (so every world gives the same bits; test_capture.py checks that replay
against the expected initializers and against the init code run eagerly with torch).
Shapes are chosen so shard boundaries cut through the captured sub-regions."""

from __future__ import annotations

import functools
import math
import threading

import pytest
import torch
from capture_models import HFModel, RotaryStack, eager, llama
from materialize_workers import (
    Checks,
    assert_check_passed,
    check,
    expect_equal,
    gloo_scenario,
    run_group,
)
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit
from shardinit.cli.models import LlamaConfig
from shardinit.cli.transformer import Transformer
from shardinit.shard import writer

pytestmark = pytest.mark.distributed

SEED = 4242


def _llama() -> Transformer:
    # Widths that no world of 2 or 3 divides: shards of uneven sizes.
    return llama(
        LlamaConfig(dim=10, n_layers=2, n_heads=2, n_kv_heads=1, ffn_hidden=14, vocab_size=37)
    )


def _rotary() -> RotaryStack:
    # wqkv has 30 rows with the q/kv boundary at row 10: world 2 cuts it at row 15.
    return RotaryStack(dim=10, layers=2)


def _hf() -> HFModel:
    return HFModel(vocab=29, dim=6, n_layer=2)


def _reference(factory: object, init_name: str) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        model = factory()  # type: ignore[operator]
    captured = shardinit.capture_init(model, getattr(model, init_name))
    return {name: writer().full(record, SEED) for name, record in captured.params.items()}


def _shard(model: nn.Module, blocks: list[nn.Module], world: int) -> None:
    mesh = init_device_mesh("cpu", (world,))
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _check_gathered(model: nn.Module, reference: dict[str, torch.Tensor]) -> None:
    seen = []
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), f"{name} is not a DTensor"
        expect_equal(name, param.full_tensor(), reference[name])
        seen.append(name)
    assert sorted(seen) == sorted(reference), seen


def _assert_trains(model: nn.Module, inputs: torch.Tensor) -> None:
    loss = model(inputs).logsumexp(-1).mean()
    loss.backward()
    assert math.isfinite(loss.item())


def _check_llama(world: int) -> None:
    with torch.device("meta"):
        model = _llama()
    _shard(model, list(model.layers), world)
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    _check_gathered(model, _reference(_llama, "init_weights"))
    _assert_trains(model, torch.arange(6).reshape(1, 6))


def _check_fused_rotary(world: int) -> None:
    with torch.device("meta"):
        model = _rotary()
    _shard(model, list(model.layers.values()), world)
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    _check_gathered(model, _reference(_rotary, "init_weights"))
    # The rotary buffer was recomputed for real, as torch computes it.
    expected = eager(_rotary, lambda m: None, SEED).freqs_cis
    expect_equal("freqs_cis", model.freqs_cis, expected)
    _assert_trains(model, model.example_input())


def _check_hf(world: int) -> None:
    with torch.device("meta"):
        model = _hf()
    _shard(model, list(model.h), world)
    shardinit.materialize(model, seed=SEED, init_fn=model.init)
    _check_gathered(model, _reference(_hf, "init"))
    assert not model.wpe.weight.full_tensor()[0].any(), "padding row not zero"
    assert model.lm_head.weight is model.wte.weight, "tie broken"


def _check_reset_parameters(world: int) -> None:
    def build() -> nn.Sequential:
        with torch.device("meta"):
            return nn.Sequential(nn.Embedding(7, 5, padding_idx=4), nn.Linear(5, 9))

    model, reference = build(), build()
    _shard(model, [], world)
    _shard(reference, [], world)

    def reset() -> None:
        model[0].reset_parameters()
        model[1].reset_parameters()

    shardinit.materialize(model, seed=SEED, init_fn=reset)
    shardinit.materialize(reference, seed=SEED)  # torch.nn defaults, no init_fn
    for (name, param), (_, want) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        expect_equal(name, param.full_tensor(), want.full_tensor())


def _check_orthogonal(world: int) -> None:
    """orthogonal_ captured from init code (a Linear, a 3-D conv weight) and given by a
    rule (an embedding), on shapes no world of 2 or 3 divides: every rank computes the
    whole matrix and keeps its rows; gathered, they are ``full`` of the spec."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(7, 5), nn.Conv1d(3, 5, 2), nn.Embedding(11, 4))
    _shard(model, [], world)

    def init_fn() -> None:
        nn.init.orthogonal_(model[0].weight, gain=2.0)
        nn.init.orthogonal_(model[1].weight)

    rules = {"2.weight": shardinit.init.orthogonal(0.5)}
    shardinit.materialize(model, seed=SEED, init_fn=init_fn, rules=rules)
    for name, gain in (("0.weight", 2.0), ("1.weight", 1.0), ("2.weight", 0.5)):
        param = model.get_parameter(name)
        spec = shardinit.ParamSpec(
            name, tuple(param.shape), param.dtype, shardinit.init.orthogonal(gain), seed=SEED
        )
        expect_equal(name, param.full_tensor(), shardinit.full(spec))


def _check_closed_world(world: int) -> None:
    """Issue 28 on DTensor parameters: a stand-in answers the mesh's device (a guard on
    meta runs its init code), init code asking for the local shard is refused (its
    values would depend on the layout), and requires_grad set by init code is carried
    onto the sharded parameter."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(5, 7))
    _shard(model, [], world)

    def guarded() -> None:
        weight = model[0].weight
        assert weight.device == torch.device("cpu") and not weight.is_meta
        if not weight.is_meta:
            nn.init.constant_(weight, 0.5)
        model[0].bias.requires_grad_(False)

    shardinit.materialize(model, seed=SEED, init_fn=guarded)
    expect_equal("guarded", model[0].weight.full_tensor(), torch.full((7, 5), 0.5))
    assert isinstance(model[0].bias, DTensor) and not model[0].bias.requires_grad
    with torch.device("meta"):
        local = nn.Sequential(nn.Linear(5, 7))
    _shard(local, [], world)
    try:
        shardinit.materialize(local, seed=SEED, init_fn=lambda: local[0].weight.to_local())
    except shardinit.UnsupportedInitOpError as error:
        assert "to_local()" in str(error) and "global shape (7, 5)" in str(error), error
    else:
        raise AssertionError("to_local() on a stand-in was not refused")


def _check_threads_and_formats(world: int) -> None:
    """Issue 37 on DTensor parameters: a write from another thread is refused (it would
    do nothing on the stand-in), and so is a memory format (FSDP2's shards are
    contiguous tensors of their own: it refuses non-contiguous parameters), both before
    anything is allocated."""
    refusals = {
        "in thread 'helper'": lambda m: _joined(
            threading.Thread(target=lambda: nn.init.zeros_(m[0].weight), name="helper")
        ),
        "to(memory_format=torch.channels_last)": lambda m: m.to(memory_format=torch.channels_last),
    }
    for needle, code in refusals.items():
        with torch.device("meta"):
            model = nn.Sequential(nn.Conv2d(3, 5, 2))
        _shard(model, [], world)
        try:
            shardinit.materialize(model, seed=SEED, init_fn=lambda: code(model))  # noqa: B023
        except shardinit.UnsupportedInitOpError as error:
            assert needle in str(error) and "parameter '0.weight'" in str(error), error
        else:
            raise AssertionError(f"{needle} was not refused")
        assert model[0].weight.to_local().is_meta, "allocated before the refusal"


def _joined(thread: threading.Thread) -> None:
    thread.start()
    thread.join()


@gloo_scenario(1, 2, 3)
def capture_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    check(checks, "llama", lambda: _check_llama(world))
    check(checks, "fused_rotary", lambda: _check_fused_rotary(world))
    check(checks, "hf", lambda: _check_hf(world))
    check(checks, "reset_parameters", lambda: _check_reset_parameters(world))
    check(checks, "orthogonal", lambda: _check_orthogonal(world))
    check(checks, "closed_world", lambda: _check_closed_world(world))
    check(checks, "threads_and_formats", lambda: _check_threads_and_formats(world))
    return checks


@functools.cache
def results(world: int) -> dict[str, list[str]]:
    return run_group(world, capture_scenario)


def _assert_passed(world: int, name: str) -> None:
    assert_check_passed(results(world), name)


WORLDS = [1, 2, 3]


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_torchtitan_init_weights_bit_exact(world: int) -> None:
    _assert_passed(world, "llama")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_fused_qkv_and_computed_buffer_bit_exact(world: int) -> None:
    _assert_passed(world, "fused_rotary")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_hugging_face_init_weights_bit_exact(world: int) -> None:
    _assert_passed(world, "hf")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_reset_parameters_equals_defaults(world: int) -> None:
    _assert_passed(world, "reset_parameters")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_orthogonal_captured_and_by_rule_bit_exact(world: int) -> None:
    _assert_passed(world, "orthogonal")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_stand_ins_answer_as_dtensors_at_run_time(world: int) -> None:
    _assert_passed(world, "closed_world")


@pytest.mark.parametrize("world", WORLDS)
def test_fsdp2_other_threads_and_memory_formats_refused(world: int) -> None:
    _assert_passed(world, "threads_and_formats")
