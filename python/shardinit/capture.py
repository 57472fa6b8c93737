"""Compatibility path while the package moves (issue 13/14): the capture lives in
:mod:`shardinit._integration.capture`. Import from there; this module goes away."""

from ._integration.capture import *  # noqa: F403
from ._integration.capture import __all__  # noqa: F401
