"""Library constructors that branch on a weight being on meta, built on meta inside
``record_constructors``: the weight answers as the CPU tensor it stands for, so they take
a CPU build's branch (tests/capture/test_constructor_device_questions.py has the rule).

* transformers' Mamba and Mamba2 mixers run ``init_mamba_weights`` in the constructor
  unless ``dt_proj.weight`` / ``dt_bias`` is on meta (``A_log = log(arange)``, ``D =
  1``, ``dt`` drawn log-uniform): without ``init_fn``, the model materializes with the
  values of the CPU build (before: skipped, and ``A_log``, ``D`` and ``dt_bias`` had no
  value, refused as having no initializer).

peft's (MiCA, DeLoRA, DeFT, KaSA, PSOFT, MonteCLoRA, ShadowPEFT) and transformers'
``post_init`` are in test_probe_peft_init_order.py."""

from __future__ import annotations

from collections.abc import Callable

import client_models
import pytest
import torch
from test_clients import _like_library
from torch import nn

import shardinit

pytestmark = pytest.mark.clients

SEED = 3


@pytest.mark.parametrize("factory", [client_models._mamba, client_models._mamba2],
                         ids=["mamba", "mamba2"])  # fmt: skip
def test_mixers_init_in_the_constructor_as_a_cpu_build(factory: Callable[[], nn.Module]) -> None:
    with torch.device("meta"), shardinit.record_constructors():
        model = factory()
    shardinit.materialize(model, seed=SEED)  # no init_fn: the constructor's values alone
    torch.manual_seed(0)
    ours, theirs = model.state_dict(), factory().state_dict()
    assert sorted(ours) == sorted(theirs)
    mixer = "backbone.layers.0.mixer"
    assert torch.allclose(ours[f"{mixer}.D"], torch.ones_like(ours[f"{mixer}.D"]))
    for name, value in ours.items():
        if not torch.allclose(value, theirs[name]):  # tables (A_log): eager's within rounding
            _like_library(name, value, theirs[name])
