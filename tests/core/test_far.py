"""Far offsets: shards at the far end of virtual tensors of 2^40, 2^62 and up to
2^64 - 1 elements agree with ``stream_words`` and the stream-format.md formulas, cost memory in
proportion to the shard only, and the largest shapes stream v1 addresses are accepted
(shapes past them: the bad-input battery)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from stream_reference import (
    assert_close_to_f64,
    bits_equal,
    normal_reference,
    runs_of_box,
    u24,
    uniform_reference,
)

import shardinit
from shardinit import init

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("log2_numel", [40, 62])
def test_last_shard_of_a_virtual_vector(dtype: torch.dtype, log2_numel: int) -> None:
    numel = 2**log2_numel
    world = numel // 1024  # shards of 1024 elements
    uniform = shardinit.ParamSpec("far.bias", (numel,), dtype, init.uniform(-2, 3), seed=11)
    shard = shardinit.init_shard(uniform, world - 1, world)
    assert shard.shape == (1024,)
    runs = [(numel - 1024, 1024)]
    assert bits_equal(shard, uniform_reference(uniform, runs, (1024,)))

    normal = shardinit.ParamSpec("far.bias", (numel,), dtype, init.normal(0.5, 2.0), seed=11)
    shard = shardinit.init_shard(normal, world - 1, world)
    assert_close_to_f64(shard, normal_reference(normal, runs), 2.0)
    # The very last element, alone, by its flat index.
    assert bits_equal(shardinit.init_flat(normal, numel - 1, numel), shard[-1:])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_far_corner_box_of_a_2_31_square(dtype: torch.dtype) -> None:
    side = 2**31  # 2^62 elements
    spec = shardinit.ParamSpec("far.weight", (side, side), dtype, init.uniform(0, 1), seed=5)
    box = ((side - 4, side), (side - 8, side))
    got = shardinit.init_box(spec, box)
    assert bits_equal(got, uniform_reference(spec, runs_of_box(spec.shape, box), (4, 8)))
    # The last rows as a shard of a world of 2^29 (4 rows each, 2^33 elements: too big to
    # allocate here), so compare its geometry, then fill a 4 x 8 corner of it via `out`.
    assert shardinit.box_of_shard(spec, 2**29 - 1, 2**29) == ((side - 4, side), (0, side))
    assert shardinit.box_of_shard(spec, side - 1, side, dim=1) == ((0, side), (side - 1, side))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_last_elements_of_the_largest_one_word_tensor(dtype: torch.dtype) -> None:
    numel = 2**64 - 1  # the most stream format v1 addresses: words 0 .. 2^64 - 2
    spec = shardinit.ParamSpec("max", (numel,), dtype, init.uniform(-1, 1), seed=2**64 - 1)
    got = shardinit.init_flat(spec, numel - 9, numel)
    assert bits_equal(got, uniform_reference(spec, [(numel - 9, 9)], (9,)))
    # Same through a 2-D view of the same count: (3, 5, 17, 257, 641, 65537, 6700417).
    factors = (3 * 5 * 17 * 257, 641 * 65537 * 6700417)
    assert factors[0] * factors[1] == numel
    spec2 = shardinit.ParamSpec("max", factors, dtype, init.uniform(-1, 1), seed=2**64 - 1)
    corner = shardinit.init_box(spec2, ((factors[0] - 1, factors[0]), (factors[1] - 9, factors[1])))
    assert bits_equal(corner.reshape(-1), got)


def test_last_element_of_the_largest_float64_tensor() -> None:
    numel = 2**63  # float64 element 2^63 - 1 uses the last two words, 2^64 - 2 and 2^64 - 1
    spec = shardinit.ParamSpec("max", (numel,), torch.float64, init.uniform(0, 1), seed=9)
    got = shardinit.init_flat(spec, numel - 3, numel)
    assert bits_equal(got, uniform_reference(spec, [(numel - 3, 3)], (3,)))
    last_words = shardinit.stream_words(9, "max", 2**64 - 2, 2)
    assert last_words.shape == (2,)


def test_golden_words_across_the_block_carry_as_elements() -> None:
    """stream-format.md §6: words 2^34-2 .. 2^34+1 of key (2^64-1, "layers.0.attention.wq.weight")
    cross the 2^32-block carry (test_stream.py checks the words); as float32
    uniform(0, 1) elements they are U24 of those golden words (hex from the stream
    format, not from the library)."""
    golden = np.array([0x30594D3F, 0xCDCB0EAB, 0x508C2186, 0x1973BE7F], dtype=np.uint32)
    name = "layers.0.attention.wq.weight"
    spec = shardinit.ParamSpec(name, (2**35,), torch.float32, init.uniform(0, 1), seed=2**64 - 1)
    got = shardinit.init_flat(spec, 2**34 - 2, 2**34 + 2)
    np.testing.assert_array_equal(got.numpy(), u24(golden).astype(np.float32))
    # And as a shard: world 2^33 of 2^35 elements gives shards of 4; rank 2^32 - 1 is
    # elements 2^34 - 4 .. 2^34, rank 2^32 starts at the carry.
    shard = shardinit.init_shard(spec, 2**32, 2**33)
    np.testing.assert_array_equal(shard[:2].numpy(), u24(golden[2:]).astype(np.float32))


def test_the_largest_shapes_are_accepted() -> None:
    assert shardinit.ParamSpec("big", (2**64 - 1,), torch.float32, seed=0).numel == 2**64 - 1
    assert shardinit.ParamSpec("big", (2**63,), torch.float64, seed=0).numel == 2**63
    assert shardinit.ParamSpec("big", (2**64 - 1, 0), torch.float64, seed=0).numel == 0


def test_far_shard_memory_is_proportional_to_the_shard() -> None:
    """A 1 MiB shard of a 2^62-element tensor raises the peak RSS of a fresh process by
    about 1 MiB: tolerance 32 MiB (allocator and thread-pool slack), against 2^64 bytes
    that anything proportional to the tensor would need. The peak (VmHWM) is reset to
    the current RSS after the warm-up (``/proc/self/clear_refs``, as test_concurrency.py's
    ``PEAK_SCRIPT``), so a cost paid on every call counts: ``ru_maxrss``, a high-water
    mark since the start, had already seen the warm-up's.

    Shown to fail (2026-12-04) with a 256 MiB temporary touched on every fill
    (``torch.ones(64 << 20)`` in ``shard._fill_box``): 256 MiB measured; the ``ru_maxrss``
    version of this test measured 80 KiB under that breakage and passed."""
    script = textwrap.dedent(
        """
        import torch, shardinit
        from shardinit import init

        def status_kib(key):
            for line in open("/proc/self/status"):
                if line.startswith(key + ":"):
                    return int(line.split()[1])
            raise KeyError(key)

        spec = shardinit.ParamSpec("far", (2**62,), torch.float32, init.normal(), seed=1)
        shardinit.init_shard(spec, 0, 2**44)   # warm up: pools, code pages
        open("/proc/self/clear_refs", "w").write("5")   # VmHWM := VmRSS (Linux >= 4.0)
        before = status_kib("VmHWM")
        shard = shardinit.init_shard(spec, 2**44 - 1, 2**44)   # 2^18 elements = 1 MiB
        after = status_kib("VmHWM")
        assert shard.numel() == 2**18, shard.shape
        assert bool(shard[-1] != 0)   # really written
        print((after - before) * 1024)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    grown = int(result.stdout.split()[-1])
    assert grown <= (1 << 20) + (32 << 20), grown
