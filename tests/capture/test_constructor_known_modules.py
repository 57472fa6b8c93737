"""torch.nn's normalization layers built inside ``record_constructors`` without their
operations followed (:mod:`shardinit._integration.capture.session.knownmodules`): each
tensor's constructor value is the one the capture gives following every operation, and
``materialize`` gives eager's values; where a fact may not hold (a class's own reset, a
registration hook, a CPU device) the constructor is followed as any other code."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
import torch
from timm.layers import BatchNormAct2d
from torch import nn
from torch.nn.modules.module import register_module_buffer_registration_hook

import shardinit
from shardinit._integration.capture.session import constructors, knownmodules


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


def _build(known: bool, monkeypatch: pytest.MonkeyPatch, **kwargs: str) -> nn.Module:
    if not known:
        monkeypatch.setattr(constructors, "install_known_constructors", lambda *a: lambda: None)
    with torch.device("meta"), shardinit.record_constructors():
        model = _Norms(**kwargs)
    monkeypatch.undo()
    return model


def _followed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The classes whose constructors the entry follows from now on, in order."""
    seen: list[str] = []
    follow = knownmodules._follow

    def noting(recorder: object, module: nn.Module) -> None:
        seen.append(type(module).__name__)
        follow(recorder, module)  # type: ignore[arg-type]

    monkeypatch.setattr(knownmodules, "_follow", noting)
    return seen


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
