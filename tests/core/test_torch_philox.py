"""torch's own stateless Philox as a second witness of stream v1 (stream-format.md §2).

torch >= 2.15 ships a stateless Philox4x32-10 (``torch.func._random``, private; reached
only through ``shardinit._torch_compat``). Its key ``(seed, offset)`` is Philox's key
``(seed mod 2^32, seed >> 32)`` and its block counter starts at ``offset`` (blocks of four
words), which is v1's layout with ``seed = key64``: so v1's word ``j`` is word ``j & 3``
of torch's block ``j >> 2``. The raw words agree; the float maps do not (second test).
"""

from __future__ import annotations

import numpy as np
import pytest

import shardinit
from shardinit import _torch_compat

pytestmark = pytest.mark.skipif(
    _torch_compat.stateless_philox_missing() is not None,
    reason=f"no second witness: {_torch_compat.stateless_philox_missing()}",
)

#: (seed, name): small and huge seeds; "model.embed_tokens.weight" at seed 3 hashes to a
#: key64 with the top bit set (checked below), which a signed int64 would mangle.
KEYS = [(0, "w"), (2**64 - 1, "layers.0.attention.wq.weight"), (3, "model.embed_tokens.weight")]
#: Word positions: block starts and mid-block starts, around word 2^32 (block 2^30),
#: around block 2^32 (the carry into the second counter word, word 2^34) and around
#: word 2^40 and block 2^40 (word 2^42).
WORD_STARTS = [0, 1, 6, 2**32 - 3, 2**32, 2**34 - 6, 2**34 + 1, 2**40 - 5, 2**42 - 7]


def torch_words(key64: int, start: int, count: int) -> np.ndarray:
    """Words ``[start, start + count)`` of torch's stream for seed ``key64``: torch starts
    at a block, so fetch from the block holding ``start`` and drop the words before it."""
    lead = start & 3
    words = _torch_compat.stateless_philox_words(key64, start >> 2, lead + count)
    return words.numpy()[lead:]


def test_some_key_has_the_top_bit_set() -> None:
    assert any(shardinit.key(seed, name) >= 2**63 for seed, name in KEYS)


@pytest.mark.parametrize(("seed", "name"), KEYS)
@pytest.mark.parametrize("start", WORD_STARTS)
def test_v1_words_are_torchs_stateless_philox(seed: int, name: str, start: int) -> None:
    count = 259  # many blocks, ending mid-block
    ours = shardinit.stream_words(seed, name, start, count)
    theirs = torch_words(shardinit.key(seed, name), start, count)
    assert theirs.dtype == np.uint32
    assert ours.tolist() == theirs.tolist()


def test_the_float_maps_differ_as_documented() -> None:
    # stream-format.md §2: torch's float32 uniform takes the LOW 24 bits of a word, v1's
    # U24 the high 24; torch's float64 uniform the low 53 bits of (w0 << 32 | w1), v1's
    # U52 the high 26 bits of each word plus a half. Same words, different floats.
    import torch

    key64 = shardinit.key(0, "w")
    words = shardinit.stream_words(0, "w", 0, 64).astype(np.uint64)
    f32 = _torch_compat.stateless_philox_uniform(key64, 0, 64, torch.float32).double().numpy()
    assert f32.tolist() == ((words & 0xFFFFFF).astype(np.float64) * 2.0**-24).tolist()
    assert f32.tolist() != ((words >> 8).astype(np.float64) * 2.0**-24).tolist()
    pairs = (words[0::2] << 32) | words[1::2]
    f64 = _torch_compat.stateless_philox_uniform(key64, 0, 32, torch.float64).numpy()
    assert f64.tolist() == ((pairs & (2**53 - 1)).astype(np.float64) * 2.0**-53).tolist()
