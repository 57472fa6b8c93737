"""OLMo-core's own ``Transformer.init_weights`` (issue 29, item 4), which starts with
``self.to_empty(device)``: built on meta and materialized with it as ``init_fn``, every
parameter against OLMo-core's own CPU init: constant parameters (norm weights) equal,
every parameter exactly the stream of the fill OLMo-core makes of it, same shapes and
dtypes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import shardinit
from shardinit import init

pytestmark = pytest.mark.clients


def _config() -> object:
    transformer = pytest.importorskip("olmo_core.nn.transformer")
    return transformer.TransformerConfig.llama_like(
        d_model=32, vocab_size=64, n_layers=2, n_heads=2
    )


#: The torch.nn.init fills OLMo-core's init_weights calls, and their initializers.
FILLS: dict[str, Callable[..., init.Initializer]] = {
    "normal_": lambda mean=0.0, std=1.0: init.normal(mean, std),
    "trunc_normal_": lambda mean=0.0, std=1.0, a=-2.0, b=2.0: init.trunc_normal(mean, std, a, b),
    "ones_": init.ones,
    "zeros_": init.zeros,
}


def _last_fills(model: torch.nn.Module, run: Callable[[], object]) -> dict[str, init.Initializer]:
    """Runs ``run`` (``model``'s eager init) and returns, per parameter, the initializer
    of the last torch.nn.init fill of it (the one its values come from)."""
    last: dict[str, init.Initializer] = {}

    def recording(fn_name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def fill(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            arguments = {key: value for key, value in kwargs.items() if key != "generator"}
            # By address at the call: init_weights starts with to_empty (new storage).
            names = {param.data_ptr(): name for name, param in model.named_parameters()}
            if tensor.data_ptr() in names:  # not a buffer's
                last[names[tensor.data_ptr()]] = FILLS[fn_name](*args, **arguments)
            return original(tensor, *args, **kwargs)

        return fill

    with pytest.MonkeyPatch.context() as patch:
        for fn_name in FILLS:
            original = getattr(torch.nn.init, fn_name)
            patch.setattr(torch.nn.init, fn_name, recording(fn_name, original))
        run()
    return last


def test_olmo_core_init_weights_with_to_empty() -> None:
    """Every parameter is exactly the stream of OLMo-core's last fill of it (recorded
    from its own CPU init: a truncated normal of std 0.02 at +-3 std for the weights, ones
    for the norms), keyed by its name and the seed."""
    config = _config()
    with torch.device("meta"):
        model = config.build(init_device="meta")  # type: ignore[attr-defined]
    cpu = torch.device("cpu")
    shardinit.materialize(
        model, seed=1234, init_fn=lambda: model.init_weights(device=cpu, max_seq_len=16)
    )
    torch.manual_seed(0)
    reference = config.build(init_device="cpu")  # type: ignore[attr-defined]
    fills = _last_fills(reference, lambda: reference.init_weights(device=cpu, max_seq_len=16))
    ours = dict(model.named_parameters())
    theirs = dict(reference.named_parameters())
    assert sorted(ours) == sorted(theirs) == sorted(fills)
    assert fills["blocks.0.attention.w_q.weight"] == init.trunc_normal(0.0, 0.02, -0.06, 0.06)
    for name, value in theirs.items():
        got, want = ours[name].detach(), value.detach()
        assert got.shape == want.shape and got.dtype == want.dtype, name
        if bool((want == want.flatten()[0]).all()):
            assert torch.equal(got, want), name  # constants exact (norm weights)
        spec = shardinit.ParamSpec(name, tuple(got.shape), got.dtype, fills[name], seed=1234)
        assert torch.equal(got, shardinit.full(spec)), name
