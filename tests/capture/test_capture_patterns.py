"""capture_init on the patterns real client libraries use (issue 14): random fills reached
through wrappers and aliases, buffers that init code computes once, nn.init on tensors
that are not parameters, temporaries composed and copied into parameters (torchtitan's
fused wqkv), and tied parameters declared the way transformers declares them."""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch import nn

import shardinit
from shardinit import init

SEED = 5
HERE = os.path.basename(__file__)

# Bound at import time, before any capture: code holding these never looks the name up in
# torch.nn.init again.
ALIAS_DIRAC = torch.nn.init.dirac_
ALIAS_TRUNC_NORMAL = torch.nn.init.trunc_normal_
ORIGINAL_NORMAL = torch.nn.init.normal_


def _full(name: str, shape: tuple[int, ...], initializer: init.Initializer) -> torch.Tensor:
    spec = shardinit.ParamSpec(name, shape, torch.float32, initializer, seed=SEED)
    return shardinit.full(spec)


def _guarded_normal(
    tensor: torch.Tensor, mean: float = 0.0, std: float = 1.0, generator: object = None
) -> torch.Tensor:
    # transformers/initialization.py's shape: a guard, then the original bound earlier.
    if getattr(tensor, "_done", False):
        return tensor
    return ORIGINAL_NORMAL(tensor, mean=mean, std=std, generator=generator)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- defect 1


def test_random_fill_through_a_wrapper_installed_in_torch_nn_init() -> None:
    with torch.device("meta"):
        lin = nn.Linear(4, 4)

    def init_fn() -> None:
        saved, nn.init.normal_ = nn.init.normal_, _guarded_normal
        try:
            nn.init.normal_(lin.weight, std=0.02)
        finally:
            nn.init.normal_ = saved

    shardinit.materialize(lin, seed=SEED, init_fn=init_fn)
    assert torch.equal(lin.weight.detach(), _full("weight", (4, 4), init.normal(0.0, 0.02)))


def test_fills_through_aliases_bound_at_import_time() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv1d(2, 2, 3, bias=False), nn.Linear(4, 4, bias=False))

    def init_fn() -> None:
        ALIAS_DIRAC(model[0].weight)  # returns at once on meta: nothing reaches a tensor op
        ALIAS_TRUNC_NORMAL(model[1].weight, std=0.5, a=-1.0, b=1.0)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    want = torch.zeros(2, 2, 3)
    want[0, 0, 1] = want[1, 1, 1] = 1.0
    assert torch.equal(model[0].weight.detach(), want)
    trunc = _full("1.weight", (4, 4), init.trunc_normal(0.0, 0.5, -1.0, 1.0))
    assert torch.equal(model[1].weight.detach(), trunc)


# --------------------------------------------------------------------------- defect 2


