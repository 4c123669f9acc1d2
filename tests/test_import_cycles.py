"""No import circles in the core or in any plugin under plugins/ (docs/plugins.md, "No import circles").

Every module is parsed with :mod:`ast` and every import statement counts, wherever it sits: module level, inside a
function or method (a function-level import only postpones a circle to the first call; it does not break it), inside
``try``. Imports under ``if TYPE_CHECKING:`` are left out: they never execute, so they cannot close a circle at run
time (annotations stay strings under ``from __future__ import annotations``).

An edge ``a -> b`` means module ``a`` imports module ``b``: ``import p.q`` and ``from p import q`` (``q`` a submodule)
give ``p.q``; ``from p import name`` (``name`` not a submodule) gives ``p`` itself, whose ``__init__`` must run to hand
``name`` over. Importing a submodule also runs its parent packages' ``__init__``, but that is Python's package
machinery, not a dependency of ``a`` on the parent's body, so it makes no edge. Only modules inside the scanned
packages (``skyrl_core`` outside its cookiecutter template, and every ``plugins/*/skyrl_*``) are nodes.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

def package_roots(root: Path = ROOT) -> list[Path]:
    """The top-level packages to scan: ``skyrl_core`` and each plugin's ``skyrl_*`` package."""
    roots = [root / "skyrl_core"]
    for plugin in sorted((root / "plugins").iterdir()):
        roots += sorted(p.parent for p in plugin.glob("skyrl_*/__init__.py"))
    return roots


def module_files(roots: list[Path]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``roots`` (the cookiecutter template left out: its
    files are Jinja sources, not modules)."""
    modules = {}
    for top in roots:
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(top.parent).with_suffix("")
            if "templates" in rel.parts or "{{" in str(rel):
                continue
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree``, at any depth, except the bodies of ``if TYPE_CHECKING:``."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _deepest(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is a scanned module."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if (candidate := ".".join(parts[:end])) in modules:
            return candidate
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the scanned modules it imports (see the module docstring for what makes an edge)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = graph.setdefault(name, set())
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [_deepest(alias.name, modules) for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = []
                for alias in node.names:
                    if f"{base}.{alias.name}" in modules:
                        targets.append(f"{base}.{alias.name}")
                    elif base in modules:
                        targets.append(base)
                    else:
                        targets.append(_deepest(base, modules))
            edges.update(t for t in targets if t and t != name)
    return graph


def knots(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: each set's modules all reach each other, so
    every circle lies inside one of them. Empty when the graph has no circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graphs here are a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest circle per knot (:func:`knots`), as ``[a, b, ..., a]``."""
    return [_shortest_circle(graph, knot) for knot in knots(graph)]


def _shortest_circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest ``[a, ..., a]`` inside ``component`` (breadth-first from each member; ties: first by name)."""
    best: list[str] = []
    for start in sorted(component):
        previous = {start: start}
        frontier = [start]
        closing = None
        while frontier and closing is None:
            following = []
            for v in frontier:
                if start in graph[v]:
                    closing = v
                    break
                for w in sorted(graph[v] & component):
                    if w not in previous:
                        previous[w] = v
                        following.append(w)
            frontier = following
        path = [closing]
        while path[-1] != start:
            path.append(previous[path[-1]])
        circle = [*reversed(path), start]
        if not best or len(circle) < len(best):
            best = circle
    return best


def describe(circle: list[str]) -> str:
    return " -> ".join(circle)


def test_no_import_circle_in_the_core_or_any_plugin():
    graph = import_graph(module_files(package_roots()))
    found = [f"{describe(_shortest_circle(graph, knot))}  (modules in this knot: {', '.join(sorted(knot))})"
             for knot in knots(graph)]
    assert not found, "import circles (break each by moving the shared helper into a leaf module):\n" + "\n".join(
        found)



def test_the_check_sees_function_level_imports_and_skips_type_checking(tmp_path: Path):
    """The detector itself: a circle closed only by a function-level import is found and printed; one closed only
    under ``if TYPE_CHECKING:`` is not (it never runs)."""
    pkg = tmp_path / "skyrl_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("x = 1\ndef late():\n    from .c import y\n    return y\n")
    (pkg / "c.py").write_text("from skyrl_probe import a\ny = 2\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .e import z\n")
    (pkg / "e.py").write_text("from . import d\nz = 3\n")
    graph = import_graph(module_files([pkg]))
    assert graph["skyrl_probe.c"] == {"skyrl_probe.a"}
    assert graph["skyrl_probe.d"] == set()
    assert [describe(c) for c in circles(graph)] == [
        "skyrl_probe.a -> skyrl_probe.b -> skyrl_probe.c -> skyrl_probe.a"]
