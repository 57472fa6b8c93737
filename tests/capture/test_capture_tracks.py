"""A followed tensor answers whether a region is written from the unions of its recorded
operations' boxes, kept and extended as operations are appended: when the store drops
them all (the values are gone) and records others, or the tensor changes rank, the
unions are those of the operations it holds now, never the ones kept from before."""

from __future__ import annotations

import torch

from shardinit._integration.capture.trace.tracks import Track
from shardinit._program.actions import CapturedOp, Opaque


def _write(track: Track, *box: tuple[int, int]) -> None:
    track.ops.append(CapturedOp(tuple(box), Opaque("a test's write"), "fill_", "here:1"))


def test_the_written_region_is_that_of_the_operations_held_now() -> None:
    track = Track("temp", torch.empty(4, 6), "a temporary")
    _write(track, (0, 4), (0, 6))
    assert track.written(((0, 4), (0, 6))) and track.touched(((3, 4), (5, 6)))
    track.ops.clear()  # the store forgets them: the values are gone
    assert not track.written(((0, 1), (0, 1))) and not track.touched(((0, 4), (0, 6)))
    _write(track, (0, 2), (0, 6))
    _write(track, (2, 3), (0, 6))
    assert track.written(((0, 3), (0, 6)))
    track.ops.clear()
    _write(track, (0, 1), (0, 6))  # as many operations as before the next question
    _write(track, (1, 2), (0, 3))
    assert not track.written(((0, 3), (0, 6))) and track.written(((1, 2), (0, 3)))
