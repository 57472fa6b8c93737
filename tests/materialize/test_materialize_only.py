"""Filling part of a model (issue 29): ``materialize(only=...)`` after a checkpoint of part
of the model is loaded, the ``materialize(submodule)`` trap, and parameters a constructor
deep-copied from another (``record_constructors``).

``only`` is checked against the whole-model materialize of the same model (the values
each filled parameter must get) and against the checkpoint's bytes (what every other
parameter must keep), on plain meta models here and on FSDP2 at W = 1, 2, 3 (the gloo
scenario below)."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable

import pytest
import torch
from materialize_workers import Checks, TinyLM, check, expect_equal, gloo_scenario, scenario_tests
from torch import nn

import shardinit
from shardinit import init

SEED = 2929
Weights = dict[str, torch.Tensor]


def _untied_tinylm() -> TinyLM:
    """TinyLM on meta with its own output head (a checkpoint loaded with assign=True
    cannot keep a tie: each key gets its own tensor)."""
    with torch.device("meta"):
        model = TinyLM()
        model.output.weight = nn.Parameter(torch.empty(37, 12))
    return model


def _init_fn(model: TinyLM) -> Callable[[], None]:
    """Init code over the whole model, as a model's ``init_weights``: normal weights,
    zero biases."""

    def init_weights() -> None:
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    return init_weights


@functools.cache
def _whole() -> Weights:
    """The values of the whole-model materialize (what each filled parameter must get)."""
    model = _untied_tinylm()
    shardinit.materialize(model, seed=SEED, init_fn=_init_fn(model))
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@functools.cache
def _checkpoint() -> Weights:
    """A checkpoint of every part of the model but the second block: other values than
    the whole-model materialize's (shifted by 0.5), so a refill would show."""
    return {k: v + 0.5 for k, v in _whole().items() if not k.startswith("layers.1.")}


def _expect_filled_and_kept(got: Weights, filled: set[str]) -> None:
    whole, loaded = _whole(), _checkpoint()
    assert sorted(got) == sorted(whole)
    assert filled == set(whole) - set(loaded) and filled
    for name, value in got.items():
        expect_equal(name, value, whole[name] if name in filled else loaded[name])


# --------------------------------------------------------------------------- only=


def test_only_missing_keys_fills_what_the_checkpoint_lacks() -> None:
    model = _untied_tinylm()
    missing = model.load_state_dict(_checkpoint(), strict=False, assign=True).missing_keys
    loaded = {name: p for name, p in model.named_parameters() if not p.is_meta}
    shardinit.materialize(model, seed=SEED, init_fn=_init_fn(model), only=missing)
    got = {name: p.detach() for name, p in model.named_parameters()}
    _expect_filled_and_kept(got, set(missing))
    for name, param in loaded.items():  # not replaced, not rewritten
        assert model.get_parameter(name) is param, name


def test_only_predicate_and_names_with_wrapper_segments() -> None:
    """A predicate sees canonical names; names from a wrapped model (``_orig_mod.``, as
    ``torch.compile``'s module reports them) are converted."""
    for only in (
        lambda name: name.startswith("layers.1."),
        [f"_orig_mod.{name}" for name in _whole() if name.startswith("layers.1.")],
    ):
        model = _untied_tinylm()
        model.load_state_dict(_checkpoint(), strict=False, assign=True)
        shardinit.materialize(model, seed=SEED, init_fn=_init_fn(model), only=only)
        got = {name: p.detach() for name, p in model.named_parameters()}
        _expect_filled_and_kept(got, {n for n in _whole() if n.startswith("layers.1.")})


def test_only_leaves_other_meta_parameters_on_meta() -> None:
    model = _untied_tinylm()
    shardinit.materialize(model, seed=SEED, only=["norm.weight", "output.weight"])
    on_meta = sorted(name for name, p in model.named_parameters() if p.is_meta)
    assert on_meta == sorted(set(_whole()) - {"norm.weight", "output.weight"})
    expect_equal("norm.weight", model.norm.weight.detach(), torch.ones(12))


