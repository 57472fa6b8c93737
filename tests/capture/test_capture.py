"""capture_init + replay on plain meta models (world 1): exact values against
``shardinit.full`` of the expected initializer, distributions against the same init code
run eagerly with torch, regions, layout invariance and the errors for unsupported ops."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable

import pytest
import torch
from capture_models import HFModel, RotaryStack, TorchDefaults, eager, llama, llama_expected
from torch import nn

import shardinit
from shardinit import init
from shardinit._program import Computed, Fill, Scale, base_ops
from shardinit._program.cannot import Cannot
from shardinit._program.regions import flat_range_boxes, view_region
from shardinit.errors import UnsupportedInitOpError
from shardinit.shard import writer

SEED = 77
HERE = os.path.basename(__file__)


def _full(name: str, shape: tuple[int, ...], initializer: init.Initializer) -> torch.Tensor:
    return shardinit.full(shardinit.ParamSpec(name, shape, torch.float32, initializer, seed=SEED))


def _replayed(model: nn.Module, init_fn: object) -> dict[str, torch.Tensor]:
    captured = shardinit.capture_init(model, init_fn)  # type: ignore[arg-type]
    return {name: writer().full(record, SEED) for name, record in captured.params.items()}


def _like_eager(name: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Same exact zeros and ones; the random elements' std within 25% (4 sigma of the
    sample std's error for the >= 200 elements compared)."""
    assert ours.shape == theirs.shape, name
    assert torch.equal(ours == 0, theirs == 0), f"{name}: zero pattern differs"
    assert torch.equal(ours == 1, theirs == 1), f"{name}: ones pattern differs"
    mask = (ours != 0) & (ours != 1)
    if int(mask.sum()) >= 200:
        ratio = float(ours[mask].std() / theirs[mask].std())
        assert abs(ratio - 1) < 0.25, f"{name}: std ratio {ratio}"


# --------------------------------------------------------------------------- real-world code


def test_torchtitan_init_weights_values_and_distribution() -> None:
    with torch.device("meta"):
        model = llama()
    replayed = _replayed(model, model.init_weights)
    expected = llama_expected(model)
    assert sorted(replayed) == sorted(expected)
    theirs = dict(eager(llama, lambda m: m.init_weights(), SEED).named_parameters())
    for name, (kind, std, cut) in expected.items():
        ours = replayed[name]
        shape = tuple(ours.shape)
        if kind == "const":
            assert torch.equal(ours, torch.full(shape, std)), name
        elif kind == "normal":
            assert torch.equal(ours, _full(name, shape, init.normal(0.0, std))), name
        else:
            assert kind == "trunc", kind
            want = _full(name, shape, init.trunc_normal(0.0, std, -cut, cut))
            assert torch.equal(ours, want), name
            assert float(ours.abs().max()) <= cut, name  # bounds exactly
        _like_eager(name, ours, theirs[name].detach())
    # The model itself is untouched: still meta, same Parameter objects.
    assert all(p.is_meta for p in model.parameters())


def test_fused_qkv_row_blocks_values_and_distribution() -> None:
    with torch.device("meta"):
        model = RotaryStack()
    replayed = _replayed(model, model.init_weights)
    assert sorted(replayed) == ["layers.0.wqkv.weight", "layers.1.wqkv.weight"]
    theirs = dict(eager(RotaryStack, lambda m: m.init_weights(), SEED).named_parameters())
    dim = model.dim
    for name, ours in replayed.items():
        # q rows [:dim] with std 0.02, the k/v rows with std 0.04, each cut at +-2.
        q = _full(name, tuple(ours.shape), init.trunc_normal(0.0, 0.02, -2.0, 2.0))
        kv = _full(name, tuple(ours.shape), init.trunc_normal(0.0, 0.04, -2.0, 2.0))
        assert torch.equal(ours[:dim], q[:dim]) and torch.equal(ours[dim:], kv[dim:]), name
        eager_weight = theirs[name].detach()
        _like_eager(name + "[q]", ours[:dim], eager_weight[:dim])
        _like_eager(name + "[kv]", ours[dim:], eager_weight[dim:])
    assert all(p.is_meta for p in model.parameters()) and model.freqs_cis.is_meta


