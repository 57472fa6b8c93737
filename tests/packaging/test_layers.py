"""The floors of python/shardinit hold (docs/ARCHITECTURE.md): init programs and their
one writer (``shardinit._program``) sit between the fill dispatch and the integrations
and import nothing above them, and the integrations that write values do it through
``_program``, never through the capture of init code, which only produces programs.
The capture itself is four wings (``session`` > ``dispatch`` > ``trace`` > ``ops``): a
wing imports only the wings below it, and only through their faces (the names their
``__init__`` re-exports), never their modules. Read from the import graph (``ast``), as
the import-cycle test reads it."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from test_import_cycles import PACKAGE, Graph, import_graph, module_names

PROGRAM = "shardinit._program"
CAPTURE = "shardinit._integration.capture"
#: Modules the program floor may not reach, directly or through another module.
ABOVE_PROGRAM = ("shardinit._integration", "shardinit.shard", "shardinit.cli")
#: The writers' clients that never import the capture.
NO_CAPTURE = (
    "shardinit._integration.targets",
    "shardinit._integration.zero3",
    "shardinit.cli.generate",
)
#: Clients that call the capture's entry points (its package face, never its modules)
#: and write through the program floor.
CAPTURE_FACE_ONLY = (
    "shardinit._integration.plan",
    "shardinit._integration.megatron",
    "shardinit._integration.checkpoint_plan",
)


#: The capture's wings, highest first: each imports only the wings after it.
WINGS = ("session", "dispatch", "trace", "ops")

#: The program floor's modules, bottom up: each imports only those before it (boxes and
#: their merged unions; the IR's nodes; affine index arithmetic; structure keys;
#: gathered tables; rewrites; integer exactness; where a strided view lies; then
#: actions, their compiler and the writer).
FLOOR_ORDER = (
    "cannot",
    "regions",
    "coverage",
    "nodes",
    "index",
    "keys",
    "tables",
    "rewrite",
    "exact",
    "selection",
    "actions",
    "compile",
    "writer",
)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def reachable(graph: Graph, start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_program_floor_imports_nothing_above_it() -> None:
    graph = import_graph(PACKAGE)
    floor = [name for name in graph if _inside(name, PROGRAM)]
    assert {f"{PROGRAM}.{name}" for name in FLOOR_ORDER} == set(floor) - {PROGRAM}
    for module in floor:
        above = sorted(m for m in reachable(graph, module) if m.startswith(ABOVE_PROGRAM))
        assert not above, f"{module} reaches {above}"


def floor_climbs(graph: Graph) -> list[str]:
    """Imports inside the program floor that go up :data:`FLOOR_ORDER` (or sideways)."""
    rank = {f"{PROGRAM}.{name}": place for place, name in enumerate(FLOOR_ORDER)}
    return [
        f"{module} imports {target}"
        for module, place in rank.items()
        for target in sorted(graph.get(module, ()))
        if target in rank and rank[target] >= place
    ]


def test_the_program_floor_runs_bottom_up() -> None:
    assert not floor_climbs(import_graph(PACKAGE))


def test_a_climb_inside_the_floor_is_found() -> None:
    """The negative control: the IR's nodes importing the rewrites is a climb."""
    graph = {f"{PROGRAM}.nodes": {f"{PROGRAM}.rewrite"}, f"{PROGRAM}.rewrite": set[str]()}
    assert floor_climbs(graph) == [f"{PROGRAM}.nodes imports {PROGRAM}.rewrite"]


def test_the_capture_evaluates_on_the_floor_not_through_the_public_api() -> None:
    """The capture computes values it needs at once (an index's positions) with the
    floor's evaluator, never through ``shardinit.shard``'s public writer."""
    graph = import_graph(PACKAGE)
    capture = [name for name in graph if _inside(name, CAPTURE)]
    assert capture
    for module in capture:
        assert "shardinit.shard" not in reachable(graph, module), module


def test_the_writers_clients_write_through_the_program_floor() -> None:
    graph = import_graph(PACKAGE)
    for client in NO_CAPTURE:
        assert any(_inside(m, PROGRAM) for m in graph[client]), client
        captured = sorted(m for m in reachable(graph, client) if _inside(m, CAPTURE))
        assert not captured, f"{client} reaches the capture: {captured}"
    for client in CAPTURE_FACE_ONLY:
        assert any(_inside(m, PROGRAM) for m in graph[client]), client
        inner = sorted(m for m in graph[client] if m.startswith(CAPTURE + "."))
        assert not inner, f"{client} imports the capture's modules {inner}"


