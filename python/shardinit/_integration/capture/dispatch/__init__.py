"""The capture's dispatch: every torch call under a capture meets it.

Above the trace. :mod:`.mode` is the ``TorchFunctionMode`` that sends each call to its
op family's handlers; :mod:`.families` registers each family once (its names, route and
handlers); :mod:`.targets` holds the writes into followed tensors and :mod:`.handlers`
the rest, each typed against :class:`.calls.Mode`; :mod:`.writes` is the component the
writes share, :mod:`.backstop` the ``TorchDispatchMode`` below the mode that refuses
every write to a parameter no route followed, and :mod:`.metaruns` the meta runs it
keeps. Its face is the mode.
"""

from typing import Any

from .mode import CaptureMode, _routing

__all__ = ["CaptureMode", "runs_as_is"]


def runs_as_is(func: Any) -> bool:
    """Whether the capture lets ``func`` through as it is, wherever it is called (the
    mode's own answer, ``mode._routing``): the recording asks it before the routing."""
    return _routing(func)[2]
