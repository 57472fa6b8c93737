"""``materialize`` on plain meta-device models: torch.nn defaults (bounds captured from
torch's own ``reset_parameters`` and compared exactly), rules, ties, canonical names,
buffers, the LLM preset and errors."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from scipy import stats
from torch import nn

import shardinit
from shardinit import init

SEED = 12345


@contextmanager
def torch_init_calls() -> Iterator[dict[int, tuple[str, tuple[float, ...]]]]:
    """Records the last in-place init op torch applies to each tensor (by id): the
    bounds and stds torch's reset_parameters really uses, as Python floats."""
    calls: dict[int, tuple[str, tuple[float, ...]]] = {}
    originals = {
        name: getattr(torch.Tensor, name) for name in ("uniform_", "normal_", "fill_", "zero_")
    }

    def recorder(name: str) -> Callable[..., Any]:
        original = originals[name]

        def record(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            values = tuple(
                float(a) for a in (*args, *kwargs.values()) if isinstance(a, (int, float))
            )
            calls[id(tensor)] = (name, values)
            return original(tensor, *args, **kwargs)

        return record

    for name in originals:
        setattr(torch.Tensor, name, recorder(name))
    try:
        yield calls
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


def as_shardinit(op: tuple[str, tuple[float, ...]]) -> init.Initializer:
    name, values = op
    if name == "uniform_":
        a, b = values
        return init.zeros() if a == b == 0 else init.uniform(a, b)
    if name == "normal_":
        return init.normal(*values) if values else init.normal()
    if name == "fill_":
        return init.constant(values[0])
    assert name == "zero_"
    return init.zeros()


MODULES: list[tuple[str, Callable[[], nn.Module]]] = [
    ("linear", lambda: nn.Linear(50, 37)),
    ("linear_in0", lambda: nn.Linear(0, 3)),
    ("bilinear", lambda: nn.Bilinear(6, 7, 5)),
    ("conv1d", lambda: nn.Conv1d(4, 6, 3)),
    ("conv2d_groups", lambda: nn.Conv2d(4, 6, (3, 2), groups=2)),
    ("conv3d", lambda: nn.Conv3d(2, 4, 2)),
    ("convT1d", lambda: nn.ConvTranspose1d(4, 6, 3)),
    ("convT2d_groups", lambda: nn.ConvTranspose2d(4, 6, 3, groups=2)),
    ("convT3d", lambda: nn.ConvTranspose3d(2, 3, 2)),
    ("embedding_pad", lambda: nn.Embedding(30, 8, padding_idx=2)),
    ("embedding_bag", lambda: nn.EmbeddingBag(30, 8, padding_idx=-1)),
    ("layernorm", lambda: nn.LayerNorm((4, 8))),
    ("rmsnorm", lambda: nn.RMSNorm(8)),
    ("groupnorm", lambda: nn.GroupNorm(2, 8)),
    ("batchnorm2d", lambda: nn.BatchNorm2d(8)),
    ("instancenorm1d", lambda: nn.InstanceNorm1d(8, affine=True, track_running_stats=True)),
    ("mha", lambda: nn.MultiheadAttention(8, 2, add_bias_kv=True)),
    ("mha_kvdim", lambda: nn.MultiheadAttention(8, 2, kdim=5, vdim=6)),
    ("lstm", lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True)),
    ("gru", lambda: nn.GRU(5, 7, num_layers=2)),
    ("rnn", lambda: nn.RNN(4, 3, nonlinearity="relu")),
    ("grucell", lambda: nn.GRUCell(4, 3)),
    ("prelu", lambda: nn.PReLU(3, init=0.3)),
]


