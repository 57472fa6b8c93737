"""Checks for rank code of the tests/zoo scenarios (Megatron-core, DeepSpeed).

``pytest.raises`` fails with pytest's ``Failed``, a ``BaseException`` that
:func:`materialize_workers.check` does not catch (the whole scenario would stop on the
first failed expectation); :func:`expect_refusal` fails with an ``AssertionError``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from shardinit import ShardInitError


@contextmanager
def expect_refusal(pattern: str, kind: type[Exception] = ShardInitError) -> Iterator[None]:
    """The block must raise a ``kind`` (a ShardInitError unless told) whose message
    matches ``pattern``."""
    try:
        yield
    except kind as error:
        if not re.search(pattern, str(error)):
            raise AssertionError(f"{kind.__name__} {error!s} does not match {pattern!r}") from error
        return
    raise AssertionError(f"no {kind.__name__} matching {pattern!r} was raised")
