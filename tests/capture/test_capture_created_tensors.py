"""Parameters and buffers that init code creates, replaces or removes, and buffers it
fills randomly (issue 37, items 5 and 6), on a plain meta model and under FSDP2.

Kept as eager init code leaves the model: a Parameter put in place of one (its values are
the parameter's own stream's, as if written in place; its ``requires_grad``), a new
parameter on a plain meta model (a meta Parameter of the model under its canonical name,
filled from its own stream), a parameter another shape replaces, a removed parameter.
Refused before allocation, naming the path, what init code did and the line: random
values reaching a buffer (``normal_``, ``copy_(torch.rand(6))``, ``nn.init.uniform_``,
an assignment of ``torch.rand``), ties init code makes, tensors the capture did not see
computed, and under FSDP2 every change to the set of parameters or their shapes (FSDP2
fixes them at ``fully_shard``). A refused model is as it was.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import pytest
import torch
from materialize_workers import Checks, check, gloo_scenario, scenario_tests
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import shardinit
from shardinit import init

SEED = 37


def _stream(name: str, shape: tuple[int, ...], initializer: init.Initializer) -> torch.Tensor:
    """The whole parameter ``name`` as its own stream gives it."""
    return shardinit.full(shardinit.ParamSpec(name, shape, torch.float32, initializer, seed=SEED))


def _meta_linear() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(16, 32)


def _line_of(marker: str, function: Callable[..., object]) -> int:
    """The line of ``function``'s source that holds ``marker``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def _layout(model: nn.Module) -> list[tuple[str, tuple[int, ...], bool]]:
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return [(name, tuple(t.shape), t.is_meta) for name, t in tensors]


def _assert_refused(
    model: nn.Module, init_fn: Callable[[], object], pattern: str, marker: str = "# refused"
) -> None:
    """``materialize`` refuses ``init_fn`` with ``pattern`` and the line of ``marker``,
    before anything is allocated: the model's tensors are as they were."""
    before = _layout(model)
    with pytest.raises(shardinit.UnsupportedInitOpError) as refused:
        shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    line = f"{re.escape(__file__)}:{_line_of(marker, init_fn)} in "
    assert re.search(pattern.replace("LINE", line), str(refused.value)), refused.value
    assert _layout(model) == before


# ------------------------------------------------------------- kept as eager (meta)


def test_a_parameter_put_in_place_of_one_takes_its_own_stream() -> None:
    model = _meta_linear()

    def init_fn() -> None:
        model.weight = nn.Parameter(torch.empty(32, 16))
        nn.init.normal_(model.weight, std=0.02)
        model.bias = nn.Parameter(torch.zeros(32), requires_grad=False)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert torch.equal(model.weight.detach(), _stream("weight", (32, 16), init.normal(0, 0.02)))
    assert torch.equal(model.bias, torch.zeros(32))
    assert (model.weight.requires_grad, model.bias.requires_grad) == (True, False)
    # The same values as init code that writes the parameter in place.
    in_place = _meta_linear()
    shardinit.materialize(
        in_place, seed=SEED, init_fn=lambda: nn.init.normal_(in_place.weight, std=0.02)
    )
    assert torch.equal(model.weight, in_place.weight)


def _add_parameters(model: nn.Sequential) -> None:
    model[0].register_parameter("extra", nn.Parameter(torch.randn(4) * 0.5))
    with torch.device("meta"):
        model[0].gate = nn.Parameter(torch.empty(6))
    nn.init.uniform_(model[0].gate, -1, 1)
    model[0].weight = nn.Parameter(torch.empty(2, 4))  # another shape: a new one
    nn.init.ones_(model[0].weight)


def test_new_parameters_are_the_models_under_their_canonical_names() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4))
    shardinit.materialize(model, seed=SEED, init_fn=lambda: _add_parameters(model))
    eager = nn.Sequential(nn.Linear(4, 4))
    with torch.no_grad():
        _add_parameters(eager)
    params = dict(model.named_parameters())
    assert [(n, p.shape, p.requires_grad) for n, p in params.items()] == [
        (n, p.shape, p.requires_grad) for n, p in eager.named_parameters()
    ]
    assert not any(p.is_meta for p in model.parameters())
    expected = _stream("0.extra", (4,), init.normal(0, 1)) * 0.5
    assert torch.equal(params["0.extra"].detach(), expected)
    assert torch.equal(params["0.gate"].detach(), _stream("0.gate", (6,), init.uniform(-1, 1)))
    assert torch.equal(params["0.weight"].detach(), torch.ones(2, 4))
    assert eager[0].gate.is_meta  # eager init code on the CPU left it on meta (no values)