@pytest.mark.parametrize("factory", [f for _, f in MODULES], ids=[n for n, _ in MODULES])
def test_defaults_match_torch_reset_parameters(factory: Callable[[], nn.Module]) -> None:
    with torch_init_calls() as calls, warnings.catch_warnings():
        # torch warns for Linear(0, n)'s empty weight; that warning is torch's, not ours.
        warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
        real = factory()
        with torch.device("meta"):
            meta = factory()
    shardinit.materialize(meta, seed=SEED)
    real_params = dict(real.named_parameters())
    for name, param in meta.named_parameters():
        assert not param.is_meta and param.requires_grad == real_params[name].requires_grad
        if param.numel() == 0:
            continue  # torch returns early for empty tensors
        torch_op = calls.get(id(real_params[name]))
        assert torch_op is not None, f"{name}: torch did not initialize it"
        spec = shardinit.ParamSpec(
            name, tuple(param.shape), param.dtype, as_shardinit(torch_op), seed=SEED
        )
        expected = shardinit.full(spec)
        padding_idx = getattr(meta, "padding_idx", None)
        if name == "weight" and padding_idx is not None:
            expected[padding_idx] = 0
            assert torch.all(real_params[name][padding_idx] == 0)
        assert torch.equal(param.detach(), expected), f"{name}: {torch_op}"
    for name, buffer in meta.named_buffers():
        real_buffer = dict(real.named_buffers())[name]
        assert buffer.dtype == real_buffer.dtype and torch.equal(buffer, real_buffer), name


@pytest.mark.parametrize(
    ("factory", "attr"),
    [
        (lambda: nn.Linear(256, 192), "weight"),
        (lambda: nn.Embedding(512, 64), "weight"),
        (lambda: nn.MultiheadAttention(64, 4), "in_proj_weight"),
        (lambda: nn.LSTM(32, 64), "weight_hh_l0"),
    ],
    ids=["linear_kaiming", "embedding_normal", "mha_xavier", "lstm_uniform"],
)
def test_default_distributions_match_torch(factory: Callable[[], nn.Module], attr: str) -> None:
    # Same distribution as torch's samples: two-sample Kolmogorov-Smirnov, fixed seeds
    # (deterministic); p < 1e-4 would mean a different distribution.
    torch.manual_seed(0)
    real = getattr(factory(), attr).detach().flatten().numpy()
    with torch.device("meta"):
        meta = factory()
    shardinit.materialize(meta, seed=SEED)
    ours = getattr(meta, attr).detach().flatten().numpy()
    assert stats.ks_2samp(ours, real).pvalue > 1e-4
    assert abs(ours.std() / real.std() - 1) < 0.05
    assert ours.min() >= real.min() - 4 * real.std() and ours.max() <= real.max() + 4 * real.std()


class Custom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.empty(4))
        self.proj = nn.Linear(4, 4)
        self.register_buffer("table", torch.empty(3))


def test_rules_first_match_wins_and_default_fallback() -> None:
    with torch.device("meta"):
        model = nn.Sequential(Custom(), Custom())
    rules = {
        "1.proj.weight": init.constant(3.0),
        (nn.Linear, "bias"): init.constant(2.0),
        "*.weight": init.constant(5.0),  # shadowed for 1.proj.weight by the first rule
        Custom: init.constant(7.0),
    }
    shardinit.materialize(model, seed=SEED, rules=rules, buffer_init=lambda m, n, t: t.fill_(9))
    assert torch.all(model[1].proj.weight == 3.0) and torch.all(model[0].proj.weight == 5.0)
    assert torch.all(model[0].proj.bias == 2.0) and torch.all(model[1].scale == 7.0)
    assert torch.all(model[0].table == 9.0)
    # A sequence of pairs works too; unmatched parameters get torch defaults.
    with torch.device("meta"):
        linear = nn.Linear(4, 3)
    shardinit.materialize(linear, seed=SEED, rules=[("bias", init.ones())])
    assert torch.all(linear.bias == 1.0)
    spec = shardinit.ParamSpec(
        "weight", (3, 4), init=init.kaiming_uniform(a=math.sqrt(5)), seed=SEED
    )
    assert torch.equal(linear.weight.detach(), shardinit.full(spec))


def test_missing_initializer_lists_names_and_shows_a_rule() -> None:
    with torch.device("meta"):
        model = nn.Sequential(Custom(), Custom())
    with pytest.raises(shardinit.ShardInitError) as error:
        shardinit.materialize(model, seed=SEED)
    message = str(error.value)
    assert "0.scale (Custom)" in message and "1.scale (Custom)" in message
    assert "rules=" in message and "proj" not in message
    assert model[0].scale.is_meta  # nothing was touched


def test_meta_buffer_without_default_needs_buffer_init() -> None:
    with torch.device("meta"):
        model = Custom()
    with pytest.raises(shardinit.ShardInitError, match=r"table.*buffer_init"):
        shardinit.materialize(model, seed=SEED, rules={"scale": init.ones()})
    assert model.scale.is_meta


