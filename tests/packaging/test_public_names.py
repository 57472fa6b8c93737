"""The package's public names (issue 13): every name in ``shardinit.__all__`` resolves,
and no re-exported function shadows a submodule of the same name (``import
shardinit.materialize as m`` used to hand back the function, not its module); the names
that need torch load on first access (issue 24), and type checkers still see them."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

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


def _type_checking_imports() -> dict[str, str]:
    """What the ``if TYPE_CHECKING:`` block of ``shardinit/__init__.py`` imports: name ->
    module, relative as ``_LAZY`` writes it (a submodule: ``.name``)."""
    tree = ast.parse(Path(shardinit.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    names: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 1, ast.unparse(node)
        for alias in node.names:
            names[alias.name] = f".{node.module}" if node.module else f".{alias.name}"
    return names


def test_lazy_names_are_the_type_checking_imports() -> None:
    """Each lazy name is imported where type checkers are told it is; with the names
    bound at import (no torch), they are ``__all__``."""
    lazy = shardinit._LAZY
    assert _type_checking_imports() == lazy
    eager = {
        "STREAM_FORMAT_VERSION",
        "CudaBackendWarning",
        "InternalError",
        "ShapeTooLargeError",
        "ShardInitError",
        "UnsupportedInitOpError",
    }
    assert sorted(shardinit.__all__) == sorted(eager | set(lazy))
    assert set(shardinit.__all__) <= set(dir(shardinit))


def test_every_public_name_imports_in_a_fresh_interpreter() -> None:
    """``from shardinit import X`` for every public name, first thing in a process (where
    no other import has bound it yet), and the submodules as attributes."""
    script = (
        "import shardinit, sys\n"
        "assert 'torch' not in sys.modules\n"
        "for name in shardinit.__all__:\n"
        "    exec(f'from shardinit import {name}')\n"
        "from shardinit import *\n"
        "kinds = [type(shardinit.fingerprint), type(shardinit.materialize), type(shardinit.init)]\n"
        "assert [k.__name__ for k in kinds] == ['function', 'function', 'module'], kinds\n"
        "assert shardinit.presets is sys.modules['shardinit.presets']\n"
        "print(sorted(set(shardinit.__all__) - set(globals())))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_examples_import_only_the_public_api() -> None:
    """The examples are what users copy: they import shardinit and its public modules,
    never a private module or the CLI's scaffolding (``shardinit.cli``)."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    private = []
    for script in sorted(examples.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[0] == "shardinit" and any(p == "cli" or p.startswith("_") for p in parts):
                    private.append(f"{script.name}: {name}")
    assert not private, private
