"""node.services.provenance.render: DOT, Mermaid and SVG text of a lineage graph, parsed back (docs/provenance.md
"Lineage").

Labels carry what a peer may put in a name or an error (quotes, backslashes, angle brackets, newlines): each
format must still parse, with one edge per link."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from node.services.provenance.render import layers, node_text, to_dot, to_mermaid, to_svg

NASTY = 'a "quoted" <b>name</b> & \\ back\nslash'


def _graph() -> dict[str, Any]:
    nodes = [
        {
            "id": "rc",
            "kind": "receipt",
            "cid": "rc",
            "label": NASTY,
            "signer": "did:key:z6Mk1",
            "checks": {"hash": "ok"},
        },
        {"id": "ex", "kind": "execution", "cid": "ex", "label": "cairn.spark-sql", "signer": None, "checks": {}},
        {"id": "d1", "kind": "dataset", "cid": "d1", "label": "cities", "signer": "did:key:z6Mk2", "source": "network"},
        {"id": "d2", "kind": "missing", "cid": "d2", "label": "not found within 3 s"},
        {"id": "lone", "kind": "data", "cid": "lone", "label": "not reached from the start"},
    ]
    edges = [
        {"from": "rc", "to": "ex", "label": "attests", "via": "object"},
        {"from": "ex", "to": "d1", "label": 'input 0: "read"', "via": "object"},
        {"from": "ex", "to": "d2", "label": "input 1: read", "via": "object"},
    ]
    return {"start": "rc", "nodes": nodes, "edges": edges, "complete": False, "cut": None}


def test_dot_has_one_edge_per_link_whatever_the_labels() -> None:
    text = to_dot(_graph())
    assert text.startswith("digraph lineage {\n") and text.endswith("}\n")
    edges = re.findall(r'^  "((?:[^"\\]|\\.)*)" -> "((?:[^"\\]|\\.)*)" \[label="(?:[^"\\]|\\.)*"\];$', text, re.M)
    assert edges == [("rc", "ex"), ("ex", "d1"), ("ex", "d2")]
    assert '\\"quoted\\"' in text and "\n" not in text.split("[label=")[3].split("];")[0]


def test_mermaid_lines_follow_its_grammar() -> None:
    lines = to_mermaid(_graph()).rstrip("\n").split("\n")
    assert lines[0] == "flowchart TD"
    nodes = [ln for ln in lines[1:] if re.fullmatch(r'  n\d+\["[^"\n]*"\]', ln)]
    edges = [ln for ln in lines[1:] if re.fullmatch(r'  n\d+ -->\|"[^"\n]*"\| n\d+', ln)]
    assert len(nodes) == 5 and len(edges) == 3 and len(lines) == 1 + 5 + 3
    assert "#quot;quoted#quot;" in lines[1]


def test_svg_is_well_formed_with_a_box_per_node() -> None:
    root = ET.fromstring(to_svg(_graph()))
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    assert len(root.findall(f"{ns}g")) == 5 and len(root.findall(f"{ns}line")) == 3
    titles = [t.text for t in root.iter(f"{ns}title")]
    assert any(t and "<b>name</b>" in t for t in titles)  # escaped in the file, read back as text


def test_layers_put_the_start_first_and_unreached_nodes_last() -> None:
    assert layers(_graph()) == [["rc"], ["ex"], ["d1", "d2"], ["lone"]]
    assert layers({"start": "x", "nodes": [], "edges": []}) == []
    asked_execution = {**_graph(), "start": "ex"}  # the walk began at its receipt, the first node: drawn from there
    assert layers(asked_execution) == [["rc"], ["ex"], ["d1", "d2"], ["lone"]]


def test_node_text_says_who_signed_what_was_checked_and_where_it_came_from() -> None:
    text = node_text(_graph()["nodes"][2])
    assert text == "dataset: cities | d1 | signed by did:key:z6Mk2 | fetched from the network"
    assert "checked: hash ok" in node_text(_graph()["nodes"][0])