def test_only_names_a_tied_parameter_by_any_holder() -> None:
    with torch.device("meta"):
        model = TinyLM()
    shardinit.materialize(model, seed=SEED, only=["output.weight"])  # the tie's second name
    assert not model.tok_embeddings.weight.is_meta
    assert model.output.weight is model.tok_embeddings.weight
    assert model.norm.weight.is_meta


def test_a_tie_loaded_with_assign_is_tied_again_then_the_names_on_meta_are_filled() -> None:
    """load_state_dict(assign=True) unties (docs/capturing-init.md): tie again, then fill
    what is still on meta."""
    with torch.device("meta"):
        model = TinyLM()
    embeddings = torch.full((37, 12), 0.5)
    found = model.load_state_dict({"tok_embeddings.weight": embeddings}, strict=False, assign=True)
    assert "output.weight" in found.missing_keys and model.output.weight.is_meta  # untied
    model.output.weight = model.tok_embeddings.weight  # tied again, as tie_weights() does
    on_meta = [name for name, p in model.named_parameters() if p.is_meta]
    assert "output.weight" not in on_meta and "tok_embeddings.weight" not in on_meta
    shardinit.materialize(model, seed=SEED, only=on_meta)
    expect_equal("output.weight", model.output.weight.detach(), embeddings)
    assert not any(p.is_meta for p in model.parameters())


# --------------------------------------------------------------------------- the trap


def _linear(name: str) -> torch.Tensor:
    """torch.nn's default for a Linear(6, 4) weight named ``name``, from its spec."""
    kaiming = init.kaiming_uniform(a=5**0.5)
    return shardinit.full(shardinit.ParamSpec(name, (4, 6), torch.float32, kaiming, seed=SEED))


def _two_blocks() -> nn.Sequential:
    with torch.device("meta"):
        return nn.Sequential(nn.Linear(6, 4), nn.Linear(6, 4))


def test_a_submodule_is_refused_and_only_fills_it_with_the_whole_models_values() -> None:
    """``materialize(part)`` would name both parts' parameters ``weight`` and ``bias``
    (equal values): refused, with the ``only=`` that fills the part."""
    model = _two_blocks()
    with pytest.raises(shardinit.ShardInitError, match=r"a Sequential holds it as '1'"):
        shardinit.materialize(model[1], seed=SEED)
    assert model[1].weight.is_meta  # refused before anything was touched
    shardinit.materialize(model, seed=SEED, only=lambda name: name.startswith("1."))
    assert model[0].weight.is_meta
    whole = _two_blocks()
    shardinit.materialize(whole, seed=SEED)
    expect_equal("1.weight", model[1].weight.detach(), whole[1].weight.detach())
    assert not torch.equal(whole[0].weight, whole[1].weight)


def test_a_submodule_of_a_deep_copy_is_refused() -> None:
    """A deep copy's modules are linked without registration hooks: the registry scans."""
    model = copy.deepcopy(_two_blocks())
    with pytest.raises(shardinit.ShardInitError, match=r"holds it as '0'"):
        shardinit.materialize(model[0], seed=SEED)


