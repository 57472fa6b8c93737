"""A writer holds at most its buffer: a tensor larger than it is generated in pieces
(safetensors: flat ranges; dcp: whole rows), which cover it once, in order, and give
exactly the values ``shardinit.full`` gives the whole tensor."""

from __future__ import annotations

import io
import itertools
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn

import shardinit
from shardinit._integration.checkpoint import _Reporter
from shardinit._integration.checkpoint_dcp import chunks
from shardinit._integration.checkpoint_hub import Saved
from shardinit._integration.checkpoint_output import SequentialFile
from shardinit._integration.checkpoint_plan import Entry, pieces, plan_entries
from shardinit._integration.checkpoint_safetensors import (
    _BackgroundWrites,
    _read_terms,
    _sub_boxes,
    piece_fills,
)
from shardinit._integration.fingerprint import flat_range_term, shard_term
from shardinit._integration.rules import check_rules

SHAPE = (700, 300)  # 840 000 bytes of float32
NORMAL = shardinit.init.normal(0.0, 0.02)


class One(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(SHAPE))


def _entry() -> Entry:
    """The plan's entry of ``w`` (by a rule), as save_seed_checkpoint plans it."""
    with torch.device("meta"):
        model = One()
    rules = check_rules({"w": NORMAL})
    (entry,) = plan_entries(model, seed=7, rules=rules, init_fn=None, buffer_init=None, who="t")
    return entry


def test_flat_pieces_stay_in_the_buffer_and_give_the_whole_tensor() -> None:
    entry = _entry()
    buffer = torch.empty(100_000, dtype=torch.uint8)
    written = torch.empty(math.prod(SHAPE))
    ranges = []
    for piece in pieces(entry, buffer, buffer.numel(), shardinit.shard.writer()):
        assert piece.out.numel() * 4 <= buffer.numel()
        assert piece.out.data_ptr() == buffer.data_ptr()  # in the buffer, not beside it
        written[piece.start : piece.stop] = piece.out
        ranges.append((piece.start, piece.stop))
    assert ranges[0][0] == 0 and ranges[-1][1] == math.prod(SHAPE)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert len(ranges) == 9  # 210 000 elements, 25 000 a piece
    expected = shardinit.full(shardinit.ParamSpec("w", SHAPE, torch.float32, NORMAL, seed=7))
    assert torch.equal(written.view(SHAPE), expected)


def test_dcp_chunks_are_whole_rows_within_the_buffer() -> None:
    found = chunks([_entry()], 100_000)
    assert [(c.start_row, c.stop_row) for c in found][:2] == [(0, 83), (83, 166)]
    assert all(c.nbytes <= 100_000 for c in found)
    assert found[-1].stop_row == SHAPE[0] and found[-1].offsets == (664, 0)


def test_sub_boxes_cover_a_box_in_row_major_order_within_the_step() -> None:
    """The pieces of a saved tensor that is no flat range (safetensors' boxes): each of
    at most ``step`` elements (one at least), together every element once, in order."""
    for shape, step in [((4, 6), 5), ((4, 6), 6), ((4, 6), 13), ((3, 2, 5), 4), ((7,), 3),
                        ((2, 3), 1), ((2, 3), 100), ((), 4)]:  # fmt: skip
        flat = torch.arange(math.prod(shape)).reshape(shape)
        seen = []
        for box in _sub_boxes(shape, step):
            piece = flat[tuple(slice(a, b) for a, b in box)]
            assert 1 <= piece.numel() <= max(step, 1), (shape, step, box)
            seen += piece.flatten().tolist()
        assert seen == list(range(math.prod(shape))), (shape, step)


