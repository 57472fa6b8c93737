"""The one way to say "cannot" below the capture's edge: :class:`Cannot`.

A function that cannot give what it was asked for (the box of a view that is no box, the
values of an operand capture did not follow, a table past the cap) raises
``Cannot(reason)``. Only the capture's edge turns it into the user-facing refusal
(``RecordStore.refusing``: an ``UnsupportedInitOpError`` naming the tensor, the operation
and the caller's line); a caller that can go on without the value (a temporary whose
values become opaque, another route for a copy) keeps the reason instead.

An element value that cannot be computed is an IR node, :class:`~shardinit._program.nodes.Bad`,
not a raise: expressions are built before anyone knows whether they are written, and a
value that is never written refuses nothing (as eager torch computes it harmlessly).
"""

from __future__ import annotations

import sys

__all__ = ["Cannot", "too_deep"]


class Cannot(Exception):  # a reason, kept or refused: not an error of the caller
    """Why a value or a region cannot be had (``reason``, a phrase a refusal ends with)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def too_deep() -> str:
    """Why a value whose expression nests past Python's recursion limit is refused,
    wherever it is folded or compiled (capture, a constructor's buffer, the fill)."""
    return (
        "the capture's expression of these values nests deeper than Python's recursion "
        f"limit ({sys.getrecursionlimit()}), a limit of shardinit's capture, not of "
        "torch or the init code (a tensor written in many separate pieces, such as "
        "every other column of a table, reads every piece)"
    )
