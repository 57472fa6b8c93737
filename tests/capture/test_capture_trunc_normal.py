"""timm's truncated normal (issue 29): ``uniform_ -> erfinv_ -> mul_ -> add_ -> clamp_`` on a
meta parameter is captured as a program of the parameter's own uniform stream, replays
shard-locally (any box equals the full replay's slice) and has the truncated normal's
distribution (Kolmogorov-Smirnov against scipy's ``truncnorm``, moments within their
standard errors). timm's own ``trunc_normal_`` and ``trunc_normal_tf_`` too, when timm is
importable. The other followed functions of the same family (``sign``, ``round``, ``relu``,
``lerp``, ``addcmul``, ...) against torch's own values.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import scipy.stats
import torch
from torch import nn

import shardinit
from shardinit import init
from shardinit.shard import writer

SEED = 29
SHAPE = (256, 96)
#: Significance of the KS tests (fixed seeds: deterministic, not flaky).
ALPHA = 1e-3


def timm_style_trunc_normal_(
    tensor: torch.Tensor, mean: float, std: float, a: float, b: float
) -> torch.Tensor:
    """timm's ``_trunc_normal_`` (timm/layers/weight_init.py), as nn.init-style code."""

    def norm_cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    low, high = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
    with torch.no_grad():
        tensor.uniform_(2 * low - 1, 2 * high - 1)
        tensor.erfinv_()
        tensor.mul_(std * math.sqrt(2.0))
        tensor.add_(mean)
        tensor.clamp_(min=a, max=b)
    return tensor


def _meta_linear() -> nn.Linear:
    with torch.device("meta"):
        return nn.Linear(SHAPE[1], SHAPE[0])


def _check_truncated_normal(
    values: torch.Tensor, mean: float, std: float, a: float, b: float
) -> None:
    flat = values.double().flatten()
    assert bool(((flat >= a) & (flat <= b)).all())
    dist = scipy.stats.truncnorm((a - mean) / std, (b - mean) / std, loc=mean, scale=std)
    n = flat.numel()
    # Moments within 5 standard errors (the fourth moment bounds the std's).
    assert abs(flat.mean().item() - dist.mean()) < 5 * dist.std() / math.sqrt(n)
    kurtosis = dist.stats(moments="k") + 3
    std_error = dist.std() * math.sqrt((kurtosis - 1) / (4 * n))
    assert abs(flat.std().item() - dist.std()) < 5 * std_error
    assert scipy.stats.kstest(flat.numpy(), dist.cdf).pvalue > ALPHA