def test_a_failed_background_write_is_raised_at_the_end_unless_another_error_is(
    tmp_path: Path,
) -> None:
    """A write that fails after the last slot was asked for is raised when the writes
    end; an error already leaving the block is not replaced by it."""
    path = tmp_path / "file"
    output = SequentialFile(path)
    output.close()
    output.fd, output.direct_fd = os.open(path, os.O_RDONLY), None  # a write fails: EBADF
    slot = torch.zeros(8, dtype=torch.uint8)
    try:
        with pytest.raises(OSError, match="file"), _BackgroundWrites(output) as writes:
            writes.submit(writes.free_slot(), slot, 0, 4, "w", int)
        with (
            pytest.raises(KeyError, match="the block's own"),
            _BackgroundWrites(output) as writes,
        ):
            writes.submit(writes.free_slot(), slot, 0, 4, "w", int)
            raise KeyError("the block's own")
    finally:
        output.close()


def test_pieces_of_a_saved_box_give_its_values_in_order() -> None:
    """A saved tensor that is a box of its model tensor (no flat range: a slice of
    rows and columns, or those transposed) is written in pieces of at most the buffer,
    which together are the box's values in the saved order."""
    entry = _entry()
    expected = shardinit.full(shardinit.ParamSpec("w", SHAPE, torch.float32, NORMAL, seed=7))
    box = ((100, 130), (50, 90))
    for order, want in [(None, expected[100:130, 50:90]), ((1, 0), expected[100:130, 50:90].T)]:
        saved = Saved("w.part", tuple(want.shape), entry, box=box, order=order)
        buffer = torch.empty(4 * 25, dtype=torch.uint8)  # 25 elements: less than a row
        written, terms = [], 0
        for fill in piece_fills(saved, buffer.numel()):
            data, term = fill(buffer, shardinit.shard.writer())
            written.append(data.view(torch.float32).clone())
            terms += term()
        assert all(piece.numel() <= 25 for piece in written)
        assert torch.equal(torch.cat(written), want.flatten()), order
        # A resumed file's check reads the box back whole: the same fingerprint.
        stream = io.BytesIO(torch.cat(written).numpy().tobytes())
        read = sum(_read_terms(stream, saved, buffer))
        assert read % 2**64 == terms % 2**64, order


def test_a_progress_hook_sees_the_bytes_from_zero_to_the_total() -> None:
    calls: list[tuple[int, int]] = []
    with _Reporter(lambda done, total: calls.append((done, total)), 10, 0, 1) as advance:
        advance(4)
        advance(6)
    assert calls == [(0, 10), (4, 10), (10, 10)]


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.uint8]
)
def test_a_pieces_term_is_the_fingerprints_term_of_its_range(dtype: torch.dtype) -> None:
    """The writer's term of a flat range (the core's hash, over the bytes written) is
    what the fingerprint's own numpy hash gives those elements at those indices, for
    every element width, at starts that are not multiples of anything, and the terms of
    a split add up to the whole's."""
    shape = (37, 53)
    generator = torch.Generator().manual_seed(5)
    if dtype == torch.uint8:
        values = torch.randint(0, 256, shape, dtype=dtype, generator=generator)
    else:
        values = torch.randn(shape, generator=generator).to(dtype)
    flat = values.reshape(-1)
    whole = shard_term(values, shape, [[(0, 37)], [(0, 53)]])
    total = 0
    for first, last in [(0, 1), (1, 999), (999, 1960), (1960, flat.numel())]:
        term = flat_range_term(flat[first:last], first)
        rows = shard_term(
            flat[first:last].reshape(1, -1), (1, flat.numel()), [[(0, 1)], [(first, last)]]
        )
        assert term == rows, (first, last)
        total += term
    assert total % 2**64 == whole
    assert flat_range_term(flat[:0], 3) == 0


def test_a_pieces_term_changes_with_one_bit_and_with_its_start() -> None:
    values = torch.zeros(1000, dtype=torch.bfloat16)
    base = flat_range_term(values, 0)
    flipped = values.clone()
    flipped.view(torch.int16)[999] ^= 1  # the last element's lowest bit
    assert flat_range_term(flipped, 0) != base
    assert flat_range_term(values, 1) != base
