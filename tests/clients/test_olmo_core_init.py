"""OLMo-core's own ``Transformer.init_weights`` (issue 29, item 4), which starts with
``self.to_empty(device)``: built on meta and materialized with it as ``init_fn``, every
parameter against OLMo-core's own CPU init: constant parameters (norm weights) exact,
random ones' std within sample-size tolerance, same shapes, dtypes and ties."""

from __future__ import annotations

import pytest
import torch

import shardinit

pytestmark = pytest.mark.clients


def _config() -> object:
    transformer = pytest.importorskip("olmo_core.nn.transformer")
    return transformer.TransformerConfig.llama_like(
        d_model=32, vocab_size=64, n_layers=2, n_heads=2
    )


def test_olmo_core_init_weights_with_to_empty() -> None:
    config = _config()
    with torch.device("meta"):
        model = config.build(init_device="meta")  # type: ignore[attr-defined]
    cpu = torch.device("cpu")
    shardinit.materialize(
        model, seed=1234, init_fn=lambda: model.init_weights(device=cpu, max_seq_len=16)
    )
    torch.manual_seed(0)
    reference = config.build(init_device="cpu")  # type: ignore[attr-defined]
    reference.init_weights(device=cpu, max_seq_len=16)
    ours = dict(model.named_parameters())
    theirs = dict(reference.named_parameters())
    assert sorted(ours) == sorted(theirs)
    for name, value in theirs.items():
        got, want = ours[name].detach(), value.detach()
        assert got.shape == want.shape and got.dtype == want.dtype, name
        if bool((want == want.flatten()[0]).all()):
            assert torch.equal(got, want), name  # constants exact (norm weights)
            continue
        ratio = float(got.std() / want.std())
        assert abs(ratio - 1) < 0.25, f"{name}: std ratio {ratio}"  # >= 1024 elements
