"""The pieces of the ZeRO-3 region source (shardinit._integration.zero3) that need no
DeepSpeed process group: a flat partition's fill, the filled mark, the refusal's owner,
the build context's class made once, and the base64 form of a config."""

from __future__ import annotations

import base64
import enum
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from shardinit._integration import zero3
from shardinit._integration.targets import Values
from shardinit._integration.zero3 import FlatPartition, Zero3Target, _is_base64_text
from shardinit._names import ParamSlot
from shardinit.errors import ShardInitError


class FlatIndexWriter:
    """Writes each element's flat index: where a partition's values come from."""

    def write_flat(
        self, record: object, seed: int, start: int, stop: int, out: torch.Tensor
    ) -> None:
        out.copy_(torch.arange(start, stop, dtype=out.dtype))


def test_a_flat_partition_holds_its_elements_from_start_and_zeroed_padding() -> None:
    tensor = torch.full((6,), -1.0)
    FlatPartition(tensor, start=12, count=4).fill(Values(None, 0), FlatIndexWriter())  # type: ignore[arg-type]
    assert tensor.tolist() == [12.0, 13.0, 14.0, 15.0, 0.0, 0.0]
    padding_only = torch.full((3,), -1.0)
    FlatPartition(padding_only, start=30, count=0).fill(Values(None, 0), FlatIndexWriter())  # type: ignore[arg-type]
    assert padding_only.tolist() == [0.0, 0.0, 0.0]


def test_a_zero3_parameter_is_filled_unless_marked_unfilled() -> None:
    param = nn.Parameter(torch.zeros(2))
    target = Zero3Target(ParamSlot("w", param, []), (), (2,), torch.float32)
    assert target.is_filled()  # stock zero.Init: the module's own init values
    setattr(param, zero3._UNFILLED_ATTR, True)
    assert not target.is_filled()


def test_a_refusal_is_asked_of_the_parameters_owner_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = nn.Linear(2, 2, bias=False)
    model.weight.ds_tensor = torch.zeros(4)  # type: ignore[attr-defined]
    model.weight.ds_shape = (2, 2)  # type: ignore[attr-defined]
    monkeypatch.setattr(
        zero3, "_refusal", lambda name, param, owner: f"{name} of {type(owner).__name__}"
    )
    with pytest.raises(ShardInitError, match=r"weight of Linear"):
        zero3.zero3_targets(model)


def test_the_no_broadcast_class_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made = type("NoBroadcastInit", (), {})
    monkeypatch.setattr(zero3, "_INIT_CLASS", [made])
    assert zero3._no_broadcast_class() is made
    assert zero3._no_broadcast_class() is made


def test_base64_text_is_what_decodes_to_utf8() -> None:
    assert _is_base64_text(base64.urlsafe_b64encode(b'{"train_batch_size": 1}').decode())
    assert not _is_base64_text("ds.json")  # a path: not base64
    assert not _is_base64_text(base64.urlsafe_b64encode(b"\xff\xfe").decode())  # not UTF-8


class _Status(enum.Enum):  # deepspeed's ZeroParamStatus (0.19.8)
    AVAILABLE = 1
    NOT_AVAILABLE = 2


def _partitioned(dtype: torch.dtype) -> nn.Parameter:
    param = nn.Parameter(torch.zeros(4, dtype=dtype), requires_grad=dtype.is_floating_point)
    param.ds_tensor = torch.zeros(2, dtype=dtype)  # type: ignore[attr-defined]
    param.ds_status = _Status.NOT_AVAILABLE  # type: ignore[attr-defined]
    return param


def test_a_partition_of_a_dtype_outside_stream_format_v1_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The two DeepSpeed modules _refusal reads, as the enums it compares with: no import.
    offload = SimpleNamespace(OffloadDeviceEnum=SimpleNamespace(nvme="nvme"))
    partition = SimpleNamespace(ZeroParamStatus=_Status)
    monkeypatch.setitem(sys.modules, "deepspeed.runtime.zero.offload_config", offload)
    monkeypatch.setitem(sys.modules, "deepspeed.runtime.zero.partition_parameters", partition)
    owner = nn.Module()
    assert zero3._refusal("w", _partitioned(torch.float32), owner) is None
    refusal = zero3._refusal("w", _partitioned(torch.int64), owner)
    assert refusal == "w: dtype torch.int64 is not one of stream format v1"
