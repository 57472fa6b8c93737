"""shardinit inside the trainers people use (issue 23): the transformers Trainer on
transformers' own FSDP2 (``DistributedConfig``), accelerate (FSDP2 and FSDP1) and
Lightning Fabric (``ModelParallelStrategy``), on gloo, with a tiny Llama whose embeddings
are tied. The code run is the recipes of docs/trainers.md (``trainer_recipes``).

The shared gloo groups of worlds 1 and 2 run every scenario. Each scenario takes the model
as the framework holds it right before its first optimizer step (step 0), gathers every
parameter, and compares it byte for byte with ``materialize`` of the same model built on
meta, unsharded, in the same process: equal at world 1 and at world 2 means equal across
world sizes. Then it runs one training step and checks that every parameter moved (an
optimizer that lost its parameters, as in accelerate's meta trap, leaves some unmoved).

accelerate enables FSDP only for GPU-like distributed types: with ``cpu=True`` its state
is MULTI_CPU, where ``prepare`` wraps in DDP (accelerate 1.15 state.py, accelerator.py).
On CPU the tests therefore use the real ``Accelerator(cpu=True)`` with its state set to
FSDP and the recipe's plugin (:func:`_cpu_fsdp_accelerator`); everything after that
(``prepare``, ``fsdp2_prepare_model``, the FSDP1 wrap with ``ensure_weights_retied``, the
optimizer remap) is accelerate's own code.

Lightning's FSDPStrategy is not run: it refuses CPU, and past that check (a subclass) it
wraps with ``device_id=root_device.index``, None on CPU, for which torch's FSDP1 refuses a
meta model ("FSDP needs a non-CPU accelerator device"). Its shardinit part (FSDP1 with
``fsdp1_param_init_fn``, ``capture_init``, ``materialize``) is the accelerate FSDP1 path.
"""

from __future__ import annotations

import functools
import math
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import trainer_recipes
from materialize_workers import Checks, check, expect_equal, gloo_scenario, scenario_tests
from torch import nn

import shardinit

pytestmark = pytest.mark.clients

SEED = 4321
SCENARIOS = ["transformers_trainer", "accelerate_fsdp2", "accelerate_meta_trap", "accelerate_fsdp1"]
SCENARIOS += ["lightning_fabric", "lightning_trainer"]
Weights = dict[str, torch.Tensor]


def _llama() -> tuple[Any, Any]:
    """The tiny Llama with tied embeddings (class, config)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=1000, max_position_embeddings=64, pad_token_id=0,
        tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM, config


def _batch() -> torch.Tensor:
    return torch.randint(1, 1000, (4, 16), generator=torch.Generator().manual_seed(0))


# --------------------------------------------------------------------------- in process


def test_fsdp1_param_init_fn_under_accelerates_tie_wrapper() -> None:
    """accelerate wraps every FSDP1 ``param_init_fn`` of a tied model in
    ``ensure_weights_retied``, which continues with the function's return value."""
    from accelerate.utils.fsdp_utils import ensure_weights_retied

    model_class, config = _llama()
    with torch.device("meta"):
        model = model_class(config)
    init_fn = functools.partial(shardinit.fsdp1_param_init_fn, device="cpu")
    wrapped = ensure_weights_retied(init_fn, model, torch.device("cpu"))
    assert wrapped is not init_fn  # the tied path of the wrapper
    for module in (model.model.embed_tokens, model.lm_head):  # as FSDP1 calls it
        assert wrapped(module) is module
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.lm_head.weight.device.type == "cpu"


def test_lightning_fsdp1_strategy_forwards_the_allocating_param_init_fn() -> None:
    """The FSDPStrategy recipe is not run (Lightning's FSDP1 needs a GPU, see the module
    docstring); what shardinit adds to it is checked: the strategy forwards the
    allocating ``param_init_fn`` into FSDP1's kwargs."""
    from lightning.fabric.strategies import FSDPStrategy
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    strategy = trainer_recipes.lightning_fsdp1_strategy(torch.device("cpu"), LlamaDecoderLayer)
    assert isinstance(strategy, FSDPStrategy)
    init_fn = strategy._fsdp_kwargs["param_init_fn"]
    assert init_fn.func is shardinit.fsdp1_param_init_fn, init_fn
    assert strategy._fsdp_kwargs["use_orig_params"] is True


# --------------------------------------------------------------------------- rank side


