"""Memory formats init code gives a parameter by replacing its data (issue 51):
torch's own ``convert_conv2d_weight_memory_format`` / ``convert_conv3d_...`` (a
``clone(memory_format=...)`` then ``resize_`` into ``.data``), ``p.data =
p.data.contiguous(memory_format=torch.channels_last)`` and ``.to(memory_format=...)``,
back to row-major, and a replacement Parameter made channels_last on meta. Each against
the same code run eagerly on a CPU model: values, strides, dtype; a sharded parameter
made channels_last is refused, naming it, as FSDP2 refuses it."""

from __future__ import annotations

import pytest
import torch
from gloo_groups import Checks, assert_check_passed, check, gloo_scenario, run_group
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import shardinit

SEED = 51


def _model(device: str) -> nn.Sequential:
    with torch.device(device):
        return nn.Sequential(nn.Conv2d(3, 4, (3, 2)), nn.Conv3d(2, 2, 2), nn.Conv2d(4, 2, 1))


def _known_values(model: nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.arange(p.numel(), dtype=p.dtype).view(p.shape) / 7)


def assert_like_eager(got: nn.Module, eager: nn.Module) -> None:
    for (name, want), have in zip(eager.named_parameters(), got.parameters(), strict=True):
        assert have.dtype == want.dtype and have.shape == want.shape, name
        assert have.stride() == want.stride(), name
        assert torch.equal(have.detach(), want.detach()), name


def _run(init) -> tuple[nn.Module, nn.Module]:  # type: ignore[no-untyped-def]
    eager = _model("cpu")
    init(eager)
    meta = _model("meta")
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: init(meta))
    return meta, eager


def test_torchs_convert_weight_memory_format_as_in_eager() -> None:
    def init(model: nn.Module) -> None:
        _known_values(model)
        nn.utils.convert_conv2d_weight_memory_format(model, torch.channels_last)
        nn.utils.convert_conv3d_weight_memory_format(model, torch.channels_last_3d)
        with torch.no_grad():
            model[0].weight[:, 1].fill_(-1.0)  # a write after: through eager's layout

    meta, eager = _run(init)
    assert_like_eager(meta, eager)
    assert meta[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert meta[1].weight.is_contiguous(memory_format=torch.channels_last_3d)


def test_data_replaced_by_a_relaid_copy_as_in_eager() -> None:
    def init(model: nn.Module) -> None:
        _known_values(model)
        w0, w2 = model[0].weight, model[2].weight
        w0.data = w0.data.contiguous(memory_format=torch.channels_last)
        w2.data = w2.data.to(memory_format=torch.channels_last)
        assert w0.stride() == (18, 1, 6, 3)  # init code sees eager's strides at once
        w2.data = w2.data.contiguous()  # and back to row-major
        with torch.no_grad():
            w0.mul_(2.0)

    meta, eager = _run(init)
    assert_like_eager(meta, eager)
    assert meta[0].weight.stride() == (18, 1, 6, 3)


CASTS_WITH_A_LAYOUT = {
    "same dtype": lambda w: w.data.to(torch.float32, memory_format=torch.channels_last),
    "dtype keyword": lambda w: w.data.to(dtype=torch.float32, memory_format=torch.channels_last),
    "to float64 and back": lambda w: (
        w.data.double().to(memory_format=torch.channels_last).to(torch.float32)
    ),
    "a cast of a channels_last copy": lambda w: (
        w.data.contiguous(memory_format=torch.channels_last).double().float()
    ),
    "a transposed cast": lambda w: w.data.transpose(0, 1).double().transpose(0, 1).float(),
}


@pytest.mark.parametrize("case", sorted(CASTS_WITH_A_LAYOUT))
def test_a_cast_keeps_eagers_layout_for_data_replaced(case: str) -> None:
    # A cast's result has the layout eager's has (preserve_format, or the format asked);
    # a parameter given it by ``.data =`` takes those strides, as in eager.
    def init(model: nn.Module) -> None:
        _known_values(model)
        w0 = model[0].weight
        w0.data = CASTS_WITH_A_LAYOUT[case](w0)
        with torch.no_grad():
            w0[:, 1].mul_(-2.0)  # a write after: through eager's layout

    meta, eager = _run(init)
    assert_like_eager(meta, eager)


def test_a_channels_last_replacement_parameter_as_in_eager() -> None:
    def init(model: nn.Module) -> None:
        conv = model[0]
        shape, device = conv.weight.shape, conv.weight.device
        conv.weight = nn.Parameter(
            torch.empty(shape, device=device, memory_format=torch.channels_last)
        )
        with torch.no_grad():
            conv.weight.copy_(torch.linspace(-1.0, 1.0, conv.weight.numel()).view(shape))
            for p in [*model[1].parameters(), *model[2].parameters(), conv.bias]:
                p.fill_(0.25)

    meta, eager = _run(init)
    assert_like_eager(meta, eager)


def test_a_row_major_replacement_of_a_channels_last_parameter_as_in_eager() -> None:
    def init(model: nn.Module) -> None:
        conv = model[0]
        conv.weight = nn.Parameter(torch.empty(conv.weight.shape, device=conv.weight.device))
        _known_values(model)

    eager, meta = _model("cpu"), _model("meta")
    for model in (eager, meta):
        for conv2d in (model[0], model[2]):
            conv2d.to(memory_format=torch.channels_last)
    init(eager)
    shardinit.materialize(meta, seed=SEED, init_fn=lambda: init(meta))
    assert_like_eager(meta, eager)
    assert meta[0].weight.is_contiguous() and meta[2].weight.stride() == (4, 1, 4, 4)


def _check_sharded_refusal() -> None:
    sharded = _model("meta")
    fully_shard(sharded, mesh=init_device_mesh("cpu", (1,)))

    def init() -> None:
        w = sharded[0].weight
        w.data = w.data.contiguous(memory_format=torch.channels_last)

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"'0.weight'.*row-major"):
        shardinit.materialize(sharded, seed=SEED, init_fn=init)


@gloo_scenario(1)
def memory_format_scenario(rank: int, world: int) -> Checks:
    del rank, world
    checks: Checks = {}
    check(checks, "sharded", _check_sharded_refusal)
    return checks


@pytest.mark.distributed
def test_a_channels_last_sharded_parameter_is_refused() -> None:
    assert_check_passed(run_group(1, memory_format_scenario), "sharded")
