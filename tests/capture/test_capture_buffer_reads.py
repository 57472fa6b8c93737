"""Init code that reads a buffer whose constructor value was recorded (a model built
inside ``record_constructors()`` on meta) and computes a parameter from it: an
elementwise step on it, a cast, an index table read by it, or a plain copy. The buffer
holds its constructor value before init_fn, as eager's does, so each is eager's values
(here against the same code run on a CPU model of the same constructor), under FSDP2
at worlds 1 and 2 too. A buffer with no recorded value stays refused, naming it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
import torch
from materialize_workers import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit

SEED = 7


class _Tables(nn.Module):
    """A Linear beside an index buffer and a float buffer computed in the constructor."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.register_buffer("idx", torch.arange(3))
        self.register_buffer("fb", torch.arange(3.0) * 0.5)


def _table_index(m: _Tables) -> None:
    m.proj.bias.copy_(torch.arange(5.0)[m.idx] * 0.25)


def _cast(m: _Tables) -> None:
    m.proj.bias.copy_(m.idx.float())


def _step(m: _Tables) -> None:
    m.proj.bias.copy_(m.fb + 1)


def _copy(m: _Tables) -> None:
    m.proj.bias.copy_(m.fb)


def _mask(m: _Tables) -> None:
    m.proj.weight.copy_((m.idx[:, None] > torch.arange(4)[None, :]).float() * m.fb[:, None])


INITS: dict[str, Callable[[_Tables], None]] = {
    "table_index": _table_index,
    "cast": _cast,
    "step": _step,
    "copy": _copy,
    "mask": _mask,
}


def _eager(init: Callable[[_Tables], None]) -> _Tables:
    torch.manual_seed(0)
    eager = _Tables()
    with torch.no_grad():
        init(eager)
    return eager


def _meta() -> _Tables:
    with torch.device("meta"), shardinit.record_constructors():
        return _Tables()


def _value(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach()


@pytest.mark.parametrize("case", sorted(INITS))
def test_a_parameter_computed_from_a_recorded_buffer_is_eagers(case: str) -> None:
    init = INITS[case]
    eager, meta = _eager(init), _meta()

    def init_fn() -> None:
        with torch.no_grad():
            init(meta)

    shardinit.materialize(meta, seed=SEED, init_fn=init_fn)
    written = "weight" if case == "mask" else "bias"
    assert torch.equal(_value(getattr(meta.proj, written)), getattr(eager.proj, written)), case
    assert torch.equal(meta.fb, eager.fb) and torch.equal(meta.idx, eager.idx)


def test_the_step_on_a_buffer_gives_the_known_answer() -> None:
    meta = _meta()
    with torch.no_grad():
        shardinit.materialize(meta, seed=SEED, init_fn=lambda: _step(meta))
    assert meta.proj.bias.tolist() == [1.0, 1.5, 2.0]


def test_a_step_on_a_buffer_of_no_recorded_value_is_refused_naming_it() -> None:
    with torch.device("meta"):
        meta = _Tables()  # no record_constructors: the buffer's values are unknown

    def init_fn() -> None:
        with torch.no_grad():
            _step(meta)

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"buffer 'fb' are unknown"):
        shardinit.materialize(meta, seed=SEED, init_fn=init_fn)


def _check_sharded(world: int) -> None:
    for case, init in sorted(INITS.items()):
        meta = _meta()
        mesh = init_device_mesh("cpu", (world,))
        fully_shard(meta, mesh=mesh)

        def init_fn(model: _Tables = meta, init: Callable[[_Tables], None] = init) -> None:
            with torch.no_grad():
                init(model)

        shardinit.materialize(meta, seed=SEED, init_fn=init_fn)
        eager = _eager(init)
        for name, want in eager.named_parameters():
            got = _value(dict(meta.named_parameters())[name])
            if name == ("proj.weight" if case == "mask" else "proj.bias"):
                assert torch.equal(got, want.detach()), (case, name)


@gloo_scenario(1, 2)
def buffer_reads_scenario(rank: int, world: int) -> Checks:
    del rank
    checks: Checks = {}
    check(checks, "buffer_reads", functools.partial(_check_sharded, world))
    return checks


@functools.cache
def _results(world: int) -> dict[str, list[str]]:
    return run_group(world, buffer_reads_scenario)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [1, 2])
def test_buffer_reads_under_fsdp2_give_eager_values(world: int) -> None:
    assert_check_passed(_results(world), "buffer_reads")


def test_a_step_on_a_buffer_written_in_part_reads_the_write_and_the_constructor_value() -> None:
    def init(m: _Tables) -> None:
        m.fb[0] = 5.0
        m.proj.bias.copy_(m.fb * 2)

    eager, meta = _eager(init), _meta()
    with torch.no_grad():
        shardinit.materialize(meta, seed=SEED, init_fn=lambda: init(meta))
    assert torch.equal(meta.proj.bias.detach(), eager.proj.bias.detach())
    assert meta.proj.bias.tolist() == [10.0, 1.0, 2.0] and meta.fb.tolist() == [5.0, 0.5, 1.0]


@pytest.mark.parametrize("read_before", [False, True])
def test_a_step_on_a_buffer_emptied_by_to_empty_is_refused_naming_it(read_before: bool) -> None:
    meta = _meta()

    def init_fn() -> None:
        with torch.no_grad():
            if read_before:  # its known values were read (and folded) before it was emptied
                _ = meta.fb * 3
            meta.to_empty(device="cpu")
            meta.proj.bias.copy_(meta.fb + 1)
            meta.fb.copy_(torch.arange(3.0))  # computed again: the buffer itself is fine

    with pytest.raises(
        shardinit.UnsupportedInitOpError, match=r"'proj.bias'.*buffer 'fb' are unknown \(to_empty"
    ):
        shardinit.materialize(meta, seed=SEED, init_fn=init_fn)


def test_a_plain_copy_of_a_buffer_emptied_by_to_empty_is_refused_naming_it() -> None:
    meta = _meta()

    def init_fn() -> None:
        with torch.no_grad():
            meta.to_empty(device="cpu")
            meta.proj.bias.copy_(meta.fb)  # the stand-in holds no value of it here
            meta.fb.copy_(torch.arange(3.0))

    with pytest.raises(
        shardinit.UnsupportedInitOpError, match=r"'proj.bias'.*buffer 'fb' are unknown \(to_empty"
    ):
        shardinit.materialize(meta, seed=SEED, init_fn=init_fn)


def test_the_written_part_of_a_buffer_emptied_by_to_empty_is_read_as_written() -> None:
    def init(m: _Tables) -> None:
        m.to_empty(device="cpu")
        m.fb[:2] = torch.tensor([0.25, 0.75])
        m.proj.bias[:2].copy_(m.fb[:2])  # the written part only
        m.fb[2:] = 1.0
        m.proj.bias[2:].copy_(m.fb[2:] * 0.5)
        m.idx.copy_(torch.tensor([2, 0, 1]))

    eager, meta = _eager(init), _meta()
    with torch.no_grad():
        shardinit.materialize(meta, seed=SEED, init_fn=lambda: init(meta))
    assert torch.equal(meta.proj.bias.detach(), eager.proj.bias.detach())
    assert meta.proj.bias.tolist() == [0.25, 0.75, 0.5] and meta.idx.tolist() == [2, 0, 1]
