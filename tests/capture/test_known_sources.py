"""The known constructors and torch's resets recorded without running
(capture/session/knownmodules.py, knownresets.py) state what torch's code does; they
are taken only for the source they were checked against (``_torch_compat.
source_as_checked``). Another torch's method is followed as it runs."""

from __future__ import annotations

import inspect
import textwrap

import pytest
from torch import nn

from shardinit import _torch_compat
from shardinit._integration.capture.session import knownmodules, knownresets


@pytest.mark.parametrize("qualname", sorted(_torch_compat._CHECKED_SOURCES))
def test_the_installed_torchs_methods_are_the_checked_ones(qualname: str) -> None:
    # Fails the day torch changes one: read the new source, check the shortcut's
    # statement of it (the test files of knownmodules/knownresets), update the digest.
    module, owner, name = qualname.rsplit(".", 2)
    method = getattr(getattr(__import__(module, fromlist=[owner]), owner), name)
    assert _torch_compat.source_as_checked(method), qualname


def test_a_changed_source_is_not_as_checked() -> None:
    def reset_parameters(self: nn.Module) -> None:  # a stand-in of another torch's method
        pass

    reset_parameters.__qualname__ = "Linear.reset_parameters"
    reset_parameters.__module__ = "torch.nn.modules.linear"
    assert not _torch_compat.source_as_checked(reset_parameters)
    text = textwrap.dedent(inspect.getsource(nn.Linear.reset_parameters))
    assert "math.sqrt(5)" in text  # the statement knownresets makes of torch's


def test_the_shortcuts_stand_down_for_another_source(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every source "changed": no entry is installed, nothing is recorded without running.
    monkeypatch.setattr(_torch_compat, "_CHECKED_SOURCES", {})
    _torch_compat.source_as_checked.cache_clear()
    try:
        before = (nn.Linear.__init__, knownmodules._NormBase.__init__)
        undo = knownmodules.install_known_constructors(None, ())  # type: ignore[arg-type]
        assert (nn.Linear.__init__, knownmodules._NormBase.__init__) == before
        undo()
        knownresets._sites.cache_clear()
        assert [knownresets._sites(m) for m in knownresets._TORCHS] == [None, None]
    finally:
        monkeypatch.undo()  # before the caches are read again: torch's sources as checked
        _torch_compat.source_as_checked.cache_clear()
        knownresets._sites.cache_clear()
    assert all(knownresets._sites(m) for m in knownresets._TORCHS)  # torch's, as checked
