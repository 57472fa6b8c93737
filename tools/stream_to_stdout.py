#!/usr/bin/env python3
"""Write raw stream-v1 words (little-endian uint32) to stdout, for external batteries
such as ``dieharder -g 200``.

One key writes its words in order from ``--start``; several keys (``--key`` repeated)
are interleaved word by word (w0 of key 1, w0 of key 2, ..., w1 of key 1, ...), so any
correlation between the streams of adjacent names or seeds shows up as structure in the
combined stream.

Examples:
    python tools/stream_to_stdout.py --key 0:w | dieharder -g 200 -d 0
    python tools/stream_to_stdout.py --key 0:layers.0.w --key 0:layers.1.w --words 1e6 > x
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import shardinit

CHUNK_WORDS = 1 << 20  # 4 MiB per key per write


def parse_key(text: str) -> tuple[int, str]:
    seed, sep, name = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--key must be SEED:NAME, got {text!r}")
    return int(seed, 0), name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--key",
        type=parse_key,
        action="append",
        required=True,
        metavar="SEED:NAME",
        help="a stream; repeat to interleave several word by word",
    )
    parser.add_argument(
        "--start",
        type=lambda s: int(s, 0),
        default=0,
        help="first word position of each stream (default 0)",
    )
    parser.add_argument(
        "--words",
        type=lambda s: int(float(s)),
        default=0,
        help="words per stream to write, 0 (default) for until stdout closes",
    )
    args = parser.parse_args(argv)
    out = sys.stdout.buffer
    position = args.start
    left = args.words if args.words > 0 else None
    try:
        while left is None or left > 0:
            count = CHUNK_WORDS if left is None else min(CHUNK_WORDS, left)
            count = min(count, 2**64 - position)
            if count == 0:
                break  # the end of the 64-bit word space
            parts = [shardinit.stream_words(seed, name, position, count) for seed, name in args.key]
            words = np.stack(parts, axis=1).reshape(-1) if len(parts) > 1 else parts[0]
            out.write(words.astype("<u4", copy=False).tobytes())
            position += count
            if left is not None:
                left -= count
        out.flush()
    except BrokenPipeError:
        # The reader (dieharder) has read all it needs.
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
