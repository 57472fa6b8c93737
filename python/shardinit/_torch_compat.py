"""Every private torch API shardinit uses, in one place, each with the torch version it
was checked against.

When torch changes one of these, this module is the only place to adapt; the tests of
the callers (materialize, fingerprint, FSDP1, capture) say whether it still holds.
"""

from __future__ import annotations
