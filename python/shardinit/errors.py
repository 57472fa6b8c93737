"""Exceptions raised by shardinit.

``ShardInitError`` is a ``ValueError``: invalid values (out-of-range ranks, bad shapes,
bad initializer parameters, ``out`` tensors of the wrong shape). Wrong Python types
raise ``TypeError``. ``InternalError`` (a ``RuntimeError``) reports a bug instead of
crashing the interpreter.
"""

from ._core import InternalError, ShapeTooLargeError, ShardInitError

__all__ = ["InternalError", "ShapeTooLargeError", "ShardInitError"]
