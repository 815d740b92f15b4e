"""The Dockerfile's `python` stage run without Docker (docs/container.md "Where Docker cannot
run"): scripts/container_steps.py replays the stage's own ENV/WORKDIR/COPY/RUN lines under a scratch root, so the
hash-checked locks install from scratch into a fresh venv and the project installs on top. The `apt-get` lines and
the `kubo` stage do not run here: they would change this machine's system packages, and the `kubo` stage is
scripts/setup/kubo.sh, which `make setup` runs. This machine's pip cache is reused (the image keeps none)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pins(lock: Path) -> dict[str, str]:
    found = re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)", lock.read_text(), re.M)
    return {name.lower().replace("_", "-").replace(".", "-"): version for name, version in found}


def test_python_stage_installs_the_locks_into_a_fresh_venv(tmp_path: Path) -> None:
    # `python` on PATH, as in the base image: this interpreter (its venv makes the new venv from the base Python).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "container_steps.py"),
            "python",
            str(tmp_path),
            "--run",
            "--keep-cache",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "skipped: RUN apt-get" in r.stderr  # said, not silently dropped
    venv = tmp_path / "opt" / "venv"
    freeze = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {
        n.lower().replace("_", "-").replace(".", "-"): v
        for n, _, v in (line.partition("==") for line in freeze.splitlines())
        if v
    }
    want = _pins(ROOT / "requirements.lock") | _pins(ROOT / "requirements-pip.lock")
    assert {k: installed.get(k) for k in want} == want  # every pin, at its version
    assert any(line.startswith("cairn @ file://") for line in freeze.splitlines())  # the project, built here
    # Installed, not editable: the image's copy runs without the checkout.
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import node; print(node.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert str(venv) in out
    assert subprocess.run([str(venv / "bin" / "cairn"), "--help"], capture_output=True, check=False).returncode == 0
