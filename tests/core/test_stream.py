"""Stream format v1 through the Python API: keys, raw words, golden values
(stream-format.md §1-2, §6)."""

from __future__ import annotations

import numpy as np
import pytest

import shardinit

# stream-format.md §6 golden values, computed independently of this project.
GOLDEN_KEY_W = 0x47A94443D83CCF19
GOLDEN_WORDS_W = [
    0x2BC9FB9E, 0xFACB47FE, 0x3673388E, 0xB56D6438,
    0x1330000A, 0x2D5A56BB, 0xAF195D98, 0xAD0FE342,
]  # fmt: skip
CARRY_NAME = "layers.0.attention.wq.weight"
CARRY_WORDS = [0x30594D3F, 0xCDCB0EAB, 0x508C2186, 0x1973BE7F]


def test_key_golden_values() -> None:
    assert shardinit.STREAM_FORMAT_VERSION == 1
    assert shardinit.key(0, "w") == GOLDEN_KEY_W
    assert shardinit.key(2**64 - 1, CARRY_NAME) == 0x6B59EAD909D7045B


def test_stream_words_golden_values() -> None:
    words = shardinit.stream_words(0, "w", 0, 8)
    assert words.dtype == np.uint32
    assert words.tolist() == GOLDEN_WORDS_W


def test_words_crossing_the_high_counter_carry() -> None:
    # Words 2^34-2 .. 2^34+1: blocks 2^32-1 and 2^32, the carry into counter word c1.
    words = shardinit.stream_words(2**64 - 1, CARRY_NAME, 2**34 - 2, 4)
    assert words.tolist() == CARRY_WORDS


@pytest.mark.parametrize("start", [0, 1, 2, 3, 4, 5, 31, 32, 33, 2**32 - 1, 2**34 - 3])
@pytest.mark.parametrize("count", [0, 1, 3, 4, 7, 40])
def test_stream_word_slices_equal_a_longer_call(start: int, count: int) -> None:
    base = max(0, start - 5)
    longer = shardinit.stream_words(7, "emb.weight", base, 100)
    part = shardinit.stream_words(7, "emb.weight", start, count)
    assert part.tolist() == longer[start - base : start - base + count].tolist()


def test_random123_known_answer_through_the_stream() -> None:
    # Random123 kat_vectors (philox4x32_10): counter 0, key 0 -> 6627e8d5 e169c58d
    # bc57ac4c 9b00dbd8. Block 0 of a key whose key64 is 0 is exactly that call; no
    # (seed, name) hashes to key 0, so go through the core's stream function directly.
    out = np.empty(4, dtype=np.uint32)
    shardinit._core.stream_words(0, 0, out)
    assert out.tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    # All-ones counter and key: block 2^64-1 has counter (ffffffff, ffffffff, 0, 0), so
    # this vector (c2 = c3 = ffffffff) is checked in the Rust unit tests instead; here
    # the last words of the 64-bit word space are reachable and distinct.
    tail = np.empty(4, dtype=np.uint32)
    shardinit._core.stream_words(2**64 - 1, 2**64 - 4, tail)
    assert len(set(tail.tolist())) == 4