def test_hugging_face_init_weights_values_and_distribution() -> None:
    with torch.device("meta"):
        model = HFModel()
    replayed = _replayed(model, model.init)
    theirs = dict(eager(HFModel, lambda m: m.init(), SEED).named_parameters())
    assert "lm_head.weight" not in replayed  # tied: named by its first name, wte.weight
    assert sorted(replayed) == sorted(name for name, _ in model.named_parameters())
    for name, ours in replayed.items():
        shape = tuple(ours.shape)
        if name == "wte.weight":
            # lm_head's Linear init (tied, visited later) overwrites the padding row.
            want = _full(name, shape, init.normal(0.0, 0.02))
        elif name == "wpe.weight":
            want = _full(name, shape, init.normal(0.0, 0.02))
            want[0] = 0  # padding row
        elif name.endswith("c_proj.weight") and not name.endswith("mlp_c_proj.weight"):
            want = _full(name, shape, init.normal(0.0, 0.02 / math.sqrt(2 * 2)))
        elif name.startswith("h.") and name.endswith(".weight") and ".ln_" not in name:
            want = _full(name, shape, init.normal(0.0, 0.02))
        elif ".ln_" in name or name.startswith("ln_f"):
            want = torch.full(shape, 1.0 if name.endswith("weight") else 0.0)
        else:
            assert name.endswith("bias"), name
            want = torch.zeros(shape)
        assert torch.equal(ours, want), name
        _like_eager(name, ours, theirs[name].detach())
    assert not replayed["wpe.weight"][0].any() and replayed["wte.weight"][3].all()


def test_torch_reset_parameters_equals_materialize_defaults() -> None:
    with torch.device("meta"):
        model = TorchDefaults()
    replayed = _replayed(model, model.reset)
    with torch.device("meta"):
        reference = TorchDefaults()
    shardinit.materialize(reference, seed=SEED)
    theirs = dict(eager(TorchDefaults, lambda m: m.reset(), SEED).named_parameters())
    for name, param in reference.named_parameters():
        # torch's bounds (recorded from its own code) == shardinit's defaults, bit for bit.
        assert torch.equal(replayed[name], param.detach()), name
        _like_eager(name, replayed[name], theirs[name].detach())


def test_fan_based_bounds_are_torchs() -> None:
    with torch.device("meta"):
        w = nn.Parameter(torch.empty(6, 4, 3))
        holder = nn.Module()
        holder.w = w

    def init_fn() -> None:
        nn.init.kaiming_uniform_(holder.w, a=math.sqrt(5))
        nn.init.xavier_normal_(holder.w[1:5], gain=2.0)  # fans of the view, as torch
        nn.init.kaiming_normal_(holder.w[:, 0], mode="fan_out", nonlinearity="relu")

    ops = shardinit.capture_init(holder, init_fn)["w"].ops
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 5)) / math.sqrt(4 * 3)
    assert ops[0].action == Fill(init.Uniform(-bound, bound))
    assert ops[1].action == Fill(init.Normal(0.0, 2.0 * math.sqrt(2.0 / (4 * 3 + 4 * 3))))
    assert ops[1].region == ((1, 5), (0, 4), (0, 3))
    assert ops[2].action == Fill(init.Normal(0.0, math.sqrt(2.0) / math.sqrt(6)))
    assert ops[2].region == ((0, 6), (0, 1), (0, 3))


