"""The node's data directory (``$CAIRN_HOME``, default ``~/.cairn``) and what lives in it.

::

    config.toml      settings (docs/configuration.md)
    node.key         ed25519 identity, PEM, mode 0600
    api.token        bearer token for write endpoints, mode 0600
    kubo/            the managed Kubo's repo
    kubo.secret      the managed Kubo's RPC API secret, mode 0600 (node/adapters/ipfs/managed_repo.py)
    logs/            kubo.log, spark.log, node.log (the node's own log when started with --detach)
    node.json        written while the node runs: pid and API address (how other commands find it)
    node.pid         the running node's pid, from its first moment to its last (what `cairn node stop` signals)
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.adapters import identity
from node.support.errors import ConfigError

CONFIG_TEMPLATE = """\
# Cairn node settings. Every key is documented in docs/configuration.md.
# Precedence: defaults < this file < CAIRN_* environment < command-line flags.

[api]
# host = "127.0.0.1"
# port = 7420

[ipfs]
# api = ""          # empty: run a managed Kubo under this directory
# bootstrap = []
"""


@dataclass(frozen=True)
class Home:
    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.toml"

    @property
    def key(self) -> Path:
        return self.path / "node.key"

    @property
    def token_file(self) -> Path:
        return self.path / "api.token"

    @property
    def kubo_repo(self) -> Path:
        return self.path / "kubo"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def runtime_file(self) -> Path:
        return self.path / "node.json"

    @property
    def pid_file(self) -> Path:
        return self.path / "node.pid"

    @property
    def node_log(self) -> Path:
        return self.logs / "node.log"

    def exists(self) -> bool:
        return self.key.exists() and self.token_file.exists()

    def init(self) -> bool:
        """Create what is missing; never overwrite a key or token. Returns True if anything was created."""
        created = False
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        self.logs.mkdir(exist_ok=True)
        if not self.config.exists():
            self.config.write_text(CONFIG_TEMPLATE)
            created = True
        if not self.key.exists():
            identity.save(identity.generate(), self.key)
            created = True
        if not self.token_file.exists():
            identity.write_private(self.token_file, secrets.token_urlsafe(32).encode() + b"\n")
            created = True
        return created

    def identity(self) -> identity.Identity:
        return identity.load(self.key)

    def token(self) -> str:
        try:
            return self.token_file.read_text().strip()
        except FileNotFoundError:
            raise ConfigError(f"no API token at {self.token_file}: run `cairn init`") from None

    def write_runtime(self, info: dict[str, Any]) -> None:
        tmp = self.runtime_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        os.replace(tmp, self.runtime_file)

    def read_runtime(self) -> dict[str, Any] | None:
        """The running node's pid and address, or None if no live node owns this home."""
        try:
            info = json.loads(self.runtime_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if not _pid_alive(int(info.get("pid", 0))):
            return None
        return info

    def clear_runtime(self, pid: int) -> None:
        try:
            if json.loads(self.runtime_file.read_text()).get("pid") == pid:
                self.runtime_file.unlink()
        except (FileNotFoundError, json.JSONDecodeError):
            pass

    def write_pid(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, self.pid_file)

    def read_pid(self) -> int | None:
        """The pid of the live node of this home (its PID file, else ``node.json``), or None."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            info = self.read_runtime()
            pid = int(info["pid"]) if info else 0
        return pid if _pid_alive(pid) and _is_node(pid) else None

    def clear_pid(self, pid: int) -> None:
        try:
            if int(self.pid_file.read_text().strip()) == pid:
                self.pid_file.unlink()
        except (FileNotFoundError, ValueError):
            pass


def _is_node(pid: int) -> bool:
    """Whether ``pid`` runs `… node start` (a PID file left by a killed node may name a reused pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: trust the file
    return any(a == b"node" and b == b"start" for a, b in itertools.pairwise(argv))


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
