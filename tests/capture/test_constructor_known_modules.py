"""torch.nn's normalization layers built inside ``record_constructors`` without their
operations followed (:mod:`shardinit._integration.capture.session.knownmodules`): each
tensor's constructor value is the one the capture gives following every operation, and
``materialize`` gives eager's values; where a fact may not hold (a class's own reset, a
registration hook, a CPU device) the constructor is followed as any other code."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from timm.layers import BatchNormAct2d, Conv2dSame
from torch import nn
from torch.nn.modules.module import register_module_buffer_registration_hook

import shardinit
from shardinit._integration.capture.session import constructors, knownmodules, knownresets


class _HalfReset(nn.BatchNorm2d):
    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.constant_(self.weight, 0.5)


class _Norms(nn.Module):
    """Every form of the constructor, and writes after it."""

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm1d(5)
        self.bn2 = nn.BatchNorm2d(6, affine=False)
        self.bn3 = nn.BatchNorm3d(3, bias=False, dtype=torch.float64)
        self.stateless = nn.BatchNorm2d(4, track_running_stats=False)
        self.instance = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
        self.sync = nn.SyncBatchNorm(7)
        self.act = BatchNormAct2d(8)
        self.half = _HalfReset(3)
        self.on_device = nn.BatchNorm1d(2, device=device)
        self.act.weight.data.normal_(0.0, 0.02)
        self.bn1.running_var.fill_(2.0)
        self.bn1.bias.data[1:3] = 0.25


def _values(model: nn.Module) -> Iterator[tuple[str, str]]:
    """Each constructor value's program, its random sources' origins (which operation
    drew them, by object id) left out."""
    for path, module in model.named_modules():
        for table in (constructors._RECORDS, constructors._BUFFERS):
            for attr, value in sorted(table.get(module, {}).items()):
                yield f"{path}.{attr}", re.sub(r"origin=\d+", "origin=.", repr(value.expr))


def _build_of(
    cls: Callable[..., nn.Module], known: bool, monkeypatch: pytest.MonkeyPatch, **kwargs: str
) -> nn.Module:
    """``cls(**kwargs)`` built recorded on meta, with the known constructors or without
    (``known``); undoes ``monkeypatch`` (a follower noted before stops noting)."""
    if not known:
        monkeypatch.setattr(constructors, "install_known_constructors", lambda *a: lambda: None)
    with torch.device("meta"), shardinit.record_constructors():
        model = cls(**kwargs)
    monkeypatch.undo()
    return model


def _noted(monkeypatch: pytest.MonkeyPatch, follower: str) -> list[str]:
    """The classes whose tensors ``knownmodules.<follower>`` follows from now on, in order."""
    seen: list[str] = []
    follow = getattr(knownmodules, follower)

    def noting(recorder: object, module: nn.Module) -> None:
        seen.append(type(module).__name__)
        follow(recorder, module)

    monkeypatch.setattr(knownmodules, follower, noting)
    return seen


def _build(known: bool, monkeypatch: pytest.MonkeyPatch, **kwargs: str) -> nn.Module:
    return _build_of(_Norms, known, monkeypatch, **kwargs)


def _followed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The normalization layers whose constructors the entry follows, in order."""
    return _noted(monkeypatch, "_follow_constants")


def test_known_constructors_give_the_values_followed_and_eagers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generic = dict(_values(_build(False, monkeypatch)))
    seen = _followed(monkeypatch)
    model = _build(True, monkeypatch)
    assert seen == [
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "BatchNorm2d", "InstanceNorm2d",
        "SyncBatchNorm", "BatchNormAct2d", "BatchNorm1d",
    ]  # fmt: skip  # not _HalfReset (its own reset)
    assert dict(_values(model)) == generic and len(generic) == 39
    shardinit.materialize(model, seed=0)
    torch.manual_seed(0)
    eager = _Norms()
    pairs = zip(model.state_dict().items(), eager.state_dict().values(), strict=True)
    for (name, ours), theirs in pairs:
        if name != "act.weight":  # the stream's normal_, not torch's
            assert torch.equal(ours, theirs), name


def test_a_registration_hook_or_a_cpu_device_is_followed_as_any_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _followed(monkeypatch)
    noted: list[str] = []
    handle = register_module_buffer_registration_hook(lambda m, name, b: noted.append(name))
    try:
        _build(True, monkeypatch)
    finally:
        handle.remove()
    assert seen == [] and "running_var" in noted  # a hook could write what it is given
    seen = _followed(monkeypatch)
    model = _build(True, monkeypatch, device="cpu")
    assert "BatchNorm1d" in seen and len(seen) == 7  # all but the CPU one (and _HalfReset)
    assert model.on_device.running_var.device.type == "cpu"
    assert not constructors._BUFFERS.get(model.on_device)  # a CPU buffer keeps its value


def _uninstalled() -> Callable[..., None]:
    return knownmodules._NormBase.__dict__["__init__"]  # type: ignore[no-any-return]


def test_the_entry_is_put_back_after_the_build_and_on_an_error() -> None:
    with torch.device("meta"), shardinit.record_constructors():
        assert _uninstalled() is not knownmodules._TORCH_INIT
    assert _uninstalled() is knownmodules._TORCH_INIT
    with pytest.raises(ZeroDivisionError), torch.device("meta"), shardinit.record_constructors():
        nn.BatchNorm1d(2)
        _ = 1 / 0
    assert _uninstalled() is knownmodules._TORCH_INIT


