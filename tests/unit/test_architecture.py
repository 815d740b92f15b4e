"""docs/architecture.md matches the tree.

- Every package and module the doc names exists, and every package (a directory with ``__init__.py`` under
  ``node/``, and every top-level one) and every module directly under ``node/`` is named in it.
- The imports follow the doc's layers (read from its "Layers" table, top to bottom): a module imports only from
  its own layer or one below, with no cycle among the units; nothing but a face imports ``node.api`` or
  ``node.cli``; ``p2p`` and ``spark_worker`` import nothing of ``node`` but ``node.errors``; ``config`` imports
  nothing of ``node``.
Imports are read with ``ast`` (function-level and TYPE_CHECKING imports included: they are dependencies too).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
FIRST_PARTY = ("node", "config", "p2p", "spark_worker")

# What the doc says of the separate packages ("Layers", last paragraph): the node modules each may import.
# p2p implements the peer_host port, so it may read the port (its records) and nothing else of node.
SEPARATE_MAY_IMPORT: dict[str, set[str]] = {
    "p2p": {"node.errors", "node.ports"},
    "spark_worker": {"node.errors"},
    "config": set(),
}


# -- reading the doc -----------------------------------------------------------------------------------------


def _section(title: str) -> str:
    text = DOC.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f"docs/architecture.md has no '## {title}' section"
    return m.group(1)


def _rows(section: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``section``, as lists of cells."""
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([A-Za-z_][\w.]*)`", cell)


def doc_layers() -> list[tuple[str, list[str]]]:
    return [(row[0], _names(row[1])) for row in _rows(_section("Layers"))]


def doc_packages() -> dict[str, str]:
    """Name -> layer, from the "Packages" table."""
    out = {}
    for row in _rows(_section("Packages")):
        (name,) = _names(row[0])
        out[name] = row[1]
    return out


def layer_of() -> dict[str, int]:
    return {name: i for i, (_, names) in enumerate(doc_layers()) for name in names}


# -- reading the tree ----------------------------------------------------------------------------------------


def _exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


def tree_packages() -> set[str]:
    top = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    under_node = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "node").rglob("__init__.py")}
    return top | under_node


def node_units() -> set[str]:
    """``node`` itself and what sits directly in it: ``node.core`` for node/core.py, ``node.api`` for node/api/."""
    units = {"node"}
    for p in (ROOT / "node").iterdir():
        if p.suffix == ".py" and p.name != "__init__.py":
            units.add(f"node.{p.stem}")
        elif (p / "__init__.py").is_file():
            units.add(f"node.{p.name}")
    return units


def unit(module: str) -> str:
    """The unit a dotted module belongs to: ``node.query.checks`` -> ``node.query``; ``p2p.host`` -> ``p2p``."""
    parts = module.split(".")
    name = parts[0] if parts[0] != "node" else ".".join(parts[:2])
    return name


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> Iterator[str]:
    me = _module_name(path)
    yield from imports_of(path.read_text(), me if path.name == "__init__.py" else me.rpartition(".")[0])


def imports_of(source: str, package: str) -> Iterator[str]:
    """First-party modules a module of ``package`` imports (``from node import values`` is ``node.values``)."""
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.Import):
            targets = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:  # relative: resolved against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (n.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in n.names]
        else:
            continue
        yield from (t for t in targets if t.split(".")[0] in FIRST_PARTY)


def unit_edges() -> set[tuple[str, str]]:
    edges = set()
    for top in FIRST_PARTY:
        for path in (ROOT / top).rglob("*.py"):
            src = unit(_module_name(path))
            edges |= {(src, unit(t)) for t in imports(path) if unit(t) != src}
    return edges


# -- the rules, as functions of the edges (so they can be tested on made-up graphs) ------------------------


def upward(edges: set[tuple[str, str]], layers: dict[str, int]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, b in edges if a in layers and b in layers and layers[b] < layers[a])


def cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


# -- tests -----------------------------------------------------------------------------------------------------


def test_every_name_in_the_doc_exists() -> None:
    named = set(doc_packages()) | set(layer_of())
    missing = sorted(n for n in named if not _exists(n))
    assert not missing, f"docs/architecture.md names what the tree does not hold: {missing}"


def test_every_package_and_node_module_is_in_the_doc() -> None:
    placed = set(layer_of())
    listed = set(doc_packages())
    units = {unit(u) for u in node_units()}
    assert not (tree_packages() - listed), f"packages missing from the Packages table: {tree_packages() - listed}"
    assert not (units - listed), f"node modules missing from the Packages table: {sorted(units - listed)}"
    assert not (units - placed), f"node modules in no layer: {sorted(units - placed)}"


def test_the_two_tables_agree_on_layers() -> None:
    layers = dict(doc_layers())
    for name, layer in doc_packages().items():
        if name.startswith("node"):
            assert unit(name) in layers.get(layer, []), f"{name}: Packages says layer {layer!r}, Layers does not"


def test_imports_go_downward() -> None:
    assert not upward(unit_edges(), layer_of()), "imports against the layers of docs/architecture.md"


def test_no_import_cycle_between_units() -> None:
    assert cycle(unit_edges()) is None


def test_only_faces_import_the_faces() -> None:
    faces = dict(doc_layers())["faces"]
    wrong = sorted(f"{a} -> {b}" for a, b in unit_edges() if b in ("node.api", "node.cli") and a not in faces)
    assert not wrong, wrong


def test_separate_packages_stay_separate() -> None:
    doc = doc_packages()
    for pkg, allowed in SEPARATE_MAY_IMPORT.items():
        assert doc[pkg].startswith("separate"), f"the doc no longer calls {pkg} separate"
        reached = {b for a, b in unit_edges() if a == pkg and b.startswith("node")}
        assert reached <= allowed, f"{pkg} imports {sorted(reached - allowed)}"


# The checkers themselves, on made-up graphs: each rule does fail when broken.


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({("node.model", "node.core")}, ["node.model -> node.core"]),
        ({("node.core", "node.model"), ("node.core", "node.core2")}, []),
    ],
)
def test_upward_finds_an_import_against_the_layers(edges: set[tuple[str, str]], expected: list[str]) -> None:
    assert upward(edges, {"node.core": 0, "node.core2": 0, "node.model": 1}) == expected


def test_cycle_finds_a_loop_and_accepts_a_dag() -> None:
    assert cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]
    assert cycle({("a", "b"), ("a", "c"), ("b", "c")}) is None


def test_from_and_relative_imports_are_resolved() -> None:
    source = "from node import values, __version__\nfrom .checks import x\nfrom . import dialect\nimport json\n"
    assert list(imports_of(source, "node.query")) == ["node.values", "node", "node.query.checks", "node.query.dialect"]
    assert "node.values" in set(imports(ROOT / "node" / "api" / "export.py"))
