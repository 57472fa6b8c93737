"""python/shardinit has no import cycle: the graph of every import between its modules
(module level, function level and ``TYPE_CHECKING``, read with ``ast``) is acyclic, so
each layer depends only on the layers below it (docs/ARCHITECTURE.md): the spec-level
API, then the one fill dispatch, then the backends; a backend never imports back up.

An edge ``a -> b`` means ``a`` names ``b`` in an import: ``from .x import y`` is an edge
to ``x.y`` when that is a module, else to ``x``. A package's ``__init__`` being run first
is not an edge (every module would then depend on ``shardinit``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "shardinit"

Graph = dict[str, set[str]]


def module_names(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (its file, whether it is a package's ``__init__``)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        names[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return names


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def imported(node: ast.AST, here: list[str], known: set[str]) -> set[str]:
    """The modules of ``known`` an import statement names (``here``: the importing
    module's package, as parts)."""
    if isinstance(node, ast.Import):
        # ``import a.b.c``: the deepest of a.b.c, a.b that is a module of the package.
        names = [max((p for p in _prefixes(a.name) if p in known), default="") for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = here[: len(here) - node.level + 1] if node.level else []
        source = ".".join([*base, *([node.module] if node.module else [])])
        names = []
        for alias in node.names:
            # ``from x import y``: the module x.y, or else a name defined in x.
            module = f"{source}.{alias.name}"
            names.append(module if module in known else source)
    else:
        return set()
    return {name for name in names if name in known}


def import_graph(root: Path) -> Graph:
    """Module -> the package's modules it imports anywhere in its source."""
    modules = module_names(root)
    known = set(modules) | {f"{root.name}._core"}  # the compiled extension
    graph: Graph = {}
    for name, (path, is_package) in modules.items():
        here = name.split(".") if is_package else name.split(".")[:-1]
        tree = ast.parse(path.read_text(), str(path))
        edges = set().union(*(imported(node, here, known) for node in ast.walk(tree)))
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle of ``graph`` as a path that starts and ends at the same module."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 40 and "shardinit._fill" in graph["shardinit.shard"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_is_found_and_printed(tmp_path: Path) -> None:
    """The negative control: a function-level import back up closes a cycle."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "api.py").write_text("from .sub import backend\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "backend.py").write_text("def f():\n    from ..api import g\n")
    graph = import_graph(package)
    assert graph["pkg.api"] == {"pkg.sub.backend"}
    assert find_cycle(graph) == ["pkg.api", "pkg.sub.backend", "pkg.api"]
