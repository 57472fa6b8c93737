"""One walk of the model per materialize (issue 51): the phases share a ``ModuleWalk``
(planning, checks, the capture's setup), and init_fn, which may change the module
tree, is followed by one more walk, which the phases after it read. The walk gives what
torch's own walks give: the same modules, paths, parameter slots, holder names and
buffer names, on a model with shared submodules, tied parameters and wrapper
segments."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import shardinit
from shardinit._names import ModuleWalk, buffer_holders, canonical_name, holder_names
from shardinit.errors import ShardInitError


class _Wrapper(nn.Module):
    """Holds its module under a wrapper segment, as torch.compile's ``_orig_mod``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self._orig_mod = inner


def _tangled() -> nn.Module:
    """Shared submodules, a tied parameter, wrapper segments (a module's and a
    parameter's own name), buffers, and a root with a parameter of its own."""
    with torch.device("meta"):
        shared = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
        model = nn.Sequential(
            _Wrapper(nn.Linear(3, 4)),
            shared,
            nn.ModuleList([shared, nn.Linear(4, 3)]),
            _Wrapper(_Wrapper(nn.Embedding(5, 3))),
        )
        model.register_parameter("_orig_mod", nn.Parameter(torch.empty(2)))
        model[2][1].register_parameter("tied", model[1][0].weight)
    return model


def test_a_walk_gives_torchs_modules_paths_slots_and_names() -> None:
    model = _tangled()
    walk = ModuleWalk(model)
    assert walk.pairs == list(model.named_modules(remove_duplicate=False))
    assert walk.distinct == list(model.named_modules())
    assert walk.modules == list(model.modules())
    named = list(model.named_parameters())
    assert [slot.name for slot in walk.slots] == [canonical_name(n) for n, _ in named]
    assert [slot.param for slot in walk.slots] == [p for _, p in named]
    tied = next(slot for slot in walk.slots if slot.param is model[1][0].weight)
    assert tied.owners == [(model[1][0], "weight"), (model[2][1], "tied")]
    every = model.named_parameters(remove_duplicate=False)
    first: dict[int, str] = {}
    expected = {canonical_name(n): first.setdefault(id(p), canonical_name(n)) for n, p in every}
    assert holder_names(model, walk=walk) == holder_names(model) == expected
    assert "_orig_mod" not in expected and "" in expected  # the root's wrapper-named one
    buffers = [canonical_name(n) for n, _ in model.named_buffers()]
    assert [h.name for h in buffer_holders(model, walk)] == buffers
    assert [h.name for h in buffer_holders(model)] == buffers


@pytest.fixture
def root_walks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[nn.Module]]:
    """The modules ``named_modules`` is called on (``modules()`` calls it too, and it
    calls itself on each submodule)."""
    called: list[nn.Module] = []
    original = nn.Module.named_modules

    def counted(self: nn.Module, *args: object, **kwargs: object) -> object:
        called.append(self)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nn.Module, "named_modules", counted)
    yield called


def test_materialize_walks_the_model_once_and_once_more_after_init_fn(
    root_walks: list[nn.Module],
) -> None:
    with torch.device("meta"):
        model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)], nn.BatchNorm1d(4))
        other = nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)], nn.BatchNorm1d(4))

    def init() -> None:
        for layer in model[:3]:
            layer.weight.normal_(0.0, 0.02)  # (no walk of its own)

    root_walks.clear()
    shardinit.materialize(other, seed=0)
    assert root_walks.count(other) == 1
    shardinit.materialize(model, seed=0, init_fn=init)
    assert root_walks.count(model) == 2  # before init_fn, and after it


def test_after_init_fn_changes_the_tree_the_checks_read_the_new_tree() -> None:
    """init code puts a module without parameters or buffers into the model (kept, as in
    eager torch) that holds a meta tensor as a plain attribute: the walk after init_fn
    sees it, and materialize refuses it (it would stay on meta)."""

    class Table(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.empty(3, device="meta")

    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    table = Table()

    def init() -> None:
        model[1] = table
        nn.init.normal_(model[0].weight, std=0.02)

    with pytest.raises(ShardInitError, match=r"1\.table \(Table\) hold tensors on the meta"):
        shardinit.materialize(model, seed=0, init_fn=init)


def test_flags_init_fn_sets_reach_the_new_parameters_of_a_walk_made_before_allocation() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    model[1].weight = model[0].weight  # tied: one slot, two holders

    def init() -> None:
        nn.init.normal_(model[0].weight, std=0.02)
        model[0].weight.requires_grad_(False)
        model[0].bias.requires_grad_(False)

    shardinit.materialize(model, seed=0, init_fn=init)
    assert not model[0].weight.is_meta and model[1].weight is model[0].weight
    assert not model[0].weight.requires_grad and not model[0].bias.requires_grad
    assert model[1].bias.requires_grad