def test_a_module_inside_a_wrapper_only_is_not_a_part() -> None:
    """A wrapper's own segment is not part of canonical names (stream-format.md §5): the
    module under it has the same names as the wrapper."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    with torch.device("meta"):
        inner = nn.Linear(6, 4)
    wrapper = checkpoint_wrapper(inner)
    shardinit.materialize(inner, seed=SEED)
    expect_equal("weight", wrapper._checkpoint_wrapped_module.weight.detach(), _linear("weight"))


# --------------------------------------------------------------------------- copies


def _source_and_copy(record: bool) -> nn.ModuleDict:
    """A module and its deep copy (as peft's modules_to_save makes it), built on meta."""
    recording = shardinit.record_constructors() if record else contextlib.nullcontext()
    with torch.device("meta"), recording:
        source = nn.Linear(6, 4)
        return nn.ModuleDict({"source": source, "copy": copy.deepcopy(source)})


def test_eager_deep_copy_starts_equal_to_its_source() -> None:
    """What the copies below must match: torch's own eager deep copy."""
    source = nn.Linear(6, 4)
    copied = copy.deepcopy(source)
    assert torch.equal(copied.weight, source.weight) and copied.weight is not source.weight


def test_a_deep_copy_under_record_constructors_keeps_its_sources_values() -> None:
    model = _source_and_copy(record=True)
    shardinit.materialize(model, seed=SEED)
    for attr in ("weight", "bias"):
        source, copied = getattr(model["source"], attr), getattr(model["copy"], attr)
        expect_equal(attr, copied.detach(), source.detach())
        assert copied is not source  # a copy, not a tie
    expect_equal("source.weight", model["source"].weight.detach(), _linear("source.weight"))


def test_init_fn_writing_the_copy_on_its_own_wins() -> None:
    """init_fn runs after the constructor: where it writes the copy, the copy takes its
    write (eager: the copy diverges from the source); where it writes both with the same
    operation, they stay equal (the copy's values are named by the source)."""
    model = _source_and_copy(record=True)

    def init_fn() -> None:
        nn.init.zeros_(model["copy"].bias)
        nn.init.normal_(model["source"].weight, std=0.02)
        nn.init.normal_(model["copy"].weight, std=0.02)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    expect_equal("copy.bias", model["copy"].bias.detach(), torch.zeros(4))
    assert not torch.equal(model["source"].bias, torch.zeros(4))
    expect_equal("copy.weight", model["copy"].weight.detach(), model["source"].weight.detach())


def test_a_rule_for_the_copy_itself_wins_and_a_shared_rule_keeps_it_a_copy() -> None:
    model = _source_and_copy(record=True)
    rules = {"copy.weight": init.zeros(), "*.bias": init.normal(0.0, 0.1)}
    shardinit.materialize(model, seed=SEED, rules=rules)
    expect_equal("copy.weight", model["copy"].weight.detach(), torch.zeros(4, 6))
    expect_equal("copy.bias", model["copy"].bias.detach(), model["source"].bias.detach())
    spec = shardinit.ParamSpec("source.bias", (4,), torch.float32, init.normal(0.0, 0.1), seed=SEED)
    expect_equal("source.bias", model["source"].bias.detach(), shardinit.full(spec))


def test_a_deep_copy_on_plain_meta_gets_its_own_default() -> None:
    """Without record_constructors no copy is recorded (nothing sees a meta deep copy):
    the copy is a parameter of its own, with its own name's stream."""
    model = _source_and_copy(record=False)
    shardinit.materialize(model, seed=SEED)
    expect_equal("copy.weight", model["copy"].weight.detach(), _linear("copy.weight"))


def test_only_a_copy_of_a_loaded_source_is_refused() -> None:
    model = _source_and_copy(record=True)
    loaded = {"source.weight": torch.ones(4, 6), "source.bias": torch.ones(4)}
    missing = model.load_state_dict(loaded, strict=False, assign=True).missing_keys
    with pytest.raises(shardinit.ShardInitError, match=r"copy.weight \(a copy of source.weight\)"):
        shardinit.materialize(model, seed=SEED, only=missing)


# --------------------------------------------------------------------------- FSDP2


def _fsdp2_only_missing(world: int) -> None:
    """FSDP2 at W ranks: the checkpoint distributed onto the shards, loaded with
    assign=True, then ``only=missing_keys``; gathered, each parameter equals the
    whole-model materialize or the checkpoint; one training step runs."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    model = _untied_tinylm()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    held = model.state_dict()
    state = {k: distribute_tensor(v, mesh, held[k].placements) for k, v in _checkpoint().items()}
    missing = model.load_state_dict(state, strict=False, assign=True).missing_keys
    shardinit.materialize(model, seed=SEED, init_fn=_init_fn(model), only=missing)
    got = {name: p.full_tensor().detach() for name, p in model.named_parameters()}
    _expect_filled_and_kept(got, set(missing))
    loss = model(torch.arange(8).reshape(2, 4)).float().logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


@gloo_scenario(1, 2, 3)
def only_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    check(checks, "fsdp2_only_missing", lambda: _fsdp2_only_missing(world))
    return checks


test_fsdp2_only_missing_keys_gives_whole_model_values_and_checkpoint_bytes = scenario_tests(
    only_scenario, ["fsdp2_only_missing"], [1, 2, 3]
)