@functools.cache
def _reference() -> nn.Module:
    """The Llama materialized on meta, unsharded, with its own init code."""
    model_class, config = _llama()
    with torch.device("meta"):
        model = model_class(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the dropped tie write
        shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    return model


def _gathered(model: nn.Module) -> Weights:
    """Every parameter of ``model`` (FSDP2 DTensors gathered), by canonical name."""
    out = {}
    for name, param in model.named_parameters():
        full = param.full_tensor() if hasattr(param, "full_tensor") else param
        out[shardinit.canonical_name(name)] = full.detach().clone()
    return out


def _gathered_fsdp1(model: nn.Module) -> Weights:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.summon_full_params(model):
        return _gathered(model)


def _expect_reference(step0: Weights, model: nn.Module) -> None:
    """``step0`` (gathered parameters) and ``model``'s buffers equal the reference."""
    reference = _reference()
    params = {name: p.detach() for name, p in reference.named_parameters()}
    assert sorted(step0) == sorted(params), sorted(step0)
    for name, value in step0.items():
        expect_equal(name, value, params[name])
    buffers = dict(reference.named_buffers())
    ours = {shardinit.canonical_name(n): b for n, b in model.named_buffers()}
    assert sorted(ours) == sorted(buffers), sorted(ours)
    for name, value in ours.items():
        expect_equal(name, value, buffers[name])


def _expect_trained(step0: Weights, step1: Weights, loss: float) -> None:
    assert math.isfinite(loss), loss
    unmoved = [name for name, value in step0.items() if torch.equal(value, step1[name])]
    assert not unmoved, f"one step left these parameters unchanged: {unmoved}"


def _step(model: Any, optimizer: Any, backward: Callable[[torch.Tensor], None]) -> float:
    tokens = _batch()
    loss = model(input_ids=tokens, labels=tokens).loss
    backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    return float(loss)


def _cpu_fsdp_accelerator(plugin: Any) -> Any:
    """The real ``Accelerator(cpu=True)``, with its state set to FSDP and ``plugin``:
    accelerate itself enables FSDP only on GPU-like distributed types. Its device is set
    to ``cpu`` (MULTI_CPU gives ``cpu:<local rank>``, which FSDP1 refuses as
    ``device_id``: "Inconsistent compute device")."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DistributedType

    AcceleratorState._reset_state(reset_partial_state=True)  # one state per process
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True)
    accelerator.state.fsdp_plugin = plugin
    accelerator.state.distributed_type = DistributedType.FSDP
    accelerator.state.device = torch.device("cpu")
    return accelerator


def _transformers_trainer() -> None:
    from transformers import TrainerCallback, TrainingArguments

    step0: Weights = {}

    class Step0(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step0.update(_gathered(kw["model"]))  # after Trainer's own set-up

    model_class, config = _llama()
    dataset = [{"input_ids": t, "labels": t} for t in _batch()]
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, use_cpu=True, save_strategy="no", max_steps=1, learning_rate=1e-3,
            per_device_train_batch_size=2, report_to="none", disable_tqdm=True,
        )  # fmt: skip
        trainer = trainer_recipes.transformers_trainer(model_class, config, SEED, args, dataset)
        trainer.add_callback(Step0())
        result = trainer.train()
    _expect_reference(step0, trainer.model)
    _expect_trained(step0, _gathered(trainer.model), result.training_loss)


def _accelerate_fsdp2() -> None:
    accelerator = _cpu_fsdp_accelerator(trainer_recipes.accelerate_fsdp2_plugin())
    model, optimizer = trainer_recipes.accelerate_fsdp2(accelerator, *_llama(), SEED)
    step0 = _gathered(model)
    _expect_reference(step0, model)
    loss = _step(model, optimizer, accelerator.backward)
    _expect_trained(step0, _gathered(model), loss)


def _accelerate_meta_trap() -> None:
    """prepare on a meta model: every optimizer slot holds one parameter; materialize
    refuses the model afterwards."""
    accelerator = _cpu_fsdp_accelerator(trainer_recipes.accelerate_fsdp2_plugin())
    model_class, config = _llama()
    with torch.device("meta"):
        model = model_class(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    slots = [p for group in optimizer.param_groups for p in group["params"]]
    assert len({id(p) for p in slots}) == 1 < len(slots), "the trap did not happen"
    try:
        shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    except shardinit.ShardInitError as error:
        assert "went through accelerate's Accelerator.prepare" in str(error), error
    else:
        raise AssertionError("materialize accepted a model that prepare saw on meta")


def _accelerate_fsdp1() -> None:
    plugin = trainer_recipes.accelerate_fsdp1_plugin(torch.device("cpu"))
    accelerator = _cpu_fsdp_accelerator(plugin)
    model, optimizer = trainer_recipes.accelerate_fsdp1(accelerator, *_llama(), SEED)
    inner = model.module
    assert inner.lm_head.weight is inner.model.embed_tokens.weight, "tie lost"
    step0 = _gathered_fsdp1(model)
    _expect_reference(step0, model)
    loss = _step(model, optimizer, accelerator.backward)
    _expect_trained(step0, _gathered_fsdp1(model), loss)


def _lightning_fabric() -> None:
    fabric, model, optimizer = trainer_recipes.lightning_fabric(*_llama(), SEED, "cpu")
    step0 = _gathered(model.module)
    _expect_reference(step0, model.module)
    loss = _step(model, optimizer, fabric.backward)
    _expect_trained(step0, _gathered(model.module), loss)


def _lightning_trainer() -> None:
    from lightning.pytorch import Callback

    seen: dict[str, Any] = {}

    class Step0(Callback):  # type: ignore[misc]
        def on_train_start(self, trainer: Any, module: Any) -> None:
            seen["step0"] = _gathered(module.model)  # after Lightning's set-up

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, *_: Any) -> None:
            seen["loss"] = float(outputs["loss"])

    with tempfile.TemporaryDirectory() as out:
        trainer, module = trainer_recipes.lightning_trainer(
            *_llama(), SEED, "cpu", max_steps=1, default_root_dir=out, logger=False,
            callbacks=[Step0()], enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
        )  # fmt: skip
        trainer.fit(module, torch.utils.data.DataLoader(list(_batch()), batch_size=2))
    _expect_reference(seen["step0"], module.model)
    _expect_trained(seen["step0"], _gathered(module.model), seen["loss"])


@gloo_scenario(1, 2)  # joins the clients' groups of worlds 1 and 2 (no launch of its own)
def trainers_scenario(rank: int, world: int) -> Checks:
    checks: Checks = {}
    for name in SCENARIOS:
        run = globals()[f"_{name}"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the frameworks' deprecation and tie notes
            check(checks, name, run)
    return checks


test_trainer_step0_weights_equal_materialize_on_meta = scenario_tests(
    trainers_scenario, SCENARIOS, [1, 2]
)
