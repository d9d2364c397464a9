"""The package's shape: no module over 600 lines (one idea each), and the import graph has no
circle: every `import` of one itlr module by another, at
module level or inside a function (a function-level import is a circle deferred, not broken),
read from the source with ast. Imports under `if TYPE_CHECKING:` are annotations only and do not
count; importing `itlr.a.b` runs `itlr/a/__init__.py` as Python always does, which is not an edge
either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

import itlr

PACKAGE = Path(itlr.__file__).resolve().parent
MAX_MODULE_LINES = 600


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    return {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }


def _imported(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    """The itlr modules an import statement names (`from itlr import x` names itlr.x when x
    is a module, else itlr itself)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        found = []
        for alias in node.names:
            sub = f"{node.module}.{alias.name}"
            found.append(sub if sub in modules else node.module)
        return [name for name in found if name in modules]
    return []


def import_graph() -> nx.DiGraph:
    modules = _module_names()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        annotations_only = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in annotations_only:
                continue
            for target in _imported(node, modules):
                if target != name:
                    graph.add_edge(name, target)
    return graph


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_the_followers_and_the_search_options_import_one_way() -> None:
    graph = import_graph()
    assert not graph.has_edge("itlr.follow", "itlr.follow_copy")
    assert graph.has_edge("itlr.follow_copy", "itlr.follow")
    assert not graph.has_edge("itlr.hard_filter", "itlr.options")
    assert graph.has_edge("itlr.options", "itlr.hard_filter")


def test_no_module_is_longer_than_600_lines() -> None:
    long = {
        path.relative_to(PACKAGE.parent).as_posix(): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
