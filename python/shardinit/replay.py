"""Compatibility path while the package moves (issue 13/14): replay lives in
:mod:`shardinit._integration.capture.replay`. Import from there; this module goes away."""

from ._integration.capture.replay import *  # noqa: F403
from ._integration.capture.replay import write_buffers

#: The old name: buffer values are now computed during the capture and written here.
recompute_buffers = write_buffers