class _OnceInit(nn.Module):
    """Init code that marks itself done, as transformers marks initialized modules."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("f", torch.empty(4))
        self.done = False

    def init_weights(self) -> None:
        if self.done:
            return
        nn.init.normal_(self.lin.weight, std=0.02)
        nn.init.zeros_(self.lin.bias)
        self.f.copy_(torch.arange(4.0))
        self.done = True


def test_buffer_computed_once_by_init_code_ends_up_computed() -> None:
    with torch.device("meta"):
        model = _OnceInit()
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    assert torch.equal(model.f, torch.arange(4.0))
    assert torch.equal(model.lin.bias.detach(), torch.zeros(4))


def test_buffer_init_code_leaves_on_meta_is_named_in_an_error() -> None:
    with torch.device("meta"):
        model = _OnceInit()

    def init_fn() -> None:
        nn.init.normal_(model.lin.weight, std=0.02)
        with torch.device("meta"):
            model.f = torch.arange(4.0)

    with pytest.raises(shardinit.ShardInitError, match=r"\bf\b.*meta"):
        shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert all(p.is_meta for p in model.parameters())


# --------------------------------------------------------------------------- defect 3


def test_trunc_normal_on_a_tensor_that_is_not_a_parameter() -> None:
    with torch.device("meta"):
        lin = nn.Linear(3, 3)
    scratch: list[torch.Tensor] = []

    def init_fn() -> None:
        scratch.append(nn.init.trunc_normal_(torch.empty(3), std=0.02))

    captured = shardinit.capture_init(lin, init_fn)
    assert dict(captured.params) == {}
    values = scratch[0]
    assert not values.is_meta and bool((values.abs() <= 2.0).all())  # sampled for real


# --------------------------------------------------------------------------- defect 4


def _fused_qkv_init(weight: torch.Tensor, heads: int, kv_heads: int, head_dim: int) -> None:
    """torchtitan 0.3.0's _fused_qkv_param_init, with a different std per part."""
    tail = weight.shape[1:]
    q = weight.new_empty(heads * head_dim, *tail)
    k = weight.new_empty(kv_heads * head_dim, *tail)
    v = weight.new_empty(kv_heads * head_dim, *tail)
    nn.init.trunc_normal_(q, std=0.02)
    nn.init.trunc_normal_(k, std=0.5)
    nn.init.trunc_normal_(v, std=2.0)
    per_kv = heads // kv_heads
    fused = torch.cat(
        [
            q.view(kv_heads, per_kv, head_dim, *tail),
            k.view(kv_heads, 1, head_dim, *tail),
            v.view(kv_heads, 1, head_dim, *tail),
        ],
        dim=1,
    ).view(-1, *tail)
    with torch.no_grad():
        weight.copy_(fused)


def test_fused_qkv_from_temporaries_takes_each_rows_initializer() -> None:
    heads, kv_heads, head_dim, dim = 4, 2, 2, 4
    rows = (heads + 2 * kv_heads) * head_dim
    with torch.device("meta"):
        lin = nn.Linear(dim, rows, bias=False)
    shardinit.materialize(
        lin, seed=SEED, init_fn=lambda: _fused_qkv_init(lin.weight, heads, kv_heads, head_dim)
    )
    got = lin.weight.detach()
    per_group = rows // kv_heads
    for std, start, stop in ((0.02, 0, 4), (0.5, 4, 6), (2.0, 6, 8)):
        # Values from the parameter's own stream at its own rows, with q's, k's or v's init.
        full = _full("weight", (rows, dim), init.trunc_normal(0.0, std, -2.0, 2.0))
        for group in range(kv_heads):
            block = slice(group * per_group + start, group * per_group + stop)
            assert torch.equal(got[block], full[block]), (std, group)


def test_copy_of_temporary_rows_never_written_is_refused() -> None:
    with torch.device("meta"):
        lin = nn.Linear(4, 4, bias=False)

    def init_fn() -> None:
        tmp = lin.weight.new_empty(4, 4)
        nn.init.normal_(tmp[:2], std=0.02)
        lin.weight.copy_(tmp)

    with pytest.raises(shardinit.UnsupportedInitOpError, match="never written") as info:
        shardinit.capture_init(lin, init_fn)
    assert "'weight'" in str(info.value) and f"{HERE}:" in str(info.value)


def test_copy_of_computed_values_is_refused_by_name() -> None:
    with torch.device("meta"):
        lin = nn.Linear(4, 4, bias=False)

    def init_fn() -> None:
        tmp = lin.weight.new_empty(4, 4)
        nn.init.normal_(tmp, std=0.02)
        lin.weight.copy_(tmp.cumsum(0))  # not elementwise over the destination

    with pytest.raises(shardinit.UnsupportedInitOpError, match=r"copy_.*cumsum"):
        shardinit.capture_init(lin, init_fn)


def test_zero_and_scaled_temporaries_and_chunks() -> None:
    with torch.device("meta"):
        lin = nn.Linear(3, 6)

    def init_fn() -> None:
        tmp = torch.zeros(6, 3)
        _, bottom = tmp.chunk(2)
        nn.init.uniform_(bottom, -0.5, 0.5)
        bottom.mul_(2.0)
        lin.weight.copy_(tmp)
        lin.bias.copy_(torch.stack([torch.ones(()) for _ in range(6)]))

    shardinit.materialize(lin, seed=SEED, init_fn=init_fn)
    want = _full("weight", (6, 3), init.uniform(-0.5, 0.5)) * 2.0
    want[:3] = 0.0
    assert torch.equal(lin.weight.detach(), want)
    assert torch.equal(lin.bias.detach(), torch.ones(6))