def test_a_removed_parameter_stays_removed() -> None:
    model = _meta_linear()

    def init_fn() -> None:
        model.bias = None
        nn.init.constant_(model.weight, 0.5)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert model.bias is None
    assert [n for n, _ in model.named_parameters()] == ["weight"]
    assert torch.equal(model(torch.ones(1, 16)), torch.full((1, 32), 8.0))

    deleted = _meta_linear()

    def delete() -> None:
        del deleted.bias

    shardinit.materialize(deleted, seed=SEED, init_fn=delete)
    assert "bias" not in deleted._parameters
    assert torch.equal(deleted.weight.detach(), _meta_default_weight())


@pytest.mark.parametrize("change", ["reshaped", "removed"])
def test_a_bias_default_keeps_the_fan_in_its_constructor_had(change: str) -> None:
    """torch.nn.Linear's bias bound is 1/sqrt(in_features) of its constructor: init code
    that gives the weight another shape or removes it afterwards leaves the bias so."""
    model = _meta_linear()

    def init_fn() -> None:
        if change == "reshaped":
            model.weight = nn.Parameter(torch.zeros(32, 4))
        else:
            model.weight = None

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    bound = 1 / 16**0.5
    assert torch.equal(model.bias.detach(), _stream("bias", (32,), init.uniform(-bound, bound)))


def _meta_default_weight() -> torch.Tensor:
    return _stream("weight", (32, 16), init.kaiming_uniform(a=5**0.5))


def test_deterministic_buffers_init_code_makes_are_eager() -> None:
    with torch.device("meta"):
        model = nn.BatchNorm1d(4)

    def init_fn() -> None:
        model.register_buffer("table", torch.arange(6.0) * 0.5)
        model.running_mean.fill_(2.0).mul_(3)
        model.running_var.copy_(torch.arange(4.0))

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert torch.equal(model.table, torch.arange(6.0) * 0.5)
    assert torch.equal(model.running_mean, torch.full((4,), 6.0))
    assert torch.equal(model.running_var, torch.arange(4.0))


# ---------------------------------------------------------------- refused (meta)


class Jittered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("jitter", torch.empty(6))


#: Per case, the aten operation refused and the write.
RANDOM_BUFFER_WRITES: dict[str, tuple[str, Callable[[Jittered], object]]] = {
    "normal_": ("normal_", lambda m: m.jitter.normal_(0, 0.01)),
    "init.uniform_": ("uniform_", lambda m: nn.init.uniform_(m.jitter)),
    "bernoulli_": ("bernoulli_", lambda m: m.jitter.bernoulli_(0.5)),
    "copy_rand": ("copy_", lambda m: m.jitter.copy_(torch.rand(6))),
    "add_randn_exp": ("add_", lambda m: m.jitter.zero_().add_(torch.randn(6).exp())),
    "copy_randperm": ("copy_", lambda m: m.jitter.copy_(torch.randperm(6).float())),
}


@pytest.mark.parametrize("case", sorted(RANDOM_BUFFER_WRITES))
def test_random_values_never_reach_a_meta_buffer(case: str) -> None:
    with torch.device("meta"):
        model = Jittered()
    op, write = RANDOM_BUFFER_WRITES[case]
    _assert_refused(
        model, lambda: write(model),
        rf"^capture_init: buffer 'jitter': {op}(\.\w+)? at {re.escape(__file__)}:\d+ in "
        r"<lambda>: .*random values from torch's global generator, no function of seed",
        marker="",
    )  # fmt: skip


def test_random_buffers_init_code_assigns_are_refused_naming_the_line() -> None:
    with torch.device("meta"):
        model = Jittered()

    def assigned() -> None:
        model.jitter = torch.rand(6)  # refused

    def registered() -> None:
        model.proj.register_buffer("noise", torch.empty(3).normal_())  # refused

    cases = ((assigned, "jitter", "Jittered"), (registered, "proj.noise", "Linear"))
    for init_fn, name, owner in cases:
        _assert_refused(
            model, init_fn,
            rf"^capture_init: buffer '{re.escape(name)}' \({owner}\): init code assigns it "
            r"\(\d,\) float32 random values at LINE.*: they come from torch's global generator",
        )  # fmt: skip


def test_random_tensors_init_code_keeps_as_attributes_are_refused() -> None:
    model = _meta_linear()

    def noise() -> None:
        model.noise = torch.rand(4)  # refused

    def tables() -> None:
        model.tables = [torch.ones(2), torch.randn(2)]  # refused

    def kept() -> None:
        model.table = torch.arange(3.0) * 2
        nn.init.zeros_(model.bias)

    for attr, init_fn in (("noise", noise), ("tables", tables)):
        _assert_refused(
            model, init_fn,
            rf"^capture_init: attribute '{attr}' \(Linear\): init code sets it to temporary "
            r"\w+\(\d,\) at LINE.*, random values \(found when init_fn returned\): they come "
            r"from torch's global generator",
        )  # fmt: skip
    shardinit.materialize(model, seed=SEED, init_fn=kept)
    assert torch.equal(model.table, torch.arange(3.0) * 2)