def test_a_climb_from_the_program_floor_is_found(tmp_path: Path) -> None:
    """The negative control: a function-level import of the integrations is a climb."""
    package = tmp_path / "shardinit"
    (package / "_program").mkdir(parents=True)
    (package / "_integration").mkdir()
    for init in (package, package / "_program", package / "_integration"):
        (init / "__init__.py").write_text("")
    (package / "_program" / "writer.py").write_text("from ..init import x\n")
    (package / "init.py").write_text("def f():\n    from ._integration import plan\n")
    (package / "_integration" / "plan.py").write_text("")
    graph = import_graph(package)
    assert "shardinit._integration.plan" in reachable(graph, "shardinit._program.writer")


def wing_of(module: str, capture: str = CAPTURE) -> int | None:
    """The rank of ``module``'s wing in :data:`WINGS` (0 the highest), or None outside
    the wings (the capture's own face, or no capture module)."""
    for rank, wing in enumerate(WINGS):
        if _inside(module, f"{capture}.{wing}"):
            return rank
    return None


def upward_imports(graph: Graph, capture: str = CAPTURE) -> list[str]:
    """``a -> b`` for every import of a capture module ``a`` from a higher wing ``b``, and
    of a module outside the capture's wings by a wing (the capture's face excepted)."""
    found = []
    for module, targets in sorted(graph.items()):
        rank = wing_of(module, capture)
        if rank is None:
            continue
        for target in sorted(targets):
            other = wing_of(target, capture)
            if other is not None and other < rank:
                found.append(f"{module} -> {target}")
    return found


def through_faces(root: Path, capture: str = CAPTURE) -> list[str]:
    """``module: from X import ...`` for every import of one wing from another that names
    the other wing's modules rather than its face (its package)."""
    found = []
    for name, (path, is_package) in module_names(root).items():
        rank = wing_of(name, capture)
        if rank is None:
            continue
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = here[: len(here) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
            other = wing_of(source, capture)
            if other is not None and other != rank and source != f"{capture}.{WINGS[other]}":
                found.append(f"{name}: from {source} import ...")
    return found


def test_the_capture_wings_import_one_way() -> None:
    graph = import_graph(PACKAGE)
    for wing in WINGS:
        assert f"{CAPTURE}.{wing}" in graph, wing
    # Each wing below the session is used by the wing above it: the order is real.
    for upper, lower in itertools.pairwise(WINGS):
        modules = [m for m in graph if _inside(m, f"{CAPTURE}.{upper}")]
        assert any(_inside(t, f"{CAPTURE}.{lower}") for m in modules for t in graph[m])
    assert not upward_imports(graph), "\n".join(upward_imports(graph))
    faces = through_faces(PACKAGE)
    assert not faces, "import a wing through its face:\n" + "\n".join(faces)
    # The capture's face is the session's; the program floor never reaches the capture.
    assert all(_inside(t, f"{CAPTURE}.session") for t in graph[CAPTURE]), graph[CAPTURE]
    for module in (m for m in graph if _inside(m, PROGRAM)):
        assert not any(_inside(t, CAPTURE) for t in reachable(graph, module)), module


def test_an_upward_import_between_wings_is_found(tmp_path: Path) -> None:
    """The negative control: the trace importing the dispatch (at function level), and a
    session module naming a trace module instead of the trace's face, are both found."""
    capture = tmp_path / "pkg" / "capture"
    for wing in WINGS:
        (capture / wing).mkdir(parents=True)
        (capture / wing / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (capture / "__init__.py").write_text("from .session import api\n")
    (capture / "session" / "api.py").write_text("from ..trace.store import Store\n")
    (capture / "dispatch" / "mode.py").write_text("from ..trace import Store\n")
    (capture / "trace" / "__init__.py").write_text("from .store import Store\n")
    (capture / "trace" / "store.py").write_text(
        "class Store:\n    def f(self):\n        from ..dispatch.mode import x\n"
    )
    graph = import_graph(tmp_path / "pkg")
    assert upward_imports(graph, "pkg.capture") == [
        "pkg.capture.trace.store -> pkg.capture.dispatch.mode"
    ]
    assert sorted(through_faces(tmp_path / "pkg", "pkg.capture")) == [
        "pkg.capture.session.api: from pkg.capture.trace.store import ...",
        "pkg.capture.trace.store: from pkg.capture.dispatch.mode import ...",
    ]


#: Spellings of torch's private APIs (a private module or a ``_``-prefixed attribute of a
#: torch object) that only ``_torch_compat`` may use.
PRIVATE_TORCH = (
    "torch._C",
    "torch.utils._",
    "torch.func._",
    "func import _random",
    "._make_subclass",
    "__deepcopy__.__code__",
)


def test_private_torch_apis_live_in_torch_compat() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_torch_compat.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if any(spelling in line for spelling in PRIVATE_TORCH)
    ]
    assert not found, "\n".join(found)
