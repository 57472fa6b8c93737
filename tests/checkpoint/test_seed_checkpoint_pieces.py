"""A writer holds at most its buffer: a tensor larger than it is generated in pieces
(safetensors: flat ranges; dcp: whole rows), which cover it once, in order, and give
exactly the values ``shardinit.full`` gives the whole tensor."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

import shardinit
from shardinit._integration.checkpoint_dcp import chunks
from shardinit._integration.checkpoint_plan import Entry, pieces, plan_entries
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
