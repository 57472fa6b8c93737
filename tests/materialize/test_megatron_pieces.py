"""The pieces of shardinit.megatron that need no Megatron module type (the walk's
canonical names, a tagged partition's region, the presets by the owner's kind, and
materialize on a plain model), with megatron-core's types looked up as none: the real
models are tests/zoo/test_megatron.py's, minutes each."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init
from shardinit._integration import megatron
from shardinit._integration.megatron import MegatronTarget, _preset, _region, _walk
from shardinit._integration.placements import full_runs
from shardinit._names import ParamSlot

CONFIG = SimpleNamespace(
    init_method=functools.partial(nn.init.normal_, std=0.02),
    output_layer_init_method=functools.partial(nn.init.normal_, std=0.01),
    embedding_init_method=functools.partial(nn.init.normal_, std=0.02),
)


@pytest.fixture(autouse=True)
def _no_megatron_types(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(megatron, "_wrapper_types", lambda: ())
    monkeypatch.setattr(megatron, "_tp_module_types", lambda: ())


class _Layer(nn.Module):
    def __init__(self, layer_number: int) -> None:
        super().__init__()
        self.layer_number = layer_number  # 1-based, global, as Megatron numbers layers
        self.proj = nn.Linear(1, 1)


class _MoE(nn.Module):
    def __init__(self, indices: list[int]) -> None:
        super().__init__()
        self.local_expert_indices = indices
        self.local_experts = nn.ModuleList([nn.Linear(1, 1) for _ in indices])


def test_the_walk_names_layers_by_layer_number_and_experts_by_global_index() -> None:
    root = nn.Module()
    root.layers = nn.ModuleList([_Layer(3), _Layer(4)])
    root.plain = nn.ModuleList([nn.Linear(1, 1)])
    root.moe = _MoE([4, 5])
    assert [path for path, _ in _walk(root, "", ())] == [
        "",
        "layers", "layers.2", "layers.2.proj", "layers.3", "layers.3.proj",
        "plain", "plain.0",
        "moe", "moe.local_experts", "moe.local_experts.4", "moe.local_experts.5",
    ]  # fmt: skip


class _Group:
    def __init__(self, rank: int, size: int) -> None:
        self._rank, self._size = rank, size

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


def test_a_tagged_partition_is_its_ranks_rows_of_the_global_shape() -> None:
    owner = nn.Linear(4, 2)  # weight (2, 4): rank 1's half of a (4, 4) weight split on dim 0
    owner.tp_group = _Group(rank=1, size=2)  # type: ignore[assignment]
    weight = owner.weight
    weight.tensor_model_parallel = True  # type: ignore[attr-defined]
    weight.partition_dim = 0  # type: ignore[attr-defined]
    weight.partition_stride = 1  # type: ignore[attr-defined]
    shape, runs = _region(ParamSlot("w", weight, [(owner, "weight")]))
    assert shape == (4, 4)
    assert [[tuple(run) for run in dim] for dim in runs] == [[(2, 4)], [(0, 4)]]


def _target(owner: nn.Module, attr: str) -> MegatronTarget:
    param = getattr(owner, attr)
    shape = tuple(param.shape)
    slot = ParamSlot(f"decoder.{attr}", param, [(owner, attr)])
    return MegatronTarget(slot, "decoder", shape, full_runs(shape))


class FusedNorm(nn.Module):  # a norm of another library: known by its name
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(3))
        self.bias = nn.Parameter(torch.empty(3))


class TopKRouter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(2, 3))


def test_a_norm_by_its_name_is_ones_and_zeros_and_a_router_takes_init_method() -> None:
    norm = FusedNorm()
    weight, bias = _preset(_target(norm, "weight"), CONFIG), _preset(_target(norm, "bias"), CONFIG)
    assert weight is not None and weight.initializer == init.ones()
    assert bias is not None and bias.initializer == init.zeros()
    router = _preset(_target(TopKRouter(), "weight"), CONFIG)
    assert router is not None and router.method is CONFIG.init_method


def test_materialize_of_one_chunk_keys_streams_by_its_own_names() -> None:
    model = nn.Linear(4, 2)
    rules: dict[str, init.Initializer] = {"weight": init.normal(0.0, 1.0), "bias": init.zeros()}
    config = SimpleNamespace(**vars(CONFIG))  # no fp8_param: not fp8
    assert megatron.materialize(model, seed=5, config=config, rules=rules) is model
    spec = shardinit.ParamSpec("weight", (2, 4), torch.float32, init.normal(0.0, 1.0), seed=5)
    assert torch.equal(model.weight.detach(), shardinit.full(spec))
    assert torch.equal(model.bias.detach(), torch.zeros(2))
    # The model is the plan's root, not a list of one chunk: its buffers keep their names.
    with_table = nn.Linear(4, 2)
    with_table.register_buffer("table", torch.empty(3, device="meta"))
    with pytest.raises(shardinit.ShardInitError, match=r"have no known default: table\. "):
        megatron.materialize(with_table, seed=5, config=config, rules=rules)


def test_deferred_init_tags_a_weight_with_stride_one_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tagged: dict[str, tuple[object, ...]] = {}

    def _initialize_affine_weight_gpu(  # megatron-core's signature; never run inside
        weight: torch.Tensor, init_method: object, partition_dim: int, stride: int = 1
    ) -> None:
        raise AssertionError("the stand-in runs inside deferred_init")

    def set_tensor_model_parallel_attributes(
        tensor: torch.Tensor, is_parallel: bool, dim: int, stride: int
    ) -> None:
        tagged[str(tensor.shape[0])] = (is_parallel, dim, stride)

    layers = SimpleNamespace(
        _initialize_affine_weight_cpu=_initialize_affine_weight_gpu,
        _initialize_affine_weight_gpu=_initialize_affine_weight_gpu,
        set_tensor_model_parallel_attributes=set_tensor_model_parallel_attributes,
    )
    monkeypatch.setattr(megatron, "_layers", lambda: layers)
    # deferred_init imports the experts module by name: a holder of none of the two.
    monkeypatch.setattr("importlib.import_module", lambda name: SimpleNamespace())
    with megatron.deferred_init():
        layers._initialize_affine_weight_gpu(torch.empty(2), CONFIG.init_method, 0)
        layers._initialize_affine_weight_gpu(torch.empty(3), CONFIG.init_method, 1, stride=3)
    assert tagged == {"2": (True, 0, 1), "3": (True, 1, 3)}
    assert layers._initialize_affine_weight_gpu is _initialize_affine_weight_gpu
