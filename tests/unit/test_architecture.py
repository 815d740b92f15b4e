"""The layers are the folders under ``node/``, and the imports follow them.

- Under ``node/`` there are only the layer folders below (and ``__init__.py``, ``__main__.py``); their order, top
  to bottom, is ``LAYERS``. A unit is a package or module directly in a layer folder (``node.services.resolve``,
  ``node.faces.daemon``); ``node.core`` is one unit, and so are ``node.__main__`` (a face) and the package root
  ``node`` (support).
- A unit imports only from its own layer or one below, with no cycle among the units; so nothing but a face
  imports a face. ``p2p`` and ``spark_worker`` import nothing of ``node`` but ``node.support.errors`` (and ``p2p``
  the port it implements); ``config`` imports nothing of ``node``.
- No file name repeats under ``node/``: a name says what a module holds wherever it is met.
- docs/architecture.md's "Packages" table names every unit and top-level package, in the layer its folder says.
Imports are read with ``ast`` (function-level and TYPE_CHECKING imports included: they are dependencies too).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "node"
DOC = ROOT / "docs" / "architecture.md"
FIRST_PARTY = ("node", "config", "p2p", "spark_worker")
LAYERS = ("faces", "core", "services", "adapters", "domain", "support")

# The node modules each separate package may import. p2p implements the peer_host port, so it may read the port
# (its records) and nothing else of node.
SEPARATE_MAY_IMPORT: dict[str, set[str]] = {
    "p2p": {"node.support.errors", "node.domain.ports"},
    "spark_worker": {"node.support.errors"},
    "config": set(),
}


# -- reading the tree ----------------------------------------------------------------------------------------


def _exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The unit a dotted module belongs to: ``node.domain.sql.checks`` -> ``node.domain.sql``, ``node.core.node`` ->
    ``node.core``, ``node.__main__`` -> itself, ``p2p.host`` -> ``p2p``."""
    parts = module.split(".")
    if parts[0] != "node" or len(parts) == 1:
        return parts[0]
    if parts[1] in ("core", "__main__") or len(parts) == 2:
        return ".".join(parts[:2])
    return ".".join(parts[:3])


def layer_of(name: str) -> int | None:
    """A node unit's layer, top (0) to bottom; None outside ``node``."""
    parts = name.split(".")
    if parts[0] != "node":
        return None
    if len(parts) == 1:
        return LAYERS.index("support")  # the package root: __version__ and the errors re-exported
    if parts[1] == "__main__":
        return LAYERS.index("faces")
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def node_units() -> set[str]:
    units = {"node", "node.__main__", "node.core"}
    for layer in LAYERS:
        if layer == "core":
            continue
        for p in (NODE / layer).iterdir():
            if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file():
                units.add(f"node.{layer}.{p.stem}")
    return units


def imports(path: Path) -> Iterator[str]:
    me = _module_name(path)
    yield from imports_of(path.read_text(), me if path.name == "__init__.py" else me.rpartition(".")[0])


def imports_of(source: str, package: str) -> Iterator[str]:
    """First-party modules a module of ``package`` imports (``from node.support import values`` is
    ``node.support.values``)."""
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


# -- reading the doc -----------------------------------------------------------------------------------------


def doc_packages() -> dict[str, str]:
    """Name -> layer, from the "Packages" table of docs/architecture.md."""
    text = DOC.read_text()
    m = re.search(r"^## Packages\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "docs/architecture.md has no '## Packages' section"
    rows = [ln for ln in m.group(1).splitlines() if ln.startswith("|")][2:]
    out = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        (name,) = re.findall(r"`([A-Za-z_][\w.]*)`", cells[0])
        out[name] = cells[1]
    return out


# -- the rules, as functions of the edges (so they can be tested on made-up graphs) ------------------------


def upward(edges: set[tuple[str, str]]) -> list[str]:
    wrong = []
    for a, b in edges:
        la, lb = layer_of(a), layer_of(b)
        if la is not None and lb is not None and lb < la:
            wrong.append(f"{a} -> {b}")
    return sorted(wrong)


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


def test_node_holds_only_the_layer_folders() -> None:
    folders = {p.name for p in NODE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    files = {p.name for p in NODE.iterdir() if p.is_file() and p.suffix == ".py"}
    assert folders == set(LAYERS), f"folders under node/ that are not layers: {sorted(folders - set(LAYERS))}"
    assert files == {"__init__.py", "__main__.py"}, f"modules outside the layers: {sorted(files)}"
    assert all((NODE / layer / "__init__.py").is_file() for layer in LAYERS)


def test_no_file_name_repeats_under_node() -> None:
    names = Counter(p.name for p in NODE.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not [n for n, k in names.items() if k > 1], sorted(n for n, k in names.items() if k > 1)


def test_imports_go_downward() -> None:
    assert not upward(unit_edges()), "imports against the layers (the folders under node/)"


def test_no_import_cycle_between_units() -> None:
    assert cycle(unit_edges()) is None


def test_separate_packages_stay_separate() -> None:
    for pkg, allowed in SEPARATE_MAY_IMPORT.items():
        reached = {b for a, b in unit_edges() if a == pkg and b.startswith("node")}
        assert reached <= allowed, f"{pkg} imports {sorted(reached - allowed)}"


def test_the_doc_lists_every_unit_in_its_layer() -> None:
    doc = doc_packages()
    tops = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"node"}
    assert not (node_units() - set(doc)), f"missing from the Packages table: {sorted(node_units() - set(doc))}"
    assert not (tops - set(doc)), f"packages missing from the Packages table: {sorted(tops - set(doc))}"
    for name, layer in doc.items():
        assert _exists(name) or name == "tests", f"docs/architecture.md names what the tree does not hold: {name}"
        where = layer_of(name)
        if where is not None:
            assert layer == LAYERS[where], f"{name}: the doc says {layer!r}, its folder {LAYERS[where]!r}"
        elif name in SEPARATE_MAY_IMPORT:
            assert layer.startswith("separate"), f"the doc no longer calls {name} separate"


# The checkers themselves, on made-up graphs: each rule does fail when broken.


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({("node.domain.model", "node.core")}, ["node.domain.model -> node.core"]),
        ({("node.support.lru", "node.adapters.index")}, ["node.support.lru -> node.adapters.index"]),
        ({("node.core", "node.domain.model"), ("node.services.resolve", "node.services.datasets")}, []),
        ({("node.services.resolve", "p2p"), ("p2p", "node.support.errors")}, []),
    ],
)
def test_upward_finds_an_import_against_the_layers(edges: set[tuple[str, str]], expected: list[str]) -> None:
    assert upward(edges) == expected


def test_units_and_layers_of_names() -> None:
    assert unit("node.domain.sql.checks") == "node.domain.sql"
    assert unit("node.core.wiring") == "node.core"
    assert unit("node.faces.daemon") == "node.faces.daemon"
    assert [layer_of(n) for n in ("node.__main__", "node.core", "node", "p2p")] == [0, 1, 5, None]


def test_cycle_finds_a_loop_and_accepts_a_dag() -> None:
    assert cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]
    assert cycle({("a", "b"), ("a", "c"), ("b", "c")}) is None


def test_from_and_relative_imports_are_resolved() -> None:
    source = "from node.support import values\nfrom node import __version__\nfrom .checks import x\n"
    source += "from . import dialect\nimport json\n"
    assert list(imports_of(source, "node.domain.sql")) == [
        "node.support.values",
        "node",
        "node.domain.sql.checks",
        "node.domain.sql.dialect",
    ]
    assert "node.support.values" in set(imports(NODE / "faces" / "api" / "export.py"))
