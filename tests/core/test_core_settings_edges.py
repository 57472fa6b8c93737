"""Small rules of the spec-level modules at their edges: the LLM preset's depth-scaled
output std, the thread count without CPU affinity, a truncation interval too narrow
below the mean, the LRU bound of the caches, and a tied parameter's holders."""

from __future__ import annotations

import math
import os

import pytest
import torch
from torch import nn

from shardinit import ShardInitError, init, shard
from shardinit._caches import CACHE_SIZE, BoundedMap
from shardinit._names import param_slots
from shardinit.presets import llm


def test_llm_depth_scaled_output_is_std_over_sqrt_of_twice_the_layers() -> None:
    rules = llm(0.02, depth_scaled_output=8)
    assert rules["*.wo.weight"] == init.normal(0.0, 0.02 / math.sqrt(16))
    assert rules["*.wo.weight"] == init.normal(0.0, 0.005)


def test_threads_without_cpu_affinity_are_the_cpu_count_up_to_torchs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shard, "_thread_setting", None)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # as off Linux
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert shard.get_num_threads() == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one
    assert shard.get_num_threads() == 1


def test_a_truncation_too_narrow_below_the_mean_is_refused_as_above_it() -> None:
    for a, b in ((-3.0, -3.0 + 1e-12), (3.0, 3.0 + 1e-12)):
        with pytest.raises(ShardInitError, match=r"is too narrow for std=1.0"):
            init.trunc_normal(0.0, 1.0, a, b)
    init.trunc_normal(0.0, 1.0, -3.0, -2.9)  # wide enough on either side
    init.trunc_normal(0.0, 1.0, 2.9, 3.0)


def test_a_bounded_map_keeps_cache_size_entries_and_a_full_budget() -> None:
    entries: BoundedMap[int, int] = BoundedMap()
    for key in range(CACHE_SIZE):
        entries.put(key, key)
    assert len(entries) == CACHE_SIZE and entries.get(0) == 0
    entries.put(CACHE_SIZE, CACHE_SIZE)  # one more: the least recently used (1) goes
    assert len(entries) == CACHE_SIZE and entries.get(1) is None
    weighed: BoundedMap[str, str] = BoundedMap(budget=10)
    weighed.put("a", "a", weight=4)
    weighed.put("b", "b", weight=6)  # exactly the budget: both kept
    assert (weighed.get("a"), weighed.get("b")) == ("a", "b")
    weighed.put("c", "c", weight=1)  # over it: the least recently used (a) goes
    assert (weighed.get("a"), len(weighed)) == (None, 2)


def test_a_parameter_tied_between_modules_lists_every_holder_once() -> None:
    model = nn.Sequential(nn.Embedding(4, 2), nn.Linear(2, 4, bias=False))
    model[1].weight = model[0].weight
    model.add_module("again", model[0])  # the same module under a second path
    (slot,) = param_slots(model)
    assert slot.name == "0.weight"
    assert slot.owners == [(model[0], "weight"), (model[1], "weight")]
