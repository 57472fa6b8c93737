"""The one shape of a capture's refusals: who (the tensor or module), the operation, the
user's line, why, and what to do, as one message::

    capture_init: <who>: <op> at <file:line in function>: <why>. <what to do>

Every refusal of the capture is built here (:func:`refusal`), the record store's
(:meth:`.store.RecordStore.fail`) and the session's alike, so they read as one."""

from __future__ import annotations

from ....errors import UnsupportedInitOpError
from .frames import user_frame

__all__ = ["AFTER_INIT_FN", "HELP", "refusal"]

#: What to do about an operation the capture cannot record: what it records instead.
HELP = (
    "shardinit can replay random fills (torch.nn.init uniform_/normal_/trunc_normal_/"
    "kaiming_*/xavier_*, tensor normal_/uniform_), constant fills (zero_, fill_, zeros_, "
    "ones_, constant_, eye_, dirac_), mul_/div_ by a Python scalar on box regions, "
    "elementwise init programs (arange/linspace/eye/tensor/rand/randn sources, "
    "arithmetic, exp/log/sin/..., clamp, where, casts, in place too) and copies of "
    "temporaries computed that way; see docs/capturing-init.md"
)


#: Where a refusal found after init_fn returned took place: init code's line is gone.
AFTER_INIT_FN = "(found when init_fn returned)"


def refusal(
    who: str, op: str, why: str, todo: str, where: str | None = None
) -> UnsupportedInitOpError:
    """The refusal of ``op`` on ``who``.

    Args:
        who: the tensor or module refused (``parameter 'weight'``, a track's label).
        op: the operation, as init code wrote it (``normal_``, ``init code adds a
            module``).
        why: why the capture cannot record it (a clause, no final stop).
        todo: what to do instead (a sentence).
        where: where init code did it (``at file:line in function``); by default the
            user's line calling now (:func:`.frames.user_frame`).

    Returns:
        The error, for the caller to raise (and keep, where it is the first).

    Example:
        ``refusal("parameter 'w'", "sort", "it reads the values", HELP)`` reads
        ``capture_init: parameter 'w': sort at model.py:12 in init: it reads the
        values. shardinit can replay ...``
    """
    where = f"at {user_frame()}" if where is None else where
    return UnsupportedInitOpError(f"capture_init: {who}: {op} {where}: {why}. {todo}")
