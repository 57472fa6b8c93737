"""The Rust core (rust/core/src) has no module cycle: the graph of the paths each module
names (``use`` declarations and paths in code, tests included, through ``crate::``,
``super::``, ``self::`` and child modules) is acyclic, so each module depends only on the
modules below it (docs/ARCHITECTURE.md), as test_import_cycles.py checks for Python.

An edge ``a -> b`` means ``a`` names an item that lives in ``b``'s file: a path is
followed down through modules and through the ``use`` declarations that bind its names,
so ``crate::Error`` (re-exported by lib.rs) is an edge to ``crate::error``, not to the
crate root. A module's face is not an edge: declaring a child (``mod x;``) and
re-exporting its items (``pub use x::Item;``) say what the module offers, as a Python
package's ``__init__`` being run first does; a module's code naming a child's item is an
edge. Inline modules (``mod tests { ... }``) belong to their file. Comments and string
literals are ignored; ``pub(in path)`` is visibility, not a use."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from test_import_cycles import Graph, find_cycle

CORE_SOURCE = Path(__file__).resolve().parents[2] / "rust" / "core" / "src"

Module = tuple[str, ...]  # the module path below the crate root, ("math", "lanes")
Scope = tuple[Module, Module]  # a file's module and the inline modules around a point


@dataclass
class Source:
    """One file: its code without comments and literals, and what each scope declares."""

    code: str
    # Per scope: the child modules it declares and the names its ``use``s bind (a name ->
    # the path it stands for, and whether the ``use`` is a re-export of the scope's face).
    children: dict[Module, set[str]] = field(default_factory=dict)
    bindings: dict[Module, dict[str, list[str]]] = field(default_factory=dict)
    # (inline scope, path, whether it is a face re-export) for each path named.
    paths: list[tuple[Module, list[str], bool]] = field(default_factory=list)


def module_of(path: Path, root: Path) -> Module:
    parts = path.relative_to(root).with_suffix("").parts
    if parts in (("lib",), ("main",)):
        return ()
    return parts[:-1] if parts[-1] == "mod" else parts


def strip_comments_and_literals(text: str) -> str:
    """``text`` with comments, strings and char literals blanked (lifetimes kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                depth += text.startswith("/*", i) - text.startswith("*/", i)
                i += 2 if text.startswith(("/*", "*/"), i) else 1
        elif raw := re.match(r'b?r(#*)"', text[i:]):
            end = text.find('"' + raw.group(1), i + raw.end())
            out.append('""')
            i = end + 1 + len(raw.group(1))
        elif text[i] == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif char := re.match(r"'(\\.[^']*|[^\\'])'", text[i:]):
            out.append("' '")
            i += char.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def use_tree(tree: str, prefix: list[str]) -> list[tuple[list[str], str | None]]:
    """The paths of a ``use`` tree, each with the name it binds (None for a glob)."""
    tree = tree.strip()
    if "{" not in tree:
        path, _, alias = tree.partition(" as ")
        segments = [*prefix, *[s.strip() for s in path.split("::") if s.strip()]]
        if segments[-1] == "*":
            return [(segments[:-1], None)]
        if segments[-1] == "self":
            segments = segments[:-1]
        return [(segments, alias.strip() or segments[-1])]
    head, _, rest = tree.partition("{")
    prefix = [*prefix, *[s.strip() for s in head.split("::") if s.strip()]]
    inner, parts, depth, start = rest[: rest.rindex("}")], [], 0, 0
    for k, ch in enumerate(inner):
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    return [leaf for part in parts if part.strip() for leaf in use_tree(part, prefix)]


USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*([{;])")
CODE_PATH = re.compile(r"(?<![\w:])(\w+)((?:::\w+)+)")


def read_source(text: str) -> Source:
    """The scopes, children, bindings and paths of one file."""
    code = re.sub(r"pub\s*\(\s*in\s+[\w:]+\s*\)", "pub", strip_comments_and_literals(text))
    source = Source(code)
    opens: dict[int, str] = {m.start(2): m.group(1) for m in INLINE_MOD.finditer(code)}
    starts = {m.start(): m for m in USE.finditer(code)}
    starts |= {m.start(): m for m in CODE_PATH.finditer(code)}
    scope: list[str] = []
    closes: list[int] = []  # the brace depth at which each inline module ends
    depth, skip_until = 0, 0
    for i, ch in enumerate(code):
        if i in opens and code[i] == ";":
            source.children.setdefault(tuple(scope), set()).add(opens[i])
        if ch == "{":
            if i in opens:
                source.children.setdefault(tuple(scope), set()).add(opens[i])
                scope.append(opens[i])
                closes.append(depth)
            depth += 1
        elif ch == "}":
            depth -= 1
            if closes and closes[-1] == depth:
                closes.pop()
                scope.pop()
        if i < skip_until or i not in starts:
            continue
        match = starts[i]
        skip_until = match.end()
        here = tuple(scope)
        if match.re is USE:
            face = match.group(1) is not None
            for path, name in use_tree(match.group(2), []):
                source.paths.append((here, path, face))
                if name is not None:
                    source.bindings.setdefault(here, {})[name] = path
        else:
            path = [match.group(1), *match.group(2).split("::")[1:]]
            source.paths.append((here, path, False))
    return source


def resolve(
    sources: dict[Module, Source], start: Scope, path: list[str], seen: frozenset[str] = frozenset()
) -> Module | None:
    """The file (module) of the item ``path`` names from ``start``; None if external."""
    file, inline = start
    rest = list(path)
    if rest[0] == "crate":
        file, inline, rest = (), (), rest[1:]
    elif rest[0] in ("super", "self"):
        while rest and rest[0] in ("super", "self"):
            if rest.pop(0) == "super":
                file, inline = (file, inline[:-1]) if inline else (file[:-1], ())
    elif rest[0] not in sources[file].children.get(inline, set()):
        bound = sources[file].bindings.get(inline, {}).get(rest[0])
        key = f"{file}{inline}{rest[0]}"
        if bound is None or key in seen or bound == rest[:1]:
            return None  # std, a dependency, a local name or a prelude type
        return resolve(sources, (file, inline), [*bound, *rest[1:]], seen | {key})
    while rest:
        name = rest.pop(0)
        bound = sources[file].bindings.get(inline, {}).get(name)
        key = f"{file}{inline}{name}"
        # A last segment that is both a child module and a bound name is the bound item
        # (`math::erfinv(x)` is the function, not the module of that name).
        if rest or bound is None or key in seen:
            bound = None
        if bound is None and name in sources[file].children.get(inline, set()):
            if (*file, *inline, name) in sources and not inline:
                file = (*file, name)
            else:
                inline = (*inline, name)
            continue
        bound = sources[file].bindings.get(inline, {}).get(name)
        if bound is not None and key not in seen:
            return resolve(sources, (file, inline), [*bound, *rest], seen | {key})
        break
    return file


def name(module: Module) -> str:
    return "::".join(("crate", *module))


def module_graph(root: Path) -> Graph:
    """Module -> the crate's modules whose items it names (faces left out)."""
    sources = {module_of(p, root): read_source(p.read_text()) for p in sorted(root.rglob("*.rs"))}
    graph: Graph = {}
    for module, source in sources.items():
        edges = set()
        for inline, path, face in source.paths:
            if face:
                continue
            target = resolve(sources, (module, inline), path)
            if target is not None and target != module:
                edges.add(name(target))
        graph[name(module)] = edges
    return graph


def test_the_rust_core_has_no_module_cycle() -> None:
    graph = module_graph(CORE_SOURCE)
    # The graph is read: the batch layer names programs (re-exported by the program
    # module's face from its builder) and the stream fills, and `crate::Error`
    # (re-exported by lib.rs) is the error module's.
    assert len(graph) > 30
    assert {"crate::program::builder", "crate::fill", "crate::error"} <= graph["crate::batch"]
    assert "crate" not in set().union(*graph.values())
    cycle = find_cycle(graph)
    assert cycle is None, "module cycle: " + " -> ".join(cycle or [])


def test_a_module_cycle_is_found_and_printed(tmp_path: Path) -> None:
    """The negative control: a test module naming a module above its own closes a cycle,
    through a path in code, a ``super::super`` and a re-export of the crate root."""
    (tmp_path / "low").mkdir()
    (tmp_path / "lib.rs").write_text(
        "mod error;\nmod high;\nmod low;\npub use error::Error;\npub use high::Api;\n"
    )
    (tmp_path / "error.rs").write_text("pub enum Error {}\n")
    (tmp_path / "high.rs").write_text(
        "use crate::low::deep::run; // crate::error in a comment\npub struct Api;\n"
    )
    (tmp_path / "low.rs").write_text("pub mod deep;\nuse crate::Error;\n")
    (tmp_path / "low" / "deep.rs").write_text(
        'pub fn run() -> &\'static str { "crate::high" }\n'
        "#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {\n"
        "        let _ = super::super::super::Api;\n    }\n}\n"
    )
    graph = module_graph(tmp_path)
    assert graph == {
        "crate": set(),
        "crate::error": set(),
        "crate::high": {"crate::low::deep"},
        "crate::low": {"crate::error"},
        "crate::low::deep": {"crate::high"},
    }
    assert find_cycle(graph) == ["crate::high", "crate::low::deep", "crate::high"]
    # Without the test module's path, the graph has no cycle.
    (tmp_path / "low" / "deep.rs").write_text("pub fn run() {}\n")
    assert find_cycle(module_graph(tmp_path)) is None
