"""The package's public names (issue 13): every name in ``shardinit.__all__`` resolves,
and no re-exported function shadows a submodule of the same name (``import
shardinit.materialize as m`` used to hand back the function, not its module)."""

from __future__ import annotations

import importlib.util
import inspect

import shardinit


def test_every_public_name_resolves() -> None:
    missing = [name for name in shardinit.__all__ if not hasattr(shardinit, name)]
    assert not missing


def test_no_public_function_shadows_a_submodule() -> None:
    functions = [name for name in shardinit.__all__ if inspect.isfunction(getattr(shardinit, name))]
    assert {"materialize", "fingerprint", "capture_init"} <= set(functions)
    shadowed = [name for name in functions if importlib.util.find_spec(f"shardinit.{name}")]
    assert not shadowed, f"functions that hide a module of the same name: {shadowed}"


def test_integration_modules_export_only_what_the_package_re_exports() -> None:
    from shardinit._integration import fingerprint, fsdp1, materialize

    for module in (fingerprint, fsdp1, materialize):
        assert set(module.__all__) <= set(shardinit.__all__), module.__name__