def test_orthogonal_on_whole_parameters_is_recorded_and_replayed() -> None:
    """``orthogonal_`` on a whole parameter (itself, ``.data``, a 3-D conv weight) is
    ``Fill(Orthogonal(gain))`` over the whole parameter; a later scale applies on top;
    replaying any box equals the slice of the full replay; the same call on a part or a
    temporary is refused (its matrix would be the view's)."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(7, 5), nn.Conv1d(3, 4, 2), nn.Embedding(9, 4))

    def init_fn() -> None:
        nn.init.orthogonal_(model[0].weight, gain=2.0)
        nn.init.orthogonal_(model[1].weight.data)
        nn.init.orthogonal_(model[2].weight, 0.5)
        model[2].weight.data.mul_(3.0)

    captured = shardinit.capture_init(model, init_fn)
    assert captured["0.weight"].ops[0].action == Fill(init.Orthogonal(2.0))
    assert captured["1.weight"].ops[0].action == Fill(init.Orthogonal(1.0))
    assert captured["1.weight"].ops[0].region == ((0, 4), (0, 3), (0, 2))
    assert [type(op.action) for op in captured["2.weight"].ops] == [Fill, Scale]
    for name, shape, gain in (("0.weight", (5, 7), 2.0), ("1.weight", (4, 3, 2), 1.0)):
        assert torch.equal(
            writer().full(captured[name], SEED), _full(name, shape, init.orthogonal(gain))
        )
    embedding = writer().full(captured["2.weight"], SEED)
    assert torch.equal(embedding, _full("2.weight", (9, 4), init.orthogonal(0.5)) * 3.0)
    assert torch.equal(
        writer().box(captured["2.weight"], SEED, ((2, 7), (1, 3))), embedding[2:7, 1:3]
    )

    def part() -> None:
        nn.init.orthogonal_(model[0].weight[1:])

    def transposed() -> None:
        nn.init.orthogonal_(model[0].weight.t())

    for fn in (part, transposed):
        with pytest.raises(UnsupportedInitOpError, match="not the whole parameter"):
            shardinit.capture_init(model, fn)

    def temporary(shape: tuple[int, ...]) -> Callable[[], None]:
        def copied() -> None:
            scratch = torch.empty(shape)
            nn.init.orthogonal_(scratch)
            model[0].weight.data.copy_(scratch.view(5, 7))

        return copied

    # A whole temporary of the parameter's shape copied whole: the parameter's own
    # orthogonal_ (tests/capture/test_probe_ordinary.py); of another shape, refused.
    captured = shardinit.capture_init(model, temporary((5, 7)))
    assert captured["0.weight"].ops[0].action == Fill(init.Orthogonal(1.0))
    with pytest.raises(UnsupportedInitOpError, match="whole-tensor draw"):
        shardinit.capture_init(model, temporary((7, 5)))


def test_trunc_normal_imported_by_name_is_seen() -> None:
    from torch.nn.init import trunc_normal_, xavier_uniform_

    with torch.device("meta"):
        model = nn.Linear(5, 4)

    def init_fn() -> None:
        trunc_normal_(model.weight, std=0.1, a=-0.15, b=0.2)
        xavier_uniform_(model.bias.unsqueeze(0))

    captured = shardinit.capture_init(model, init_fn)
    assert captured["weight"].ops[0].action == Fill(init.TruncNormal(0.0, 0.1, -0.15, 0.2))
    bound = math.sqrt(6.0 / (4 + 1))
    assert captured["bias"].ops[0].action == Fill(init.Uniform(-bound, bound))
    assert captured["bias"].ops[0].region == ((0, 4),)


def test_scale_eye_and_subregions_match_eager_values() -> None:
    def build() -> nn.Module:
        module = nn.Module()
        module.w = nn.Parameter(torch.empty(7, 9))
        return module

    def init_fn(module: nn.Module) -> None:
        module.w.data.uniform_(-1.0, 1.0)
        module.w.data[:, :2].mul_(0.5)
        module.w.data /= 4
        nn.init.eye_(module.w[1:4, 2:7])
        module.w.data[5] = 2.5
        module.w.narrow(1, 8, 1).fill_(-1)

    with torch.device("meta"):
        model = build()
    record = shardinit.capture_init(model, lambda: init_fn(model))["w"]
    assert [type(op.action) for op in record.ops] == [Fill, Scale, Scale, Computed, Fill, Fill]
    ours = writer().full(record, SEED)
    # The same operations run eagerly on the stream's own uniform values.
    want = _full("w", (7, 9), init.uniform(-1.0, 1.0))
    reference = nn.Module()
    reference.w = nn.Parameter(want)
    with torch.no_grad():
        reference.w[:, :2].mul_(0.5)
        reference.w /= 4
        nn.init.eye_(reference.w[1:4, 2:7])
        reference.w[5] = 2.5
        reference.w[:, 8] = -1
    assert torch.equal(ours, reference.w.detach())
    # Any box, and flat ranges, equal the slices of the whole.
    for box in [((0, 7), (0, 9)), ((2, 6), (1, 8)), ((5, 6), (0, 3)), ((3, 7), (8, 9))]:
        index = tuple(slice(a, b) for a, b in box)
        assert torch.equal(writer().box(record, SEED, box), ours[index]), box
    for start, stop in [(0, 63), (4, 31), (17, 18), (9, 45)]:
        out = torch.empty(stop - start)
        writer().write_flat(record, SEED, start, stop, out)
        assert torch.equal(out, ours.reshape(-1)[start:stop]), (start, stop)


def test_a_scale_reads_the_program_of_the_operations_before_it() -> None:
    """A scale is a step of the values before it, read as the program of the operations
    before it over its box (not from memory): of rows only a later fill sets, of a
    default the record does not hold (``prior``), in bfloat16, and in any box, the
    values equal the same code run eagerly on the stream's values."""

    def build(dtype: torch.dtype) -> nn.Module:
        module = nn.Module()
        module.w = nn.Parameter(torch.empty(6, 5, dtype=dtype))
        return module

    def init_fn(w: torch.Tensor) -> None:
        w.data[:2].normal_()
        w.data.mul_(2.0)  # rows 2: hold nothing yet; the next line sets them
        w.data[2:].zero_()
        w.data[:, 1:3].div_(3.0)

    with torch.device("meta"):
        model = build(torch.float32)
    record = shardinit.capture_init(model, lambda: init_fn(model.w))["w"]
    assert [type(op.action) for op in record.ops] == [Fill, Scale, Fill, Scale]
    want = torch.zeros(6, 5)
    want[:2] = _full("w", (6, 5), init.normal(0.0, 1.0))[:2] * 2.0
    want[:, 1:3] /= 3.0
    ours = writer().full(record, SEED)
    assert torch.equal(ours, want)
    assert torch.equal(writer().box(record, SEED, ((1, 4), (2, 5))), want[1:4, 2:5])

    with torch.device("meta"):
        model = build(torch.bfloat16)
    record = shardinit.capture_init(model, lambda: model.w.data[1:].mul_(0.3))["w"]
    default = base_ops(init.normal(0.0, 1.0), (6, 5))
    start = shardinit.full(
        shardinit.ParamSpec("w", (6, 5), torch.bfloat16, init.normal(0.0, 1.0), seed=SEED)
    )
    want = start.clone()
    want[1:].mul_(0.3)  # torch: the product in float32, then bfloat16
    assert not torch.equal(want, start)
    assert torch.equal(writer().full(record, SEED, prior=default), want)
    assert torch.equal(writer().box(record, SEED, ((0, 3), (1, 4)), prior=default), want[:3, 1:4])


