"""DeferredFills (shardinit._fill): fills handed to the batch are written by the end of
the ``with`` block, a batch starting as soon as it holds enough fills or elements, on
the most threads its fills ask for."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from shardinit import ParamSpec, ShardInitError, _core, _fill, full, init
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
                assert deferred._running and not deferred.fills
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


def _batches_with_errors(
    deferred: DeferredFills, count: int, bad: set[int]
) -> tuple[list[ParamSpec], list[torch.Tensor]]:
    """``count`` batches of one fill each handed to ``deferred`` (BATCH is 1), those in
    ``bad`` with a box past their parameter's end (an error the core meets as it
    writes, not when the batch starts: ``box[0] = (i, i + 4)``, the fill's index
    ``i`` > 0 in it); their specs and tensors."""
    specs = [_spec(f"p{i}", 4) for i in range(count)]
    outs = [torch.zeros(4) for _ in specs]
    for index, (spec, out) in enumerate(zip(specs, outs, strict=True)):
        box = ((index, index + 4),) if index in bad else ((0, 4),)  # each its own error
        deferred.add(spec, box, out)
    return specs, outs


def test_batches_run_side_by_side_and_the_first_error_in_order_is_raised_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch starts whether or not the ones before it have ended, at most RUNNING at
    once (the caller waits for the oldest before one more); when the block ends every
    batch has been waited for (the later good ones written) and the first error among
    them, in the order they started, is raised."""
    monkeypatch.setattr(DeferredFills, "BATCH", 1)
    under_way: list[int] = []
    real_start = DeferredFills._start

    def start(self: DeferredFills, threads: int) -> None:
        real_start(self, threads)
        under_way.append(len(self._running))

    monkeypatch.setattr(DeferredFills, "_start", start)
    count, bad = DeferredFills.RUNNING + 3, {DeferredFills.RUNNING, DeferredFills.RUNNING + 1}
    first = rf"box\[0\] = \({min(bad)}, {min(bad) + 4}\)"
    with pytest.raises(ShardInitError, match=first), DeferredFills() as deferred:
        specs, outs = _batches_with_errors(deferred, count, bad)
    assert max(under_way) == DeferredFills.RUNNING and under_way[:2] == [1, 2]
    assert not deferred._running
    good = [i for i in range(count) if i not in bad]
    assert all(torch.equal(outs[i], full(specs[i])) for i in good)


def test_leaving_on_the_callers_error_waits_for_every_batch_and_keeps_that_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The caller's own error on its way out stands (a batch's error it met waiting for
    the oldest batch was the first; a later batch's is not raised over it), once every
    batch under way has ended."""
    monkeypatch.setattr(DeferredFills, "BATCH", 1)
    with pytest.raises(RuntimeError, match="init code failed"), DeferredFills() as deferred:
        _batches_with_errors(deferred, 2, bad={1})
        raise RuntimeError("init code failed")
    assert not deferred._running


def test_a_last_batch_the_core_refuses_to_start_is_raised_once_every_batch_has_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batch the block's end starts holds two fills of overlapping memory (never
    made by the writer): the core refuses it at its start, raised once the batch under
    way before it has ended (its values written)."""
    monkeypatch.setattr(DeferredFills, "BATCH", 3)
    specs = [_spec(f"p{i}", 4) for i in range(3)]
    outs = [torch.zeros(4) for _ in specs]
    shared = torch.zeros(64)
    with pytest.raises(ShardInitError, match="out overlaps"), DeferredFills() as deferred:
        for spec, out in zip(specs, outs, strict=True):
            deferred.add(spec, ((0, 4),), out)
        assert len(deferred._running) == 1  # the first batch, under way
        deferred.add(_spec("w", 64), ((0, 40),), shared[:40])
        deferred.add(_spec("w", 64), ((30, 64),), shared[30:])
    assert not deferred._running
    assert all(torch.equal(out, full(spec)) for spec, out in zip(specs, outs, strict=True))
    assert not shared.any()