# --------------------------------------------------------------------------- defect 5


class _DeclaredTies(nn.Module):
    """A model that declares its ties as transformers does: built untied, initialized
    module by module, then tied (``all_tied_weights_keys``: target -> source)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(6, 4, padding_idx=1)
        self.head = nn.Linear(4, 6, bias=False)
        self.all_tied_weights_keys = {"head.weight": "emb.weight"}
        self.tie_weights()

    def tie_weights(self) -> None:
        self.head.weight = self.emb.weight

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.weight[1])
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.5)

    def init_weights(self) -> None:
        self.apply(self._init_weights)
        self.tie_weights()


def _tied_reference() -> torch.Tensor:
    want = _full("emb.weight", (6, 4), init.normal(0.0, 0.02))
    want[1] = 0.0
    return want


@pytest.mark.parametrize("flow", ["init_weights", "apply"])
def test_declared_tie_takes_the_source_holders_init(flow: str) -> None:
    with torch.device("meta"):
        model = _DeclaredTies()
    init_fn = (
        model.init_weights if flow == "init_weights" else (lambda: model.apply(model._init_weights))
    )
    with pytest.warns(UserWarning, match=r"head\.weight.*normal_.*" + HERE):
        shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    assert model.head.weight is model.emb.weight
    assert torch.equal(model.emb.weight.detach(), _tied_reference())
    # The library's own CPU init: untied, initialized, then tied.
    torch.manual_seed(0)
    eager = _DeclaredTies.__new__(_DeclaredTies)
    nn.Module.__init__(eager)
    eager.emb, eager.head = nn.Embedding(6, 4, padding_idx=1), nn.Linear(4, 6, bias=False)
    eager.apply(eager._init_weights)
    eager.tie_weights()
    assert not eager.emb.weight[1].any() and math.isclose(
        float(eager.emb.weight.detach().std()), 0.02, rel_tol=0.6
    )


# --------------------------------------------------------------------------- region arithmetic


def _copy_map(src: torch.Tensor, dst: torch.Tensor, dst_base: torch.Tensor) -> dict[int, int]:
    """Brute force: the source base position each destination base position receives."""
    dst.copy_(src)
    return {d: int(v) for d, v in enumerate(dst_base.flatten().tolist()) if v >= 0}


@pytest.mark.parametrize(
    ("make_src", "make_dst"),
    [
        (lambda s: s[1:3], lambda d: d.view(2, 12)[:, 3:9]),  # rows -> box
        (lambda s: s.view(4, 2, 3)[:, 1], lambda d: d.view(4, 6)[:, 3:]),  # box -> box
        (lambda s: s.view(-1)[2:14].view(3, 4), lambda d: d.view(4, 6)[:3, 1:5]),
        (lambda s: s[1:3, 1:5], lambda d: d.view(2, 12)[:, 4:8]),
        (lambda s: s.view(-1)[::2], lambda d: d.view(2, 12)[1]),  # strided -> row
    ],
)
def test_map_runs_follows_copies_element_by_element(make_src: object, make_dst: object) -> None:
    from shardinit._program.regions import map_runs, view_runs

    src_base = torch.arange(24.0).view(4, 6)
    dst_base = torch.full((24,), -1.0)
    src, dst = make_src(src_base), make_dst(dst_base)  # type: ignore[operator]
    want = _copy_map(src, dst, dst_base)
    src_runs, dst_runs = view_runs(src, src_base), view_runs(dst, dst_base)
    got: dict[int, int] = {}
    for start, stop in src_runs:
        for position in range(start, stop):
            (mapped,) = list(map_runs(src_runs, (position, position + 1), dst_runs))
            got[mapped[0]] = position
    assert got == want


def test_view_runs_refuses_transposed_copies() -> None:
    from shardinit._program.cannot import Cannot
    from shardinit._program.regions import view_runs

    base = torch.zeros(4, 6)
    with pytest.raises(Cannot, match="order"):
        view_runs(base.t(), base)