def test_random_tensors_init_code_puts_in_a_list_or_dict_the_module_held_are_refused() -> None:
    # The same list or dict object before and after: its tensors then are compared, not
    # the object (a tuple or tensor attribute that stays the same object is unchanged).
    model = _meta_linear()
    model.tables = []
    model.named = {"ones": torch.ones(2)}
    model.fixed = (torch.zeros(2),)

    def append() -> None:
        model.tables.append(torch.randn(2))  # refused

    def put() -> None:
        model.named["noise"] = torch.rand(2)  # refused

    for attr, init_fn in (("tables", append), ("named", put)):
        _assert_refused(
            model, init_fn,
            rf"^capture_init: attribute '{attr}' \(Linear\): init code sets it to temporary "
            r"\w+\(\d,\) at LINE.*, random values \(found when init_fn returned\)",
        )  # fmt: skip
        getattr(model, attr).clear()
    model.named["ones"] = torch.ones(2)

    def known() -> None:
        model.named["twos"] = torch.ones(2) * 2
        nn.init.zeros_(model.bias)

    shardinit.materialize(model, seed=SEED, init_fn=known)
    assert torch.equal(model.named["twos"], torch.full((2,), 2.0))
    assert torch.equal(model.fixed[0], torch.zeros(2))


def test_ties_and_tensors_the_capture_did_not_see_are_refused() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    made_before = nn.Parameter(torch.ones(4, 4))

    def tie() -> None:
        model[1].weight = model[0].weight  # refused

    def from_before() -> None:
        model[1].weight = made_before  # refused

    def reads() -> None:
        model[1].weight = nn.Parameter(model[0].weight * 2)  # refused

    def partial() -> None:
        model[1].bias = nn.Parameter(torch.empty(4))  # refused
        model[1].bias[:2].zero_()

    head = r"^capture_init: parameter '1\.(weight|bias)' \(Linear\): init code "
    _assert_refused(model, tie, head + r"ties it to parameter '0\.weight' at LINE")
    _assert_refused(model, from_before, head + r"replaces it with a new Parameter at LINE.*: its "
                    r"values were not computed by init code that the capture follows")  # fmt: skip
    _assert_refused(
        model, reads, head + r".* at LINE.*it reads the values of parameter '0\.weight'"
    )
    _assert_refused(model, partial, head + r".* at LINE.*wrote only part of temporary empty\(4,\)")


# --------------------------------------------------------------------------- FSDP2


def _fsdp2_model(world: int) -> nn.Sequential:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 4))
    mesh = init_device_mesh("cpu", (world,))
    for block in (model[0], model[2]):
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _check_fsdp2_replacement_takes_its_stream(world: int) -> None:
    model = _fsdp2_model(world)

    def init_fn() -> None:
        model[2].weight = nn.Parameter(torch.empty(4, 8))
        nn.init.normal_(model[2].weight, std=0.02)
        model[1].running_mean.copy_(torch.arange(8.0))

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    weight = model[2].weight
    assert isinstance(weight, DTensor)
    assert torch.equal(weight.full_tensor(), _stream("2.weight", (4, 8), init.normal(0, 0.02)))
    assert torch.equal(model[1].running_mean, torch.arange(8.0))


def _check_fsdp2_changes_refused(world: int) -> None:
    model = _fsdp2_model(world)

    def added() -> None:
        model[0].register_parameter("extra", nn.Parameter(torch.zeros(3)))  # refused

    def removed() -> None:
        model[0].bias = None  # refused

    def reshaped() -> None:
        model[2].weight = nn.Parameter(torch.zeros(2, 8))  # refused

    def jitter() -> None:
        model[1].running_var.normal_()  # refused

    fixed = r"the parameters of a model FSDP2 or tensor parallelism sharded are fixed"
    held = r"FSDP2 and tensor parallelism hold the parameters they shard"
    _assert_refused(model, added, rf"^capture_init: parameter '0\.extra' .*adds a new .*{fixed}")
    _assert_refused(
        model, removed, rf"^capture_init: parameter '0\.bias' .*removes it at .*: {held}"
    )
    _assert_refused(model, reshaped, rf"^capture_init: parameter '2\.weight' .*: {held}")
    _assert_refused(model, jitter, r"^capture_init: buffer '1\.running_var': normal_ at LINE")
    assert all(isinstance(p, DTensor) for p in model.parameters())


@gloo_scenario(1, 2)
def created_tensors_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    check(checks, "replacement", lambda: _check_fsdp2_replacement_takes_its_stream(world))
    check(checks, "refused", lambda: _check_fsdp2_changes_refused(world))
    return checks


test_fsdp2_created_tensors = scenario_tests(
    created_tensors_scenario, ["replacement", "refused"], [1, 2]
)
