"""DeferredFills (shardinit._fill): small streams handed to the batch are written by the
end of the ``with`` block, a batch starting as soon as it is full; a stream larger than
one chunk is not left to the batch but written at once."""

from __future__ import annotations

import torch

from shardinit import ParamSpec, _core, full, init
from shardinit._fill import DeferredFills, fill

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


def test_a_stream_larger_than_a_chunk_is_written_at_once() -> None:
    size = _core.CHUNK_ELEMENTS + 1
    spec, out = _spec("large", size), torch.empty(size)
    with DeferredFills() as deferred:
        fill(spec, ((0, size),), out, threads=2, chunk_bytes=CHUNK_BYTES, deferred=deferred)
        assert not deferred.fills and deferred._running is None
        assert torch.equal(out, full(spec))
