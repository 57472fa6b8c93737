"""The capture's dispatch: every torch call under a capture meets it.

Above the trace. :mod:`.mode` is the ``TorchFunctionMode`` that routes each call to
its handler, :mod:`.writes` the writes into followed tensors, :mod:`.backstop` the
``TorchDispatchMode`` below it that refuses every write to a parameter no route
followed, and :mod:`.metaruns` the meta runs it keeps.
"""

from .mode import CaptureMode

__all__ = ["CaptureMode"]