_STRUCTURED: list[tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]] = [
    ((7, 9), lambda w: nn.init.eye_(w)),
    ((9, 7), lambda w: nn.init.eye_(w[1:4, 2:7])),
    ((7, 9), lambda w: nn.init.eye_(w.t()[2:7, 1:4])),  # the view's rows run along dim 1
    ((3, 4, 5), lambda w: nn.init.eye_(w[:, 2])),  # a selected (dropped) dim
    ((4, 2, 3), lambda w: nn.init.dirac_(w)),
    ((6, 2, 3, 3), lambda w: nn.init.dirac_(w, groups=2)),
    ((6, 4, 3, 5, 3), lambda w: nn.init.dirac_(w, groups=3)),
    ((8, 2, 5), lambda w: nn.init.dirac_(w[2:6, :, 1:4], groups=2)),
    ((2, 6, 3), lambda w: nn.init.dirac_(w[:, 1:5].transpose(0, 1))),
]


@pytest.mark.parametrize(("shape", "structured"), _STRUCTURED)
def test_eye_and_dirac_equal_torchs_on_views_and_boxes(
    shape: tuple[int, ...], structured: Callable[[torch.Tensor], torch.Tensor]
) -> None:
    """``eye_`` / ``dirac_`` (programs of the element's coordinates) on a parameter set to
    0.5 before: torch's own values, in every box."""
    with torch.device("meta"):
        model = nn.Module()
        model.w = nn.Parameter(torch.empty(shape))

    def init_fn() -> None:
        model.w.data.fill_(0.5)
        structured(model.w.data)

    record = shardinit.capture_init(model, init_fn)["w"]
    assert [type(op.action) for op in record.ops] == [Fill, Computed]
    reference = torch.full(shape, 0.5)
    structured(reference)
    ours = writer().full(record, SEED)
    assert torch.equal(ours, reference)
    assert bool((ours == 1).any())
    box = tuple((size // 3, size - size // 4) for size in shape)
    index = tuple(slice(a, b) for a, b in box)
    assert torch.equal(writer().box(record, SEED, box), reference[index]), box


def test_eye_of_a_temporary_copied_into_a_parameter() -> None:
    with torch.device("meta"):
        lin = nn.Linear(5, 4, bias=False)

    def init_fn() -> None:
        temp = lin.weight.new_zeros(5, 4)
        nn.init.eye_(temp)
        lin.weight.copy_(temp.t() * 3)

    ours = writer().full(shardinit.capture_init(lin, init_fn)["weight"], SEED)
    assert torch.equal(ours, torch.eye(4, 5) * 3)


def test_bfloat16_scale_is_torchs_mul_on_the_dtype() -> None:
    with torch.device("meta"):
        model = nn.Linear(8, 8, bias=False).to(torch.bfloat16)

    def init_fn() -> None:
        model.weight.data.normal_(0.0, 1.0)
        model.weight.data.mul_(0.3)

    ours = writer().full(shardinit.capture_init(model, init_fn)["weight"], SEED)
    spec = shardinit.ParamSpec("weight", (8, 8), torch.bfloat16, init.normal(), seed=SEED)
    assert torch.equal(ours, shardinit.full(spec).mul_(0.3))


# --------------------------------------------------------------------------- regions


def test_view_regions() -> None:
    p = torch.empty(4, 5, 6, device="meta")
    assert view_region(p, p) == (((0, 4), (0, 5), (0, 6)), (0, 1, 2))
    assert view_region(p[1:3, :, 2:4], p) == (((1, 3), (0, 5), (2, 4)), (0, 1, 2))
    assert view_region(p[2], p) == (((2, 3), (0, 5), (0, 6)), (1, 2))
    assert view_region(p[:, 3], p) == (((0, 4), (3, 4), (0, 6)), (0, 2))
    assert view_region(p.view(-1), p) == (((0, 4), (0, 5), (0, 6)), (None,))
    assert view_region(p[1:3].reshape(-1, 6), p) == (((1, 3), (0, 5), (0, 6)), (None, 2))
    assert view_region(p.transpose(0, 2), p) == (((0, 4), (0, 5), (0, 6)), (2, 1, 0))
    assert view_region(p[1:1], p) is None
    for bad in (p[::2], p[:, 1:3].reshape(4, 2, 6)[:, :, ::3], p[0, 0].expand(3, 6)):
        with pytest.raises(Cannot):
            view_region(bad, p)


@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 1, 4), (1, 1), (2, 3, 1, 5)])
def test_the_whole_tensor_has_the_region_of_any_view_of_it_whole(shape: tuple[int, ...]) -> None:
    # view_region answers the tensor itself without working it out; a view of the same
    # layout takes the general path.
    p = torch.empty(shape, device="meta")
    assert view_region(p, p) == view_region(p.view(shape), p)


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (3, 1, 2, 2)])
def test_flat_range_boxes_tile_the_range(shape: tuple[int, ...]) -> None:
    numel = math.prod(shape)
    flat = torch.arange(numel).reshape(shape)
    for start in range(numel):
        for stop in range(start, numel + 1):
            pieces = flat_range_boxes(shape, start, stop)
            got = torch.cat(
                [flat[tuple(slice(a, b) for a, b in box)].reshape(-1) for _, box in pieces]
                or [torch.empty(0, dtype=torch.long)]
            )
            assert torch.equal(got, torch.arange(start, stop)), (start, stop)
            offsets = [offset for offset, _ in pieces]
            assert offsets == sorted(offsets)