CASES = {
    # (mean, std, a, b): timm's ViT (std 0.02, bounds at +-2 absolute: +-100 std), a
    # standard one at +-2 std, an asymmetric one.
    "vit": (0.0, 0.02, -2.0, 2.0),
    "standard": (0.0, 1.0, -2.0, 2.0),
    "shifted": (0.5, 2.0, -1.0, 6.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_timm_trunc_normal_replays_shard_locally_with_its_distribution(case: str) -> None:
    mean, std, a, b = CASES[case]
    lin = _meta_linear()
    captured = shardinit.capture_init(
        lin, lambda: timm_style_trunc_normal_(lin.weight, mean, std, a, b)
    )
    full = writer().full(captured["weight"], SEED)
    assert full.unique().numel() > full.numel() * 0.9  # random values, not a constant
    for box in (((0, 256), (0, 96)), ((17, 130), (5, 96)), ((255, 256), (0, 1)), ((3, 4), (0, 96))):
        rows, cols = slice(*box[0]), slice(*box[1])
        assert torch.equal(writer().box(captured["weight"], SEED, box), full[rows, cols]), box
    # materialize (W = 1) gives the same bytes.
    model = _meta_linear()
    shardinit.materialize(
        model, seed=SEED,
        init_fn=lambda: (timm_style_trunc_normal_(model.weight, mean, std, a, b),
                         model.bias.data.zero_()),
    )  # fmt: skip
    assert torch.equal(model.weight.detach(), full)
    _check_truncated_normal(full, mean, std, a, b)
    # Element by element: the parameter's own uniform stream through erfinv.
    low = (1 + math.erf((a - mean) / std / math.sqrt(2))) - 1
    high = (1 + math.erf((b - mean) / std / math.sqrt(2))) - 1
    uniform = shardinit.full(
        shardinit.ParamSpec("weight", SHAPE, init=init.uniform(low, high), seed=SEED)
    )
    expected = torch.erfinv(uniform.double()).float().double() * float(
        torch.tensor(std * math.sqrt(2.0), dtype=torch.float32)
    )
    expected = (expected.float().double() + mean).float().clamp(a, b)
    torch.testing.assert_close(full, expected, rtol=2**-22, atol=2**-40)


def _timm_layers() -> object:
    return pytest.importorskip("timm.layers", reason="timm is not installed")


@pytest.mark.parametrize("name", ["trunc_normal_", "trunc_normal_tf_"])
def test_timms_own_trunc_normal_replays(name: str) -> None:
    layers = _timm_layers()
    fill: Callable[..., torch.Tensor] = getattr(layers, name)
    mean, std, a, b = 0.1, 0.5, -0.5, 1.5
    results = []
    for box in (None, ((40, 200), (10, 60))):
        lin = _meta_linear()
        captured = shardinit.capture_init(
            lin, lambda lin=lin: fill(lin.weight, mean=mean, std=std, a=a, b=b)
        )
        record = captured["weight"]
        results.append(
            writer().full(record, SEED) if box is None else writer().box(record, SEED, box)
        )
    full, part = results
    assert torch.equal(part, full[40:200, 10:60])
    if name == "trunc_normal_":
        _check_truncated_normal(full, mean, std, a, b)
    else:  # tf: a standard normal cut at [a, b], then scaled and shifted
        _check_truncated_normal(full, mean, std, mean + std * a, mean + std * b)


# --------------------------------------------------------------------------- the family


def _grid(device: torch.device) -> torch.Tensor:
    """(7, 12) float32 values of both signs, halves (round's ties), zeros of both signs."""
    row = [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, -3.7, 0.3, 7.25, -0.3]
    scales = torch.tensor([1.0, -1.0, 2.0, 0.5, 3.0, -2.0, 1.5], device=device).view(-1, 1)
    return scales * torch.tensor(row, device=device)


def _weights(device: torch.device) -> torch.Tensor:
    """lerp weights from -0.5 to 1.25 (both of its formulas), exact in float32."""
    return torch.arange(12, device=device) * 0.15625 - 0.5


FAMILY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sign": torch.sign,
    "sgn": lambda x: x.sgn(),
    "round": torch.round,
    "relu": torch.relu,
    "relu_functional": nn.functional.relu,
    "relu6": nn.functional.relu6,
    "hardtanh": lambda x: nn.functional.hardtanh(x, -1.25, 0.5),
    "ceil": torch.ceil,
    "frac": torch.frac,
    "fix": torch.fix,
    "heaviside": lambda x: torch.heaviside(x, x.new_full((12,), 0.25)),
    "lerp_scalar": lambda x: torch.lerp(x, x * 3 + 1, 0.3),
    "lerp_scalar_large": lambda x: torch.lerp(x, x * 3 + 1, 0.8),
    "lerp_tensor": lambda x: torch.lerp(x, -x, _weights(x.device)),
    "lerp_tensor_": lambda x: x.clone().lerp_(-x, _weights(x.device)),
    "addcmul": lambda x: torch.addcmul(x, x + 1, x - 2, value=0.5),
    "addcdiv": lambda x: torch.addcdiv(x, x, x * x + 1, value=-2.0),
    "clamp_min": lambda x: x.clamp_min(0.0),
    "erf": torch.erf,
    "erfinv": lambda x: torch.special.erfinv(torch.tanh(x)),
    "round_in_place": lambda x: x.clone().round_(),
    "sign_in_place": lambda x: x.clone().sign_(),
}


def _f32(value: float) -> float:
    """``value`` as float32 holds it (how a float32 kernel takes a Python number)."""
    return float(torch.tensor(value, dtype=torch.float32))


#: lerp, addcmul and addcdiv of FAMILY's float32 operands computed in float64 by torch,
#: rounded once: what shardinit computes (torch's float32 kernels round each step).
IN_FLOAT64: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    # torch's float32 lerp takes a Python weight as float32 (its kernel's scalar_t):
    # the same operand here is that float32 weight, in binary64.
    "lerp_scalar": lambda x: torch.lerp(x.double(), (x * 3 + 1).double(), _f32(0.3)),
    "lerp_scalar_large": lambda x: torch.lerp(x.double(), (x * 3 + 1).double(), _f32(0.8)),
    "lerp_tensor": lambda x: torch.lerp(x.double(), -x.double(), _weights(x.device).double()),
    "lerp_tensor_": lambda x: torch.lerp(x.double(), -x.double(), _weights(x.device).double()),
    "addcmul": lambda x: torch.addcmul(x.double(), (x + 1).double(), (x - 2).double(), value=0.5),
    "addcdiv": lambda x: torch.addcdiv(x.double(), x.double(), (x * x + 1).double(), value=-2.0),
}


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_the_family_matches_torch_on_a_grid(name: str) -> None:
    """Each operation on a deterministic table: the program's values are torch's own
    (exact ones to the bit, signed zeros included; erf and erfinv within 1 ulp of float32)
    or, for lerp, addcmul and addcdiv, torch's float64 ones of the same operands (within 1
    ulp: shardinit rounds once per operation, torch's float32 kernels per step)."""
    compute = FAMILY[name]
    with torch.device("meta"):
        weight = nn.Parameter(torch.empty(7, 12))
        holder = nn.Module()
        holder.weight = weight
    captured = shardinit.capture_init(
        holder, lambda: holder.weight.copy_(compute(_grid(holder.weight.device)))
    )
    got = writer().full(captured["weight"], SEED)
    grid = _grid(torch.device("cpu"))
    want = IN_FLOAT64[name](grid).float() if name in IN_FLOAT64 else compute(grid)
    if name.startswith(("erf", "lerp", "add")):
        torch.testing.assert_close(got, want, rtol=2**-23, atol=2**-40)
    else:
        assert torch.equal(got, want), (got, want)
        assert torch.equal(torch.signbit(got), torch.signbit(want)), name


