"""The recipes of docs/trainers.md: shardinit inside the transformers Trainer, accelerate
and Lightning. docs/trainers.md quotes each function of this module verbatim, and
tests/clients/test_trainers.py checks that the quotes are current and runs every recipe
on gloo at worlds 1 and 2, except Lightning's FSDPStrategy (GPU only: the test builds its
strategy and checks what shardinit adds; see the test module's docstring).

Each recipe is user code: it imports what it uses, so a block copied from the doc runs as
written inside a process group (torchrun). ``model_class`` and ``config`` are a
transformers model class and its config (``LlamaForCausalLM``, ``LlamaConfig(...)``).
"""

from __future__ import annotations

from typing import Any


def transformers_trainer(model_class: Any, config: Any, seed: int, args: Any, dataset: Any) -> Any:
    import torch
    import torch.distributed as dist
    from transformers import Trainer
    from transformers.distributed import DistributedConfig
    from transformers.initialization import no_tie_weights

    import shardinit

    distributed = DistributedConfig(fsdp_size=dist.get_world_size())
    distributed, _, mesh = model_class.prepare_distribute_model(distributed)
    # Built untied, as from_pretrained builds it: fully_shard on a tied model puts the
    # shared weight into two FSDP groups (a ValueError at the first forward).
    with torch.device("meta"), no_tie_weights():
        model = model_class(config)
    model = model_class.maybe_distribute_model(model, distributed, mesh)  # FSDP2, on meta
    model.tie_weights()  # as from_pretrained ties after loading
    shardinit.materialize(model, seed=seed, init_fn=model.init_weights)
    # args: save_strategy="no" or save_only_model=True (Trainer cannot resume these).
    return Trainer(model=model, args=args, train_dataset=dataset)


def accelerate_fsdp2_plugin() -> Any:
    from accelerate import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(
        fsdp_version=2,
        auto_wrap_policy="transformer_based_wrap",  # one unit per model._no_split_modules
        cpu_ram_efficient_loading=False,  # True broadcasts rank 0's values over ours
    )


def accelerate_fsdp2(accelerator: Any, model_class: Any, config: Any, seed: int) -> Any:
    import torch
    from accelerate.utils import fsdp2_prepare_model

    import shardinit

    with torch.device("meta"):
        model = model_class(config)
    # accelerate's own FSDP2 units and mixed precision, applied on meta.
    model = fsdp2_prepare_model(accelerator, model)
    shardinit.materialize(model, seed=seed, init_fn=model.init_weights)
    # Materialized before prepare: prepare maps the optimizer's parameters by data_ptr(),
    # which is 0 for every meta tensor. It returns the FSDP2 model unchanged.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return accelerator.prepare(model, optimizer)


def accelerate_fsdp1_plugin(device: Any) -> Any:
    import functools

    from accelerate import FullyShardedDataParallelPlugin

    import shardinit

    return FullyShardedDataParallelPlugin(
        fsdp_version=1,
        auto_wrap_policy="transformer_based_wrap",
        # Allocates only; materialize fills the flat shards after prepare.
        param_init_fn=functools.partial(shardinit.fsdp1_param_init_fn, device=device),
        sync_module_states=False,  # True replaces param_init_fn with to_empty
        cpu_ram_efficient_loading=False,  # True forces sync_module_states=True
    )


def accelerate_fsdp1(accelerator: Any, model_class: Any, config: Any, seed: int) -> Any:
    import torch

    import shardinit

    with torch.device("meta"):
        model = model_class(config)
    # FSDP1's flat parameters hide the original ones: capture the init code first.
    captured = shardinit.capture_init(model, model.init_weights)
    paths = {module: path for path, module in model.named_modules()}

    def buffer_init(module: Any, name: str, tensor: Any) -> None:
        # Under FSDP1, buffers init_fn computed (rotary inv_freq) come from here.
        tensor.copy_(captured.buffer_values[f"{paths[module]}.{name}".lstrip(".")])

    model = accelerator.prepare(model)  # FSDP1 wrap; param_init_fn allocates
    shardinit.materialize(model, seed=seed, init_fn=captured, buffer_init=buffer_init)
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-3))
    return model, optimizer


def lightning_fabric(model_class: Any, config: Any, seed: int, accelerator: str) -> Any:
    import torch
    import torch.distributed as dist
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import fully_shard

    import shardinit

    def parallelize(model: Any, device_mesh: Any) -> Any:
        mesh = device_mesh["data_parallel"]
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        # Nothing left on meta: Lightning's to_empty() + reset_parameters() is skipped.
        shardinit.materialize(model, seed=seed, init_fn=model.init_weights)
        return model

    world = dist.get_world_size()
    strategy = ModelParallelStrategy(
        parallelize, data_parallel_size=world, tensor_parallel_size=1
    )  # the default puts every rank on the tensor-parallel dim
    fabric = Fabric(accelerator=accelerator, devices=world, strategy=strategy)
    fabric.launch()
    with fabric.init_module(empty_init=True):  # on meta
        model = model_class(config)
    model = fabric.setup(model)  # runs parallelize
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-3))
    return fabric, model, optimizer


def lightning_trainer(
    model_class: Any, config: Any, seed: int, accelerator: str, **trainer_args: Any
) -> Any:
    import lightning as L
    import torch
    import torch.distributed as dist
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.fsdp import fully_shard

    import shardinit

    class Module(L.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.model: Any = None

        def configure_model(self) -> None:
            if self.model is not None:
                return  # called again by validate/test after fit: keep the model
            with torch.device("meta"):
                model = model_class(config)
            mesh = self.device_mesh["data_parallel"]
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(model, mesh=mesh)
            # Nothing left on meta: Lightning's to_empty() + reset_parameters() is skipped.
            shardinit.materialize(model, seed=seed, init_fn=model.init_weights)
            self.model = model

        def training_step(self, batch: Any) -> Any:
            return self.model(input_ids=batch, labels=batch).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    world = dist.get_world_size()
    strategy = ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1)
    trainer = L.Trainer(accelerator=accelerator, devices=world, strategy=strategy, **trainer_args)
    return trainer, Module()


def lightning_fsdp1_strategy(device: Any, layer_class: Any) -> Any:
    import functools

    from lightning.fabric.strategies import FSDPStrategy

    import shardinit

    return FSDPStrategy(
        auto_wrap_policy={layer_class},
        # Allocates only; materialize fills the flat shards after setup_module.
        param_init_fn=functools.partial(shardinit.fsdp1_param_init_fn, device=device),
        use_orig_params=True,
    )


def lightning_fsdp1(
    strategy: Any, model_class: Any, config: Any, seed: int, accelerator: str
) -> Any:
    import torch
    import torch.distributed as dist
    from lightning.fabric import Fabric

    import shardinit

    fabric = Fabric(accelerator=accelerator, devices=dist.get_world_size(), strategy=strategy)
    fabric.launch()
    with fabric.init_module(empty_init=True):  # on meta
        model = model_class(config)
    # FSDP1's flat parameters hide the original ones: capture the init code first.
    captured = shardinit.capture_init(model, model.init_weights)
    paths = {module: path for path, module in model.named_modules()}

    def buffer_init(module: Any, name: str, tensor: Any) -> None:
        # Under FSDP1, buffers init_fn computed (rotary inv_freq) come from here.
        tensor.copy_(captured.buffer_values[f"{paths[module]}.{name}".lstrip(".")])

    model = fabric.setup_module(model)  # FSDP1 wrap; param_init_fn allocates
    shardinit.materialize(model, seed=seed, init_fn=captured, buffer_init=buffer_init)
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-3))
    return fabric, model, optimizer