# --------------------------------------------------------------------------- errors


def _error(init_fn: object, model: nn.Module) -> str:
    originals = [id(p) for p in model.parameters()]
    with pytest.raises(UnsupportedInitOpError) as caught:
        shardinit.capture_init(model, init_fn)  # type: ignore[arg-type]
    # Nothing allocated, nothing swapped: the model is as it was.
    assert [id(p) for p in model.parameters()] == originals
    assert all(p.is_meta for p in model.parameters())
    return str(caught.value)


def test_unsupported_ops_name_param_op_and_location() -> None:
    with torch.device("meta"):
        model = HFModel()

    def orthogonal() -> None:
        nn.init.orthogonal_(model.h[1].c_fc.weight.data[:2])  # its matrix is the view's

    def copy() -> None:
        model.h[0].c_attn.weight.data.copy_(torch.randn(36, 12).cumsum(0))  # not elementwise

    def read() -> None:
        if model.ln_f.weight.sum() > 0:
            pass

    def strided() -> None:  # (a strided slice is a grid of positions: issue 51)
        model.wte.weight.data.view(-1)[::7][:10].view(2, 5).normal_()

    cases = [
        (orthogonal, "'h.1.c_fc.weight'", "orthogonal_"),
        (copy, "'h.0.c_attn.weight'", "copy_"),
        (read, "'ln_f.weight'", "sum"),
        (strided, "'wte.weight'", "not a box"),
    ]
    for fn, param, op in cases:
        message = _error(fn, model)
        assert param in message and op in message, message
        line = fn.__code__.co_firstlineno + 1
        assert f"{HERE}:{line} in {fn.__name__}" in message, message


