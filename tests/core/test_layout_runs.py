"""The index runs of a shard (shardinit._layout): a chunk of runs is torch.chunk of the
indices they spell, a mesh dim's split applies to its tensor dim only, and the local
boxes start where the runs before them end."""

from __future__ import annotations

import torch

from shardinit._layout import LocalBox, Split, _chunk_runs, layout_runs, local_boxes


def _indices(runs: list[tuple[int, int]]) -> list[int]:
    return [i for start, stop in runs for i in range(start, stop)]


def test_a_chunk_of_runs_is_torch_chunk_of_their_indices() -> None:
    for runs in ([(2, 5), (10, 13)], [(0, 1), (3, 7), (9, 10), (20, 22)], [(5, 6)]):
        indices = torch.tensor(_indices(runs))
        for chunks in range(1, 5):
            expected = [c.tolist() for c in torch.chunk(indices, chunks)]
            expected += [[]] * (chunks - len(expected))
            got = [_indices(_chunk_runs(runs, chunks, index)) for index in range(chunks)]
            assert got == expected, (runs, chunks)


def test_layout_runs_split_the_sharded_dim_and_keep_the_replicated() -> None:
    shape, mesh = (4, 6), (2, 3)
    assert layout_runs(shape, mesh, (1, 2), [Split(0), Split()]) == [[(2, 4)], [(0, 6)]]
    assert layout_runs(shape, mesh, (1, 2), [Split(), Split(1)]) == [[(0, 4)], [(4, 6)]]


def test_local_boxes_start_where_the_runs_before_them_end() -> None:
    assert local_boxes([[(0, 2), (5, 6)], [(1, 4)]]) == [
        LocalBox(global_box=((0, 2), (1, 4)), local_start=(0, 0)),
        LocalBox(global_box=((5, 6), (1, 4)), local_start=(2, 0)),
    ]


def test_a_split_reads_as_torchs_placement() -> None:
    assert [str(s) for s in (Split(), Split(1), Split(0, 1), Split(0, 2))] == [
        "Replicate()", "Shard(dim=1)", "Shard(dim=0)", "_StridedShard(dim=0, sf=2)",
    ]  # fmt: skip