def test_tied_parameter_named_by_first_name_and_stays_tied() -> None:
    with torch.device("meta"):
        model = nn.Module()
        model.embed = nn.Embedding(11, 6)
        model.head = nn.Linear(6, 11, bias=False)
        model.head.weight = model.embed.weight
    shardinit.materialize(model, seed=SEED)
    assert model.head.weight is model.embed.weight
    spec = shardinit.ParamSpec("embed.weight", (11, 6), init=init.normal(), seed=SEED)
    assert torch.equal(model.embed.weight.detach(), shardinit.full(spec))


def test_captured_record_matching_no_parameter_is_an_error() -> None:
    # Captured on a model whose names differ: silently dropping the record would give
    # 1.weight torch's default instead of the zeros init_fn wrote.
    with torch.device("meta"):
        template = nn.Sequential(nn.Linear(4, 3))
        model = nn.Sequential(nn.Identity(), nn.Linear(4, 3))
    captured = shardinit.capture_init(template, lambda: nn.init.zeros_(template[0].weight))
    with pytest.raises(
        shardinit.ShardInitError,
        match=r"1 record\(s\) that match no parameter of the model: 0\.weight\.",
    ):
        shardinit.materialize(model, seed=SEED, init_fn=captured)
    assert all(p.is_meta for p in model.parameters())  # nothing was touched
    # The same capture on a model with the same names is replayed.
    with torch.device("meta"):
        same = nn.Sequential(nn.Linear(4, 3))
    shardinit.materialize(same, seed=SEED, init_fn=captured)
    assert torch.equal(same[0].weight.detach(), torch.zeros(3, 4))


def _tied_net(tied: bool) -> nn.Module:
    with torch.device("meta"):
        model = nn.Module()
        model.embed = nn.Embedding(11, 6)
        model.head = nn.Linear(6, 11, bias=False)
    if tied:
        model.head.weight = model.embed.weight
    return model


def _zero_embed(model: nn.Module) -> shardinit.CapturedInit:
    return shardinit.capture_init(model, lambda: nn.init.zeros_(model.embed.weight))


@pytest.mark.parametrize(
    ("captured_tied", "how"),
    [(True, "tied in the capture, not in the model"), (False, "tied in the model, not in")],
)
def test_ties_that_differ_from_the_capture_are_refused(captured_tied: bool, how: str) -> None:
    # A model built without its library's post-init is untied where the meta copy init_fn
    # was captured on is tied: filling head.weight from its own stream would be silent.
    captured = _zero_embed(_tied_net(captured_tied))
    model = _tied_net(not captured_tied)
    with pytest.raises(
        shardinit.ShardInitError,
        match=rf"1 parameter\(s\) are tied differently .*: embed\.weight = head\.weight \({how}.*"
        r"model\.tie_weights\(\)",
    ):
        shardinit.materialize(model, seed=SEED, init_fn=captured)
    assert all(p.is_meta for p in model.parameters())  # nothing was touched
    # Tied the same way: filled, still tied, with the captured zeros.
    same = _tied_net(captured_tied)
    shardinit.materialize(same, seed=SEED, init_fn=captured)
    assert (same.head.weight is same.embed.weight) == captured_tied
    assert torch.equal(same.embed.weight.detach(), torch.zeros(11, 6))


def test_canonical_names_drop_wrapper_segments() -> None:
    assert shardinit.canonical_name("_orig_mod.a._checkpoint_wrapped_module.b.w") == "a.b.w"
    with torch.device("meta"):
        wrapped = nn.Module()
        wrapped._orig_mod = nn.Module()
        wrapped._orig_mod._checkpoint_wrapped_module = nn.Sequential(nn.Linear(3, 2))
    shardinit.materialize(wrapped, seed=SEED, rules={"0.weight": init.normal()})
    spec = shardinit.ParamSpec("0.weight", (2, 3), init=init.normal(), seed=SEED)
    got = wrapped._orig_mod._checkpoint_wrapped_module[0].weight
    assert torch.equal(got.detach(), shardinit.full(spec))


