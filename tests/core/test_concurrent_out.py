"""The contract of ``out=``: concurrent writes to the same tensor are not allowed.

The GIL is released while the core writes ``out``, so other threads run meanwhile. A
second shardinit fill of memory that a running fill is writing raises ShardInitError
naming ``out``; fills of disjoint memory (other tensors, or disjoint parts of one) still
run concurrently.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import torch

import shardinit
from shardinit import init

#: Elements of the big fill: about a second single-threaded, so the second thread gets
#: many tries while it runs.
BIG = 1 << 24
JOIN_TIMEOUT_S = 120.0


@pytest.fixture(autouse=True)
def _restore_threads() -> Iterator[None]:
    yield
    shardinit.set_num_threads(None)


def test_a_second_fill_of_the_same_out_while_one_runs_raises() -> None:
    shardinit.set_num_threads(1)
    spec = shardinit.ParamSpec("contract.w", (BIG,), torch.float32, init.normal(), seed=5)
    out = torch.empty(BIG)
    errors: list[str] = []
    big_refused: list[str] = []

    def big_fill() -> None:
        # On a loaded machine the small fill below may claim the last element first:
        # then the big fill is the one refused, which shows the same contract.
        try:
            shardinit.init_flat(spec, 0, BIG, out=out)
        except shardinit.ShardInitError as error:
            big_refused.append(str(error))

    # Up to three attempts: a loaded machine may finish the big fill before the second
    # thread gets a try while it runs (the outcome asserted never depends on timing).
    for _attempt in range(3):
        big = threading.Thread(target=big_fill)
        big.start()
        while big.is_alive() and not errors:
            try:
                # Overlaps the big fill's last element only.
                shardinit.init_flat(spec, BIG - 1, BIG, out=out[BIG - 1 :])
            except shardinit.ShardInitError as error:
                errors.append(str(error))
        big.join(JOIN_TIMEOUT_S)
        assert not big.is_alive(), "deadlock"
        if errors or big_refused:
            break
    refusals = errors + big_refused
    assert refusals, "neither fill was refused while both ran"
    assert refusals[0].startswith("out overlaps the memory of another shardinit fill"), refusals
    assert "concurrent writes to the same tensor are not allowed" in refusals[0]
    if not big_refused:
        # The refused call wrote nothing wrong: the tensor is the whole parameter.
        assert torch.equal(out, shardinit.full(spec))
    # And the claim is released: the same out can be filled again.
    assert torch.equal(shardinit.init_flat(spec, 0, BIG, out=out), shardinit.full(spec))


def test_disjoint_parts_of_one_tensor_fill_concurrently() -> None:
    """Two threads fill the two halves of one tensor at once (adjacent, not
    overlapping): neither is refused, and together they are the whole parameter."""
    shardinit.set_num_threads(1)
    spec = shardinit.ParamSpec("contract.halves", (BIG,), torch.float32, init.uniform(), seed=6)
    out = torch.empty(BIG)
    half = BIG // 2
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def fill(start: int, stop: int) -> None:
        barrier.wait()
        try:
            shardinit.init_flat(spec, start, stop, out=out[start:stop])
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=fill, args=r) for r in [(0, half), (half, BIG)]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT_S)
        assert not thread.is_alive(), "deadlock"
    assert failures == []
    assert torch.equal(out, shardinit.full(spec))