def test_swallowed_error_still_raises() -> None:
    with torch.device("meta"):
        model = nn.Linear(3, 3)

    def init_fn() -> None:
        with contextlib.suppress(Exception):
            model.weight.data.add_(model.bias.data[0])

    assert "add_" in _error(init_fn, model)


# --------------------------------------------------------------------------- materialize


def _assert_params_equal_replay(model: nn.Module, factory: Callable[[], nn.Module]) -> None:
    """Every parameter of the materialized ``model`` is real and equals the world-1
    replay of ``init_weights`` captured on a fresh meta ``factory()``."""
    with torch.device("meta"):
        meta = factory()
    replayed = _replayed(meta, meta.init_weights)
    assert sorted(replayed) == sorted(name for name, _ in model.named_parameters())
    for name, param in model.named_parameters():
        assert not param.is_meta
        assert torch.equal(param.detach(), replayed[name]), name


def test_materialize_with_init_fn_world1() -> None:
    with torch.device("meta"):
        model = llama()
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    _assert_params_equal_replay(model, llama)
    model(torch.arange(6).reshape(1, 6))


def test_materialize_with_init_fn_recomputes_buffer_world1() -> None:
    with torch.device("meta"):
        model = RotaryStack()
    shardinit.materialize(model, seed=SEED, init_fn=model.init_weights)
    reference = eager(RotaryStack, lambda m: m.init_weights(), SEED)
    assert not model.freqs_cis.is_meta
    assert torch.equal(model.freqs_cis, reference.freqs_cis)  # buffer recomputed for real
    _assert_params_equal_replay(model, RotaryStack)
    model(model.example_input())


