"""``fill_`` by a 0-d tensor (issue 51, init code nobody listed): torch fills with the
tensor's value, as ``copy_`` of it broadcast. fla's MesaNet computes its ``lambda_params``
in the constructor as ``torch.empty(n).fill_(torch.log(torch.exp(torch.tensor(v)) - 1))``:
on the meta device under ``record_constructors()`` the value is a meta temporary whose
value capture knows, and the fill is that copy (it was refused as "not a Python
scalar"). A random 0-d value repeated over the tensor stays refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import shardinit


def _softplus_inverse(value: float) -> torch.Tensor:
    return torch.log(torch.exp(torch.tensor(value)) - 1.0)


class _Lambdas(nn.Module):
    """MesaNet's constructor: a parameter filled by a 0-d tensor computed there."""

    def __init__(self, fill: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.lambdas = nn.Parameter(fill(torch.empty(6, dtype=torch.float32)))


FILLS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softplus_inverse": lambda t: t.fill_(_softplus_inverse(1.0 - 0.25)),
    "keyword_value": lambda t: t.fill_(value=torch.tensor(0.3) * 2),
}


@pytest.mark.parametrize("case", sorted(FILLS))
def test_a_fill_by_a_tensor_in_a_constructor_is_eagers(case: str) -> None:
    eager = _Lambdas(FILLS[case])
    with torch.device("meta"), shardinit.record_constructors():
        meta = _Lambdas(FILLS[case])
    shardinit.materialize(meta, seed=3)
    assert torch.equal(meta.lambdas.detach(), eager.lambdas.detach()), case
    assert not torch.isnan(meta.lambdas.detach()).any()


def test_a_fill_by_a_meta_tensor_in_init_code_is_eagers() -> None:
    with torch.device("meta"):
        model = _Lambdas(lambda t: t)

    def init_fn() -> None:
        with torch.no_grad():
            model.lambdas.fill_(_softplus_inverse(0.5).to("meta"))

    shardinit.materialize(model, seed=3, init_fn=init_fn)
    want = torch.full((6,), float(_softplus_inverse(0.5)))
    assert torch.equal(model.lambdas.detach(), want)


#: One random 0-d value repeated over a tensor (eager: every element the same draw), on
#: the CPU (whose real value is torch's draw, never the stream's) and on meta: each was
#: taken as a number (torch's draw) or drawn again at each element (another
#: distribution), silently; refused now, as any broadcast of random values is.
REPEATED_DRAWS: dict[str, Callable[[torch.Tensor], object]] = {
    "fill_cpu": lambda w: w.fill_(torch.rand(())),
    "fill_meta": lambda w: w.fill_(torch.rand((), device="meta")),
    "mul_cpu": lambda w: w.mul_(torch.rand(())),
    "mul_meta": lambda w: w.mul_(torch.rand((), device="meta")),
    "add_0d": lambda w: w.copy_(torch.zeros(6) + torch.rand(())),
    "copy_0d": lambda w: w.copy_(torch.randn(()) * 0.1),
}


@pytest.mark.parametrize("case", sorted(REPEATED_DRAWS))
def test_one_random_value_repeated_over_a_parameter_is_refused(case: str) -> None:
    with torch.device("meta"):
        model = _Lambdas(lambda t: t)

    def init_fn() -> None:
        with torch.no_grad():
            model.lambdas.fill_(1.0)
            REPEATED_DRAWS[case](model.lambdas)

    with pytest.raises(shardinit.UnsupportedInitOpError, match="repeats random values"):
        shardinit.materialize(model, seed=3, init_fn=init_fn)
    assert model.lambdas.is_meta


def test_a_random_0d_value_into_one_element_is_drawn_there() -> None:
    """Into one element nothing repeats: the value drawn at that element's own index,
    as ``w[2:3].uniform_()`` draws it."""
    results = []
    for code in (
        lambda w: w[2:3].copy_(torch.rand(())),
        lambda w: w[2:3].uniform_(),
    ):
        with torch.device("meta"):
            model = _Lambdas(lambda t: t)

        def init_fn(code: Callable[[torch.Tensor], object] = code, model: _Lambdas = model) -> None:
            with torch.no_grad():
                model.lambdas.zero_()
                code(model.lambdas)

        shardinit.materialize(model, seed=3, init_fn=init_fn)
        results.append(model.lambdas.detach().clone())
    assert torch.equal(results[0], results[1]) and 0.0 < float(results[0][2]) < 1.0
