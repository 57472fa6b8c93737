"""DeferredFills (shardinit._fill): fills handed to the batch are written by the end of
the ``with`` block, a batch starting as soon as it holds enough fills or elements, on
the most threads its fills ask for."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from shardinit import ParamSpec, _core, _fill, full, init
from shardinit._fill import DeferredFills, fill
from shardinit._host import start_fills_cpu

CHUNK_BYTES = 1 << 20


def _spec(name: str, size: int) -> ParamSpec:
    return ParamSpec(name, (size,), torch.float32, init.normal(0.0, 1.0), seed=3)


def test_small_fills_start_a_batch_when_full_and_are_written_by_the_end() -> None:
    specs = [_spec(f"p{i}", 4) for i in range(DeferredFills.BATCH + 1)]
    outs = [torch.empty(4) for _ in specs]
    with DeferredFills() as deferred:
        for index, (spec, out) in enumerate(zip(specs, outs, strict=True)):
            fill(spec, ((0, 4),), out, threads=1, chunk_bytes=CHUNK_BYTES, deferred=deferred)
            if index == DeferredFills.BATCH - 1:  # full: started, the next one taken anew
                assert deferred._running is not None and not deferred.fills
    assert all(torch.equal(out, full(spec)) for spec, out in zip(specs, outs, strict=True))


def test_large_fills_start_a_batch_by_their_elements_on_the_threads_they_ask_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream of several chunks is left to the batch too (written on every thread the
    caller gives it, while the caller goes on): a batch starts once it holds
    ``ELEMENTS``, with the most threads its fills asked for."""
    started: list[tuple[int, int]] = []  # per batch: its fills, its threads

    def spy(fills: list[Any], threads: int) -> _core.StartedFills:
        started.append((len(fills), threads))
        return start_fills_cpu(fills, threads)

    monkeypatch.setattr(_fill, "start_fills_cpu", spy)
    size = 3 * _core.CHUNK_ELEMENTS + 1
    monkeypatch.setattr(DeferredFills, "ELEMENTS", size + 4)
    specs = [_spec("small", 4), _spec("large", size), _spec("after", 4)]
    outs = [torch.empty(spec.shape) for spec in specs]
    with DeferredFills() as deferred:
        for spec, out, threads in zip(specs, outs, (1, 2, 1), strict=True):
            fill(spec, ((0, out.numel()),), out, threads=threads, chunk_bytes=CHUNK_BYTES,
                 deferred=deferred)  # fmt: skip
        assert started == [(2, 2)] and len(deferred.fills) == 1  # the third: taken anew
    assert started == [(2, 2), (1, 1)]
    assert all(torch.equal(out, full(spec)) for spec, out in zip(specs, outs, strict=True))