class _OwnReset(nn.Linear):
    def reset_parameters(self) -> None:
        nn.init.constant_(self.weight, 0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)


class _Layers(nn.Module):
    """Every form of the empty-then-reset constructors (Linear, convolutions), and
    writes after them."""

    def __init__(self, device: str | None = None) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.no_bias = nn.Linear(5, 2, bias=False, dtype=torch.float64)
        self.conv1 = nn.Conv1d(2, 4, 3)
        self.conv2 = nn.Conv2d(3, 6, 3, bias=False, padding_mode="reflect", padding=1)
        self.conv3 = nn.Conv3d(2, 2, (1, 2, 3), groups=2)
        self.transposed = nn.ConvTranspose2d(4, 2, 2, stride=2)
        self.same = Conv2dSame(3, 5, 3, stride=2)
        self.own = _OwnReset(3, 3)
        self.on_device = nn.Linear(2, 2, device=device)
        self.lin.weight.data.normal_(0.0, 0.02)
        nn.init.ones_(self.conv1.bias)
        self.transposed.weight.data[0] = 0.25


def _layers_followed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The classes whose parameters the empty-then-reset entry follows, in order."""
    return _noted(monkeypatch, "_follow_empties")


def _build_layers(known: bool, monkeypatch: pytest.MonkeyPatch, **kwargs: str) -> nn.Module:
    return _build_of(_Layers, known, monkeypatch, **kwargs)


def test_linear_and_convolutions_give_the_values_followed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    generic_model = _build_layers(False, monkeypatch)
    generic = dict(_values(generic_model))
    seen = _layers_followed(monkeypatch)
    model = _build_layers(True, monkeypatch)
    assert seen == [
        "Linear", "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "Conv2dSame",
        "_OwnReset", "Linear",
    ]  # fmt: skip
    assert dict(_values(model)) == generic and len(generic) == 16
    assert model.own.weight.is_meta and model.own.bias.is_meta  # its own reset, followed
    shardinit.materialize(model, seed=3)
    shardinit.materialize(generic_model, seed=3)
    ours, theirs = model.state_dict(), generic_model.state_dict()
    assert list(ours) == list(theirs)
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), name
    assert torch.equal(model.own.weight, torch.full((3, 3), 0.5))
    assert torch.equal(model.transposed.weight[0], torch.full((2, 2, 2), 0.25))


def test_a_lazy_layer_or_a_cpu_device_is_followed_as_any_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _layers_followed(monkeypatch)
    model = _build_layers(True, monkeypatch, device="cpu")
    assert len(seen) == 8 and model.on_device.weight.device.type == "cpu"
    seen = _layers_followed(monkeypatch)
    with torch.device("meta"), shardinit.record_constructors():  # no values yet: none kept
        lazy = nn.Sequential(nn.LazyLinear(3), nn.LazyConv2d(2, 3), nn.LazyBatchNorm1d())
    assert seen == [] and all("reset_parameters" not in m.__dict__ for m in lazy)
    kept = [
        (attr, type(module._parameters.get(attr, module._buffers.get(attr))).__name__)
        for module in lazy
        for table in (constructors._RECORDS, constructors._BUFFERS)
        for attr in table.get(module, {})
    ]
    assert kept == [("num_batches_tracked", "Tensor")]  # the one tensor made already


def _records(monkeypatch: pytest.MonkeyPatch, known: bool) -> list[tuple[str, list[str]]]:
    """Every tensor a build of :class:`_Layers` followed, with each of its records'
    operation and ``file:line``, read when the build ends."""
    found: list[tuple[str, list[str]]] = []
    keep_values = constructors._keep_values

    def reading(values: Any, *args: Any) -> None:
        for track in values.mode.store.by_storage.values():
            found.append((track.label, [f"{op.op} at {op.where}" for op in track.ops]))
        keep_values(values, *args)

    monkeypatch.setattr(constructors, "_keep_values", reading)
    _build_layers(known, monkeypatch)  # (undoes the patch)
    return found


def test_torchs_own_reset_is_recorded_as_followed_with_its_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each ``torch.nn.init`` call of torch's ``reset_parameters`` is recorded with the
    operation and ``file:line`` the capture gives following the method."""
    generic = _records(monkeypatch, known=False)
    recorded = knownresets.record_torch_reset
    direct: list[str] = []

    def counting(recorder: Any, module: nn.Module, namespace: object) -> bool:
        done = recorded(recorder, module, namespace)
        direct.extend([type(module).__name__] if done else [])
        return done

    monkeypatch.setattr(knownmodules, "record_torch_reset", counting)
    assert _records(monkeypatch, known=True) == generic
    assert direct == [
        "Linear", "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d", "Conv2dSame",
        "Linear",
    ]  # fmt: skip  # not _OwnReset
    label, ops = generic[0]
    assert label.startswith("temporary empty(3, 4) at ") and len(generic) == 16
    assert ops[0].startswith("torch.nn.init.kaiming_uniform_(a=2.236")
    assert re.search(r"modules/linear.py:\d+ in reset_parameters$", ops[0]), ops[0]
