"""The README's "Two nodes sharing one answer", run as written (issue 16 item 1): two nodes from their defaults,
`cairn trust add`, `cairn connect` with the address `cairn status` prints, a query on node 1, the same query on
node 2 answered by node 1's result (a peer hit, no Spark job on node 2)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.nodes import NodeProcess

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Two nodes sharing one answer"


def readme_commands() -> list[str]:
    """The `$ ` lines of the section's console block, in order."""
    text = README.read_text()
    assert SECTION in text, "the README lost its two-node section"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in body.splitlines() if line.startswith("$ ")]


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[dict[str, NodeProcess]]:
    # Defaults (`cairn node start`), on free ports instead of the README's 7420/7421: tests run side by side.
    nodes = {"1": NodeProcess(tmp_path / "cairn-1", env={}), "2": NodeProcess(tmp_path / "cairn-2", env={})}
    try:
        for n in nodes.values():
            n.start(timeout=120)
        yield nodes
    finally:
        for n in nodes.values():
            if n.proc is not None:
                n.stop()


def _argv(command: str, nodes: dict[str, NodeProcess], learnt: dict[str, str]) -> list[str]:
    """A README command as this test runs it: our homes, our Python, and the values the README shows as
    examples replaced by the ones this run printed (node 1's address and key, as a user copies them)."""
    words = shlex.split(command)
    assert words[0] in ("cairn", ".venv/bin/cairn"), command
    out = [sys.executable, "-m", "node"]
    for w in words[1:]:
        if m := re.fullmatch(r"~/\.cairn-(\d)", w):
            w = str(nodes[m.group(1)].home)
        elif w.startswith("did:key:"):
            w = learnt["node key"]
        elif w.startswith("/ip4/") and "/p2p/" in w:
            w = learnt["connect"]
        out.append(w)
    return out


def test_readme_two_nodes_share_one_answer(two_nodes: dict[str, NodeProcess], tmp_path: Path) -> None:
    commands = readme_commands()
    assert any("trust add" in c for c in commands) and any(" connect " in c for c in commands)
    learnt: dict[str, str] = {}
    outputs: list[tuple[str, subprocess.CompletedProcess[str]]] = []
    for command in commands:
        if " node start" in command:
            continue  # started by the fixture, from the same defaults
        if command.startswith("printf "):
            r = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, check=False)
        else:
            argv = _argv(command, two_nodes, learnt)
            r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, f"{command}\n{r.stdout}\n{r.stderr}"
        outputs.append((command, r))
        if command.split()[-1] == "status":
            for key in ("connect", "node key"):
                m = re.search(rf"^{key}\s+(\S+)", r.stdout, re.M)
                assert m, f"`cairn status` shows no {key!r} line:\n{r.stdout}"
                learnt[key] = m.group(1)
    queries = [r for c, r in outputs if " query " in c]
    assert len(queries) == 2
    assert re.search(r"rows, computed in", queries[0].stderr), queries[0].stderr
    assert re.search(r"rows, peer in", queries[1].stderr), queries[1].stderr  # node 1's answer, reused
    assert "trusted signer" in queries[1].stderr and queries[1].stdout == queries[0].stdout
    assert two_nodes["2"].get("/api/v0/node")[1]["spark"]["jobs"] == 0  # node 2 computed nothing
