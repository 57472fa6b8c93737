"""The torch release ``_torch_compat``'s private APIs were checked against is compared
with the running torch once, at import: another major.minor is a warning."""

from __future__ import annotations

import torch

from shardinit import _torch_compat
from shardinit._torch_compat import CHECKED_TORCH, unchecked_torch


def test_the_checked_release_and_its_patch_and_local_builds_pass() -> None:
    major, minor, _ = CHECKED_TORCH.split(".")
    for version in (CHECKED_TORCH, f"{major}.{minor}.7", f"{CHECKED_TORCH}+cu132"):
        assert unchecked_torch(version) is None


def test_another_release_is_named_with_the_checked_one() -> None:
    major, minor, _ = CHECKED_TORCH.split(".")
    newer = f"{major}.{int(minor) + 1}.0"
    message = unchecked_torch(newer)
    assert message is not None
    assert f"checked against torch {CHECKED_TORCH}, this is torch {newer}" in message


def test_the_running_torch_is_the_checked_one_here() -> None:
    # pytest turns warnings into errors: the import above would have failed otherwise.
    assert _torch_compat.unchecked_torch(torch.__version__) is None


def test_capture_translates_every_fill_a_zero3_build_skips() -> None:
    """One list of torch.nn.init's fills: what capture translates is what ZeRO-3's build
    context makes no-ops."""
    from shardinit._integration.capture.ops.translations import INIT_TRANSLATIONS
    from shardinit._torch_compat import NN_INIT_FILLS

    assert tuple(INIT_TRANSLATIONS) == NN_INIT_FILLS


def test_assign_parameter_runs_a_class_own_setattr() -> None:
    """The fast path of ``assign_parameter`` is only for classes that keep
    ``Module.__setattr__``: one that overrides it gets its own called."""
    from torch import nn

    calls: list[str] = []

    class Recording(nn.Linear):
        def __setattr__(self, name: str, value: object) -> None:
            calls.append(name)
            super().__setattr__(name, value)

    module = Recording(2, 2)
    calls.clear()
    new = nn.Parameter(torch.ones(2, 2))
    _torch_compat.assign_parameter(module, "weight", new)
    assert calls == ["weight"]
    assert module.weight is new
    plain = nn.Linear(2, 2)
    _torch_compat.assign_parameter(plain, "weight", new)
    assert plain.weight is new and plain._parameters["weight"] is new


def test_handed_to_mode_is_handle_torch_function_called_from_the_frame() -> None:
    """True only for a frame named ``handle_torch_function`` called straight from the
    function's own frame."""
    import sys

    def handle_torch_function(frame: object) -> bool:
        return _torch_compat.handed_to_mode(sys._getframe(), frame)  # type: ignore[arg-type]

    def other_name(frame: object) -> bool:
        return _torch_compat.handed_to_mode(sys._getframe(), frame)  # type: ignore[arg-type]

    def init_function() -> tuple[bool, bool, bool]:
        here = sys._getframe()
        return handle_torch_function(here), other_name(here), handle_torch_function(None)

    assert init_function() == (True, False, False)
