"""Code that asks a tensor made on meta for the capture where it is (``w.is_meta``,
``w.device.type == "meta"``, ``w.device == torch.device("meta")``, ``is_cpu``) gets the
answer of the CPU tensor eager torch computes, so it takes eager's branch: a constructor
that skips its init "on meta, where a checkpoint fills it" (peft's ``mica_init``,
DeLoRA's weight norm, transformers' Mamba mixers) runs it inside ``record_constructors``,
recorded or refused as any other code, never skipped silently. The answer handed back to
torch as a device (``torch.zeros(n, device=w.device)``, ``t.to(w.device)``) is meta
again, beside the tensor it came from. Known values are checked against the module
built eagerly on the CPU, byte for byte."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit

Question = Callable[[torch.Tensor], bool]

#: Ways init code asks "is this tensor on meta?"; each is True on meta in eager torch.
QUESTIONS: dict[str, Question] = {
    "is_meta": lambda t: t.is_meta,
    "device.type": lambda t: t.device.type == "meta",
    "device ==": lambda t: t.device == torch.device("meta"),
    "not is_cpu": lambda t: not t.is_cpu,
    "str(device)": lambda t: str(t.device) == "meta",
}


class SkipsOnMeta(nn.Module):
    """Initializes itself unless its (random) weight is on meta, as peft's adapters do
    where a checkpoint is expected to fill them."""

    steps: torch.Tensor

    def __init__(self, on_meta: Question) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)  # kaiming draws: values the capture cannot tabulate
        self.scale = nn.Parameter(torch.empty(4))
        self.register_buffer("steps", torch.empty(3))
        if on_meta(self.lin.weight):
            return
        nn.init.ones_(self.scale)
        self.steps.copy_(torch.arange(3.0, device=self.lin.weight.device) * 0.5)


def _build(factory: Callable[[], nn.Module]) -> nn.Module:
    with torch.device("meta"), shardinit.record_constructors():
        return factory()


def _meta(tensor: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():  # the tensor's own device, not the capture's answer
        return bool(tensor.is_meta)


@pytest.mark.parametrize("question", list(QUESTIONS.values()), ids=list(QUESTIONS))
def test_a_constructor_that_skips_its_init_on_meta_takes_eagers_branch(
    question: Question,
) -> None:
    model = _build(lambda: SkipsOnMeta(question))
    assert _meta(model.scale) and _meta(model.steps)  # answered as the CPU, still on meta
    shardinit.materialize(model, seed=0)
    eager = SkipsOnMeta(question)
    assert torch.equal(model.scale.detach(), eager.scale.detach())  # ones, not left empty
    assert torch.equal(model.steps, eager.steps)


class MadeOnItsDevice(nn.Module):
    """New tensors made on (or moved to) the device of a random weight: a parameter, a
    buffer and a move, each a value the capture must keep on meta."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 4)
        device = self.lin.weight.device
        self.bias2 = nn.Parameter(torch.full((4,), 0.25, device=device))
        self.register_buffer("pos", torch.arange(4, device=device).float().to(device))
        self.gate = nn.Parameter(torch.empty(4))
        self.gate.data = torch.ones(4, device=self.gate.device) * 2
        self.norm = nn.LayerNorm(4).to(device, dtype=torch.float32)


def test_tensors_made_on_the_answered_device_stay_on_meta_with_eagers_values() -> None:
    model = _build(MadeOnItsDevice)
    assert all(_meta(t) for t in model.state_dict().values())
    shardinit.materialize(model, seed=0)
    eager = MadeOnItsDevice()
    ours, theirs = model.state_dict(), eager.state_dict()
    for name in ("bias2", "pos", "gate", "norm.weight", "norm.bias"):
        assert torch.equal(ours[name], theirs[name]), name


class DecomposesOffMeta(nn.Module):
    """Computes a parameter from another's random values unless on meta (PiSSA, MiCA,
    DeLoRA): values no stream replays."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.basis = nn.Parameter(torch.empty(4, 2))
        if self.basis.device.type == "meta":
            return
        u, _, _ = torch.linalg.svd(self.lin.weight.data, full_matrices=False)
        self.basis.data = u[:, -2:].contiguous()


def test_a_branch_off_meta_the_capture_cannot_replay_is_refused_naming_it() -> None:
    model = _build(DecomposesOffMeta)
    with pytest.raises(shardinit.ShardInitError) as raised:
        shardinit.materialize(model, seed=0)
    message = str(raised.value)
    assert "basis" in message
    assert "linalg_svd" in message and "test_constructor_device_questions.py" in message


def test_a_fresh_tensor_under_the_meta_context_answers_as_a_cpu_build() -> None:
    # transformers' get_torch_context_manager_or_global_device asks torch.tensor([]).device
    # whether the build is on meta (post_init then skips its init): a CPU build is not.
    seen: dict[str, object] = {}

    class Probe(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            seen["fresh"] = torch.tensor([]).device
            seen["random"] = torch.randn(2).device

    _build(Probe)
    assert seen == {"fresh": torch.device("cpu"), "random": torch.device("cpu")}
    with torch.device("meta"):  # outside the capture, torch's own answer
        assert torch.tensor([]).device == torch.device("meta")


class LoopsOnAKnownDevice(nn.Module):
    """fla's RWKV7 init: tables written element by element on a parameter's device, where
    that parameter's values are known (zeros): the CPU table the capture runs it as."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Parameter(torch.zeros(6))
        zigzag = torch.zeros(6, device=self.mix.device)
        for n in range(6):
            zigzag[n] = (n % 3) - 1.0
            zigzag[n] = zigzag[n] * abs(zigzag[n])
        self.mix.data = zigzag + 0.5


def test_a_table_made_on_a_known_tensors_device_is_a_cpu_table() -> None:
    model = _build(LoopsOnAKnownDevice)
    shardinit.materialize(model, seed=0)
    assert torch.equal(model.mix.detach(), LoopsOnAKnownDevice().mix.detach())
