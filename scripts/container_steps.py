"""The Dockerfile's steps as a script, for where Docker cannot run.

Reads the Dockerfile and, for one stage, replays its ENV, WORKDIR, COPY (from this checkout) and RUN lines under a
scratch root: absolute paths in ENV and WORKDIR are moved under the root, and each RUN line runs as written, with
bash, in that environment. So the commands are the Dockerfile's own, not a copy that could drift.

    python scripts/container_steps.py python /tmp/root          # print the stage as a shell script
    python scripts/container_steps.py python /tmp/root --run    # and run it

RUN lines that install system packages (`apt-get`) or add users are skipped, each with the reason printed: they
change the machine that runs this, not a scratch root. `COPY --from=` (another stage's output) is skipped too.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
SYSTEM = ("apt-get", "useradd", "groupadd")  # commands that change the host itself


@dataclass
class Stage:
    name: str
    steps: list[tuple[str, str]] = field(default_factory=list)  # (instruction, arguments)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def stages(text: str) -> list[Stage]:
    """The Dockerfile's stages by name (`FROM … AS name`; the last, unnamed one is `runtime`)."""
    found: list[Stage] = []
    for word, rest in instructions(text):
        if word == "FROM":
            parts = rest.split()
            found.append(Stage(parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else "runtime"))
        elif found:
            found[-1].steps.append((word, rest))
    return found


def env_pairs(rest: str) -> list[tuple[str, str]]:
    return [(k, v) for k, _, v in (w.partition("=") for w in shlex.split(rest))]


def script(stage: Stage, root: Path, keep_cache: bool = False) -> tuple[str, list[str]]:
    """The stage as one bash script under ``root``, and the steps skipped (with why). ``keep_cache``: leave pip's
    cache on (the image keeps none; a test reuses this machine's, as any value of PIP_NO_CACHE_DIR disables it)."""
    lines = ["set -euo pipefail", f"mkdir -p {shlex.quote(str(root))}", f"cd {shlex.quote(str(root))}"]
    skipped: list[str] = []
    for word, rest in stage.steps:
        if word == "ENV":
            for key, value in env_pairs(rest):
                if keep_cache and key == "PIP_NO_CACHE_DIR":
                    continue
                value = str(root) + value if value.startswith("/") else value
                lines.append(f"export {key}={shlex.quote(value)}")
        elif word == "WORKDIR":
            target = root / rest.lstrip("/")
            lines.append(f"mkdir -p {shlex.quote(str(target))} && cd {shlex.quote(str(target))}")
        elif word == "COPY" and not rest.startswith("--"):
            *sources, dest = shlex.split(rest)
            for src in sources:
                lines.append(f"cp -r {shlex.quote(str(ROOT / src))} {shlex.quote(dest)}")
        elif word == "RUN" and not any(cmd in rest.split() for cmd in SYSTEM):
            lines.append(rest)
        elif word == "RUN":
            skipped.append(f"RUN {rest[:60]}…: installs system packages or users on this machine")
        elif word == "COPY":
            skipped.append(f"COPY {rest}: another stage's output")
    return "\n".join(lines) + "\n", skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", help="kubo, python or runtime")
    ap.add_argument("root", type=Path, help="scratch root for the stage's absolute paths")
    ap.add_argument("--run", action="store_true", help="run it (else print it)")
    ap.add_argument("--keep-cache", action="store_true", help="use this machine's pip cache")
    args = ap.parse_args(argv)
    by_name = {s.name: s for s in stages(DOCKERFILE.read_text())}
    if args.stage not in by_name:
        ap.error(f"no stage {args.stage!r} in the Dockerfile (stages: {', '.join(by_name)})")
    text, skipped = script(by_name[args.stage], args.root.resolve(), args.keep_cache)
    for why in skipped:
        print(f"skipped: {why}", file=sys.stderr)
    if not args.run:
        print(text, end="")
        return 0
    bash = shutil.which("bash") or "/bin/bash"
    return subprocess.run([bash, "-c", text], env=os.environ.copy(), check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