def test_materialize_partial_init_fn_keeps_defaults_elsewhere() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Embedding(9, 4, padding_idx=1), nn.Linear(4, 4))
        reference = nn.Sequential(nn.Embedding(9, 4, padding_idx=1), nn.Linear(4, 4))

    def init_fn() -> None:
        model[0].weight.data[6:].mul_(0.0)  # only scales part of the default values
        model[1].weight.data[0].fill_(3.0)

    shardinit.materialize(model, seed=SEED, init_fn=init_fn)
    shardinit.materialize(reference, seed=SEED)
    want_emb = reference[0].weight.detach().clone()
    want_emb[6:] *= 0.0
    want_lin = reference[1].weight.detach().clone()
    want_lin[0] = 3.0
    assert torch.equal(model[0].weight.detach(), want_emb)
    assert torch.equal(model[1].weight.detach(), want_lin)
    assert torch.equal(model[1].bias.detach(), reference[1].bias.detach())


def test_rules_shadowed_by_init_fn_are_named_in_a_warning() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))

    def init_fn() -> None:
        nn.init.zeros_(model[0].weight)  # all of it: a rule for it can never apply

    rules = {"0.weight": shardinit.init.ones(), nn.Linear: shardinit.init.normal(0.0, 0.5)}
    with pytest.warns(
        UserWarning, match=r"1 parameter\(s\) completely.*0\.weight \(rule '0\.weight'\)"
    ):
        shardinit.materialize(model, seed=SEED, init_fn=init_fn, rules=rules)
    assert torch.equal(model[0].weight.detach(), torch.zeros(4, 4))  # init_fn won
    # The type rule still applies where init_fn does not write.
    spec = shardinit.ParamSpec(
        "1.weight", (2, 4), torch.float32, shardinit.init.normal(0.0, 0.5), seed=SEED
    )
    assert torch.equal(model[1].weight.detach(), shardinit.full(spec))


def test_captured_init_recomputes_buffers_only_on_the_model_it_was_taken_on() -> None:
    with torch.device("meta"):
        template, other, same = RotaryStack(), RotaryStack(), RotaryStack()
    reference = eager(RotaryStack, lambda m: m.init_weights(), SEED)
    # Taken on `same` and given back to it: init_weights recomputes its freqs_cis.
    shardinit.materialize(same, seed=SEED, init_fn=shardinit.capture_init(same, same.init_weights))
    assert torch.equal(same.freqs_cis, reference.freqs_cis)
    # Taken on another object: running it would compute the template's buffer, not
    # this model's, so the buffer needs buffer_init like any unknown meta buffer.
    captured = shardinit.capture_init(template, template.init_weights)
    with pytest.raises(shardinit.ShardInitError, match="freqs_cis"):
        shardinit.materialize(other, seed=SEED, init_fn=captured)
    assert all(p.is_meta for p in other.parameters())

    def buffer_init(module: nn.Module, name: str, tensor: torch.Tensor) -> None:
        tensor.copy_(module.rotary_frequencies())

    shardinit.materialize(other, seed=SEED, init_fn=captured, buffer_init=buffer_init)
    assert torch.equal(other.freqs_cis, reference.freqs_cis)
    for (name, got), (_, want) in zip(
        other.named_parameters(), same.named_parameters(), strict=True
    ):
        assert torch.equal(got.detach(), want.detach()), name


def test_materialize_error_before_allocation() -> None:
    with torch.device("meta"):
        model = HFModel()
    with pytest.raises(UnsupportedInitOpError, match="sparse_"):
        shardinit.materialize(
            model, seed=SEED, init_fn=lambda: nn.init.sparse_(model.lm_head.weight, 0.5)
        )
    assert all(p.is_meta for p in model.parameters())
