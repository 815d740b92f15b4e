"""The README's "What runs today", run as written on a node started from its defaults (issue 16: the README shows
commands a test runs). What is content-addressed must come out exactly as the README prints it: the query,
invocation and execution CIDs of the two queries (they depend on the SQL and the rows, not on the node), and the
answer table; the first query is computed, its lower-case twin a local hit; `/healthz` has the README's fields.
Node-specific values (the dataset's head and id, timings) are compared by shape only."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.fixtures.nodes import NodeProcess

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## What runs today"
CID_LINE = re.compile(r"^(query|invocation|execution)\s+(b\S+)$", re.M)


def readme_session() -> list[tuple[str, list[str]]]:
    """(command, the output lines the README shows under it) for each `$ ` line of the section's console block."""
    text = README.read_text()
    assert SECTION in text, "the README lost its 'What runs today' section"
    block = text.split(SECTION, 1)[1].split("```console\n", 1)[1].split("```", 1)[0]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and not line.startswith("…"):  # "…" lines are the README's comments, not output
            steps[-1][1].append(line)
    return steps


def _healthz(node: NodeProcess, shown: list[str]) -> None:
    """The README's answer once the node is ready: same fields, at every level, and ok/ready true."""
    expected = json.loads("\n".join(shown))
    deadline = time.monotonic() + 180
    while True:
        got = node.get("/healthz")[1]
        if got.get("ready") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got["ok"] is True and got["ready"] is True, got
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, dict):
            assert got[key].keys() == value.keys(), key


def _cairn(node: NodeProcess, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    words = shlex.split(command)
    assert words[0] == ".venv/bin/cairn", command
    argv = [sys.executable, "-m", "node", "--home", str(node.home), *words[1:]]
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, f"{command}\n{r.stdout}\n{r.stderr}"
    return r


def _check_query(r: subprocess.CompletedProcess[str], shown: list[str], source: str) -> None:
    printed = r.stdout + r.stderr
    assert dict(CID_LINE.findall(printed)) == dict(CID_LINE.findall("\n".join(shown))), printed
    table = [line.rstrip() for line in shown if "┃" in line or "━" in line or "│" in line]
    assert table and [line.rstrip() for line in r.stdout.splitlines()] == table, r.stdout
    assert re.search(rf"^1 rows, {source} in [\d.]+ ms$", r.stderr, re.M), r.stderr


def test_readme_what_runs_today(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "home", env={}).start(timeout=120)
    try:
        steps = readme_session()
        sources = iter(["computed", "local"])
        for command, shown in steps:
            if command.startswith("curl "):
                _healthz(node, shown)
            elif command.startswith("printf "):
                subprocess.run(command, shell=True, cwd=tmp_path, check=True)
            elif " query " in command:
                _check_query(_cairn(node, command, tmp_path), shown, next(sources))
            else:  # add: the dataset's head and id belong to this node's key; the counts are the README's
                r = _cairn(node, command, tmp_path)
                assert re.sub(r"[\d.]+ s$", "", r.stdout.splitlines()[0]) == re.sub(r"[\d.]+ s$", "", shown[0])
        assert next(sources, None) is None, "the README no longer shows a computed query and its local hit"
    finally:
        node.stop()
