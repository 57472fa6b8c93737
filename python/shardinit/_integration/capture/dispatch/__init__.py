"""The capture's dispatch: every torch call under a capture meets it.

Above the trace. :mod:`.mode` is the ``TorchFunctionMode`` that sends each call to its
op family's handlers; :mod:`.families` registers each family once (its names, route and
handlers); :mod:`.targets` holds the writes into followed tensors and :mod:`.handlers`
the rest, each typed against :class:`.calls.Mode`; :mod:`.writes` is the component the
writes share, :mod:`.backstop` the ``TorchDispatchMode`` below the mode that refuses
every write to a parameter no route followed, and :mod:`.metaruns` the meta runs it
keeps. Its face is the mode.
"""

from .mode import CaptureMode, _routing

__all__ = ["CaptureMode", "routing"]

#: What the dispatch asks of a torch function at every call, found once per function:
#: its name, its family and whether it runs as it is wherever it is called (the mode's
#: own ``_routing``; the recording asks the last before the mode's routing).
routing = _routing