def test_refuses_materialized_parameters_unless_overwrite() -> None:
    model = nn.Linear(4, 3)
    before = model.weight.detach().clone()
    with pytest.raises(shardinit.ShardInitError, match=r"already materialized: weight, bias"):
        shardinit.materialize(model, seed=SEED)
    assert torch.equal(model.weight.detach(), before)
    weight = model.weight
    shardinit.materialize(model, seed=SEED, overwrite=True)
    assert model.weight is weight  # filled in place
    spec = shardinit.ParamSpec(
        "weight", (4 - 1, 4), init=init.kaiming_uniform(a=math.sqrt(5)), seed=SEED
    )
    assert torch.equal(model.weight.detach(), shardinit.full(spec))


@pytest.mark.parametrize("tied", [False, True], ids=["plain", "tied"])
def test_overwrite_of_parameters_a_graph_saved_makes_backward_refuse(tied: bool) -> None:
    """overwrite=True writes the parameters in place: their version counters move, as
    after torch's own in-place init, so a graph built before refuses to backward (it
    used to run on the new values), with or without init_fn (captured programs)."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    if tied:
        model[1].weight = model[0].weight
    x = torch.ones(2, 4, requires_grad=True)
    loss = (model(x) ** 2).sum()  # saves the weights
    versions = [p._version for p in model.parameters()]
    weight = model[0].weight
    shardinit.materialize(
        model, seed=SEED, overwrite=True, init_fn=lambda: nn.init.ones_(model[1].bias)
    )
    assert model[0].weight is weight
    assert all(p._version > v for p, v in zip(model.parameters(), versions, strict=True))
    assert torch.equal(model[1].bias.detach(), torch.ones(4))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_uninitialized_lazy_parameters_are_refused_until_a_forward() -> None:
    """nn.LazyLinear on meta has no shape yet: refused naming its parameters and the way
    out (it was torch's "Can't access the shape" from deep inside); after one forward with
    a meta input the module is an nn.Linear(8, 4) and gets that default."""
    with torch.device("meta"):
        model = nn.Sequential(nn.LazyLinear(4), nn.Linear(4, 2))
    with pytest.raises(
        shardinit.ShardInitError,
        match=r"^materialize: 2 parameter\(s\) are uninitialized lazy parameters .*: "
        r"0\.weight, 0\.bias\. Run one forward pass first",
    ):
        shardinit.materialize(model, seed=SEED, init_fn=lambda: None)
    assert model[1].weight.is_meta  # refused before anything was allocated
    with pytest.raises(shardinit.ShardInitError, match=r"^capture_init: 2 parameter\(s\) are"):
        shardinit.capture_init(model, lambda: None)
    model(torch.empty(2, 8, device="meta"))
    shardinit.materialize(model, seed=SEED)
    spec = shardinit.ParamSpec(
        "0.weight", (4, 8), init=init.kaiming_uniform(a=math.sqrt(5)), seed=SEED
    )
    assert torch.equal(model[0].weight.detach(), shardinit.full(spec))


class _WithEmpty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.empty = nn.Parameter(torch.empty(0, 4))
        self.weight = nn.Parameter(torch.empty(2, 4))

    def init_weights(self) -> None:
        nn.init.normal_(self.empty)  # nothing to fill: records nothing
        nn.init.ones_(self.weight)


@pytest.mark.parametrize("with_init_fn", [True, False], ids=["init_fn", "rules"])
def test_a_zero_size_parameter_needs_no_initializer(with_init_fn: bool) -> None:
    """Nothing to fill: accepted with or without init_fn touching it (it was refused as
    having no rule and no default), allocated with its shape on the CPU."""
    with torch.device("meta"):
        model = _WithEmpty()
    if with_init_fn:
        shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    else:
        shardinit.materialize(model, seed=SEED, rules={"weight": init.ones()})
    assert isinstance(model.empty, nn.Parameter) and model.empty.device.type == "cpu"
    assert tuple(model.empty.shape) == (0, 4) and model.empty.requires_grad
    assert torch.equal(model.weight.detach(), torch.ones(2, 4))


def test_bad_arguments() -> None:
    with torch.device("meta"):
        model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="module"):
        shardinit.materialize("model", seed=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed"):
        shardinit.materialize(model, seed="1")  # type: ignore[arg-type]
    with pytest.raises(shardinit.ShardInitError, match="seed"):
        shardinit.materialize(model, seed=-1)
    with pytest.raises(TypeError, match="rules key"):
        shardinit.materialize(model, seed=0, rules={3: init.ones()})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"rules\['weight'\]"):
        shardinit.materialize(model, seed=0, rules={"weight": 1.0})  # type: ignore[dict-item]
    with pytest.raises(shardinit.ShardInitError, match="device"):
        shardinit.materialize(model, seed=0, device="mps:0")
    with torch.device("meta"):
        ints = nn.Module()
        ints.w = nn.Parameter(torch.empty(3, dtype=torch.float64).to(torch.complex64))
    with pytest.raises(shardinit.ShardInitError, match=r"parameter w: dtype"):
        shardinit.materialize(ints, seed=0, rules={"w": init.ones()})
    assert model.weight.is_meta


def test_llm_preset() -> None:
    rules = shardinit.presets.llm(std=0.02, depth_scaled_output=4)
    with torch.device("meta"):
        model = nn.Module()
        model.tok = nn.Embedding(10, 8)
        model.attn_norm = nn.RMSNorm(8)
        model.wo = nn.Linear(8, 8)
        model.block = nn.Module()
        model.block.wo = nn.Linear(8, 8)
    shardinit.materialize(model, seed=SEED, rules=rules)

    def full(name: str, shape: tuple[int, ...], initializer: init.Initializer) -> torch.Tensor:
        return shardinit.full(shardinit.ParamSpec(name, shape, init=initializer, seed=SEED))

    assert torch.equal(model.tok.weight.detach(), full("tok.weight", (10, 8), init.normal(0, 0.02)))
    assert torch.equal(
        model.block.wo.weight.detach(),
        full("block.wo.weight", (8, 8), init.normal(0, 0.02 / math.sqrt(8))),
    )
    # "*.wo.weight" needs a parent: a root-level "wo.weight" keeps the plain std.
    assert torch.equal(model.wo.weight.detach(), full("wo.weight", (8, 8), init.normal(0, 0.02)))
    assert torch.all(model.wo.bias == 0) and torch.all(model.attn_norm.weight == 1)
    with pytest.raises(shardinit.ShardInitError, match="std"):
        shardinit.presets.llm(std=0.0)
    with pytest.raises(shardinit.ShardInitError, match="depth_scaled_output"):
        shardinit.presets.llm(depth_scaled_output=0)


@pytest.mark.cuda
@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device (materialize to CUDA vs CPU; the CPU path runs everywhere)",
)
def test_cuda_matches_cpu() -> None:
    with torch.device("meta"):
        model = nn.Sequential(
            nn.Embedding(33, 16, padding_idx=1), nn.Linear(16, 7), nn.BatchNorm1d(7)
        )
    shardinit.materialize(model, seed=SEED, device="cuda")
    with torch.device("meta"):
        reference = nn.Sequential(
            nn.Embedding(33, 16, padding_idx=1), nn.Linear(16, 7), nn.BatchNorm1d(7)
        )
    shardinit.materialize(reference, seed=SEED)
    for (name, got), (_, want) in zip(
        model.state_dict().items(), reference.state_dict().items(), strict=True
    ):
        assert got.device.type == "cuda", name
        assert torch.equal(got.cpu(), want), name


class _SetattrCounting(nn.Linear):
    """A module whose own ``__setattr__`` must see every parameter assigned to it."""

    assigned: list[str]

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, nn.Parameter):
            vars(self).setdefault("assigned", []).append(name)
        super().__setattr__(name, value)


def test_allocation_runs_registration_hooks_and_custom_setattr() -> None:
    # Allocation writes the parameter registry directly only where __setattr__ would
    # run nothing else: a global registration hook and a class's own __setattr__ still
    # see each new parameter.
    seen: list[str] = []

    def hook(module: nn.Module, name: str, param: nn.Parameter) -> None:
        seen.append(name)

    with torch.device("meta"):
        plain, custom = nn.Linear(3, 2), _SetattrCounting(3, 2)
    vars(custom)["assigned"] = []
    handle = nn.modules.module.register_module_parameter_registration_hook(hook)
    try:
        shardinit.materialize(plain, seed=SEED)
    finally:
        handle.remove()
    shardinit.materialize(custom, seed=SEED)
    assert sorted(seen) == ["bias", "weight"]
    assert sorted(custom.assigned) == ["bias", "weight"]
    assert not plain.weight.is_meta and not custom.weight.is_meta
