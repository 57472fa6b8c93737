"""Buffers that are real before ``init_fn`` (issue 37: "a value from torch's generator
never reaches a buffer"): a buffer registered on the CPU in a model built on meta, or an
expanded table its constructor computed on the CPU. A random write into one (``normal_``,
``nn.init.uniform_``, a ``copy_`` of ``torch.rand``) is refused, naming the buffer, the
operation and the line, as for a meta buffer; deterministic writes give eager's values,
in the same buffer object, and the gathered FSDP2 model at worlds 1 and 2 holds them."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit
from shardinit.errors import UnsupportedInitOpError

SEED = 11
Init = Callable[["_Noisy"], object]


class _Noisy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 6)
        self.register_buffer("noise", torch.zeros(6, device="cpu"))
        self.register_buffer("pos", torch.arange(6, device="cpu").expand(1, -1))


def _meta() -> _Noisy:
    with torch.device("meta"):
        return _Noisy()


RANDOM: dict[str, Init] = {
    "normal_": lambda m: m.noise.normal_(),
    "uniform_": lambda m: nn.init.uniform_(m.noise),
    "copy_": lambda m: m.noise.copy_(torch.rand(6)),
    "bernoulli_": lambda m: m.noise[2:].bernoulli_(0.5),
}


@pytest.mark.parametrize("op", sorted(RANDOM))
def test_a_random_write_into_a_real_buffer_is_refused_naming_it(op: str) -> None:
    model = _meta()
    with pytest.raises(UnsupportedInitOpError) as raised:
        shardinit.materialize(model, seed=SEED, init_fn=lambda: RANDOM[op](model))
    message = str(raised.value)
    assert "buffer 'noise'" in message and f": {op}" in message
    assert "test_capture_real_buffers.py" in message and "global generator" in message
    assert model.lin.weight.is_meta  # refused before anything was allocated
    assert torch.equal(model.noise, torch.zeros(6))


DETERMINISTIC: dict[str, Init] = {
    "fill_": lambda m: m.noise.fill_(2.5),
    "add_arange": lambda m: m.noise.add_(torch.arange(6.0)),
    "fill_then_mul": lambda m: (m.noise.fill_(1.5), m.noise.mul_(3)),
    "setitem": lambda m: m.noise.__setitem__(slice(1, 4), -1.0),
    "expanded_untouched": lambda m: m.pos.sum(),
    "copy_from_table": lambda m: m.noise.copy_(torch.linspace(0, 1, 6).exp()),
}


@pytest.mark.parametrize("name", sorted(DETERMINISTIC))
def test_a_deterministic_write_into_a_real_buffer_is_eager(name: str) -> None:
    init = DETERMINISTIC[name]
    model = _meta()
    noise = model.noise
    shardinit.materialize(model, seed=SEED, init_fn=lambda: init(model))
    eager = _Noisy()
    with torch.no_grad():
        init(eager)
    assert model.noise is noise  # the buffer itself, written in place
    assert type(model.noise) is torch.Tensor
    assert torch.equal(model.noise, eager.noise) and torch.equal(model.pos, eager.pos)
    assert model.pos.stride() == eager.pos.stride()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_real_buffer_written_from_another_thread_is_refused() -> None:
    model = _meta()

    def in_thread() -> None:
        worker = threading.Thread(target=lambda: model.noise.fill_(1.0))
        worker.start()
        worker.join()

    with pytest.raises(UnsupportedInitOpError, match=r"buffer 'noise'.*thread"):
        shardinit.materialize(model, seed=SEED, init_fn=in_thread)


def _check_under_fsdp2(world: int, name: str) -> None:
    plain = _meta()
    shardinit.materialize(plain, seed=SEED, init_fn=lambda: DETERMINISTIC[name](plain))
    sharded = _meta()
    fully_shard(sharded, mesh=init_device_mesh("cpu", (world,)))
    shardinit.materialize(sharded, seed=SEED, init_fn=lambda: DETERMINISTIC[name](sharded))
    assert torch.equal(sharded.noise, plain.noise)
    assert torch.equal(sharded.lin.weight.full_tensor(), plain.lin.weight)


def _check_random_refused_under_fsdp2(world: int) -> None:
    sharded = _meta()
    fully_shard(sharded, mesh=init_device_mesh("cpu", (world,)))
    try:
        shardinit.materialize(sharded, seed=SEED, init_fn=lambda: sharded.noise.normal_())
    except UnsupportedInitOpError as refused:
        assert "buffer 'noise'" in str(refused)
    else:
        raise AssertionError("a normal_ of a real buffer was not refused under FSDP2")


@gloo_scenario(1, 2)
def real_buffers_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    for name in ("fill_then_mul", "add_arange"):
        check(checks, name, functools.partial(_check_under_fsdp2, world, name))
    check(checks, "random", functools.partial(_check_random_refused_under_fsdp2, world))
    return checks


test_real_buffers_under_fsdp2 = scenario_tests(
    real_buffers_scenario, ["fill_then_mul", "add_arange", "random"], [1, 2]
)