def test_relu_and_round_on_random_values_in_place() -> None:
    """``relu_``, ``round_``, ``sign_``, ``lerp_``, ``addcmul_`` on a parameter's own
    random values: followed, exact."""

    meta = torch.device("meta")

    def build(lin: nn.Linear) -> None:
        nn.init.normal_(lin.weight, std=3.0)
        lin.weight.data[:100].relu_()
        lin.weight.data[100:150].round_()
        lin.weight.data[150:200].sign_()
        ones, twos = torch.ones(96, device=meta), torch.full((96,), 2.0, device=meta)
        lin.weight.data[200:230].lerp_(ones, 0.25)
        lin.weight.data[230:].addcmul_(twos, ones * 0.5, value=3)

    lin = _meta_linear()
    full = writer().full(shardinit.capture_init(lin, lambda: build(lin))["weight"], SEED)
    normal = shardinit.full(
        shardinit.ParamSpec("weight", SHAPE, init=init.normal(0, 3.0), seed=SEED)
    )
    want = normal.clone()
    want[:100].relu_()
    want[100:150].round_()
    want[150:200].sign_()
    want[200:230] = (normal[200:230].double() + 0.25 * (1 - normal[200:230].double())).float()
    want[230:] = (normal[230:].double() + 3.0).float()
    assert torch.equal(full, want)


def test_unsupported_elementwise_operations_say_so() -> None:
    """An elementwise operation with no exact formula is refused as one (not as "not
    elementwise"); round with decimals is refused by name."""
    lin = _meta_linear()
    with pytest.raises(shardinit.UnsupportedInitOpError, match="no exact formula") as caught:
        shardinit.capture_init(lin, lambda: lin.weight.data.uniform_().atan_())
    assert "atan_" in str(caught.value) and "'weight'" in str(caught.value)
    lin = _meta_linear()
    with pytest.raises(shardinit.UnsupportedInitOpError, match="no exact formula"):
        shardinit.capture_init(
            lin, lambda: lin.weight.copy_(torch.special.erfc(torch.rand(*SHAPE, device="meta")))
        )
    lin = _meta_linear()
    with pytest.raises(shardinit.UnsupportedInitOpError, match="decimals=2"):
        shardinit.capture_init(lin, lambda: lin.weight.data.uniform_().round_(decimals=2))
