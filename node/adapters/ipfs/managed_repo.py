"""The managed Kubo's repo, as the node prepares it before each start: the binary to run, ``ipfs init``, the config
the node writes (addresses, bootstrap peers, the RPC API's one secret, extra settings), the secret's file and the
0700 directory of the API socket."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.adapters.ipfs.addr import SUN_PATH_MAX
from node.support.errors import ConfigError, KuboStartError

log = logging.getLogger("node.adapters.ipfs.managed")  # one logger name for the managed Kubo, whichever module logs

KUBO_VERSION = "0.42.0"
AUTH_USER = "cairn"  # the node's entry in the daemon's API.Authorizations
HOME_SECRET = "kubo.secret"  # in $CAIRN_HOME: the node's managed Kubo's RPC secret (0600, like api.token)
SOCKET_DIR_SUFFIX = ".rpc"  # <repo>.rpc/: the 0700 directory of the RPC API's unix socket
SOCKET_NAME = "api.sock"


def find_kubo_binary(configured: str | os.PathLike[str] | None = None, version: str = KUBO_VERSION) -> Path:
    """The Kubo to run: the configured path, else the build cache, else an ``ipfs`` of that version on PATH."""
    if configured:
        path = Path(configured).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise ConfigError(f"the configured Kubo binary {path} does not exist or is not executable")
    cache = os.environ.get("CAIRN_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cairn"
    )
    cached = Path(cache) / "kubo" / f"v{version}" / "ipfs"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    on_path = shutil.which("ipfs")
    if on_path and _version_of(Path(on_path)) == version:
        return Path(on_path)
    raise ConfigError(
        f"Kubo {version} not found (looked at {cached} and for an `ipfs` {version} on PATH): "
        "run `make run` or scripts/setup/kubo.sh to build it, or set the Kubo binary in the config"
    )


def _version_of(binary: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(binary), "version", "--number"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def load_secret(path: Path) -> str:
    """The RPC secret, made on first use with mode 0600 (like api.token); a file others could read is tightened."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        try:
            os.link(tmp, path)  # never replaces a secret another process made meanwhile
        except FileExistsError:
            pass  # theirs wins; read below
        finally:
            tmp.unlink()
    if path.stat().st_mode & 0o077:
        log.warning("the Kubo API secret %s was readable by others; setting mode 0600", path)
        os.chmod(path, 0o600)
    secret = path.read_text().strip()
    if not secret or any(c.isspace() or c == ":" for c in secret):
        raise KuboStartError(f"the Kubo API secret file {path} is empty or malformed: delete it to make a new one")
    return secret


def home_kubo_auth(home: Path) -> str | None:
    """The RPC secret (``bearer:…``, for ``KuboClient(auth=…)``) of the managed Kubo of the node home ``home``,
    or None if it has none yet: how scripts and tests reach a node's own Kubo."""
    try:
        return f"bearer:{(Path(home) / HOME_SECRET).read_text().strip()}"
    except FileNotFoundError:
        return None


def api_socket_path(repo: Path) -> Path:
    """Where the managed Kubo of ``repo`` has its RPC API socket: ``<repo>.rpc/api.sock``, or, when that path is
    too long for a unix socket, ``cairn-kubo-<uid>-<hash of the repo's path>/api.sock`` under
    ``$XDG_RUNTIME_DIR`` or ``/tmp`` (the same place at every start of that repo)."""
    repo = Path(os.path.abspath(repo))
    beside = repo.with_name(repo.name + SOCKET_DIR_SUFFIX) / SOCKET_NAME
    if len(os.fsencode(beside)) <= SUN_PATH_MAX:
        return beside
    tag = hashlib.sha256(os.fsencode(repo)).hexdigest()[:16]
    for base in (os.environ.get("XDG_RUNTIME_DIR"), "/tmp"):
        if not base or not os.path.isabs(base) or not os.path.isdir(base):
            continue
        short = Path(base) / f"cairn-kubo-{os.getuid()}-{tag}" / SOCKET_NAME
        if len(os.fsencode(short)) <= SUN_PATH_MAX:
            log.info(
                "the Kubo API socket beside its repo would be %d bytes long (a unix socket's path takes %d): "
                "it is %s instead",
                len(os.fsencode(beside)),
                SUN_PATH_MAX,
                short,
            )
            return short
    raise ConfigError(f"no unix socket path short enough for the Kubo API of {repo} (beside it: {beside})")


def private_dir(path: Path) -> None:
    """Make ``path`` a directory only this user may enter (0700). One that is a symlink, not a directory, or another
    user's (a squatter in /tmp) is refused: the socket inside is reachable by whoever may enter it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise KuboStartError(
            f"{path} must be a directory of this user's to hold the Kubo API socket, and is not "
            "(a symlink, a file or another user's): remove it"
        )
    if st.st_mode & 0o077:
        log.warning("the Kubo API socket's directory %s was open to others; setting mode 0700", path)
        os.chmod(path, 0o700)


def init_repo(binary: Path, repo: Path, env: Mapping[str, str]) -> None:
    """``ipfs init`` the repo the first time (a repo with a config is kept as it is)."""
    repo.mkdir(parents=True, exist_ok=True)
    if (repo / "config").exists():
        return
    # test profile: loopback, no bootstrap peers, no mDNS.
    out = subprocess.run(
        [str(binary), "init", "--profile=test"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,  # the return code is read below, with Kubo's own message
    )
    if out.returncode != 0:
        raise KuboStartError(f"`ipfs init` failed in {repo}: {(out.stderr or out.stdout).strip()}")


def write_config(
    repo: Path,
    ports: Mapping[str, int],
    *,
    api_socket: Path | None,
    swarm_host: str,
    bootstrap: list[str],
    secret: str,
    extra: Mapping[str, Any],
) -> None:
    """The node's settings into the repo's config: the API on ``api_socket`` (else on loopback TCP
    ``ports["api"]``), the gateway and swarm ports, the bootstrap peers, the secret, and ``extra`` (dotted keys)."""
    # Edit the JSON directly: one read and one atomic write instead of an `ipfs config` run per key.
    path = repo / "config"
    cfg = json.loads(path.read_text())
    addrs = cfg.setdefault("Addresses", {})
    addrs["API"] = f"/unix{api_socket}" if api_socket is not None else f"/ip4/127.0.0.1/tcp/{ports['api']}"
    addrs["Gateway"] = f"/ip4/127.0.0.1/tcp/{ports['gateway']}"
    family = "ip6" if ":" in swarm_host else "ip4"
    addrs["Swarm"] = [f"/{family}/{swarm_host}/tcp/{ports['swarm']}"]
    cfg["Bootstrap"] = list(bootstrap)
    # Replaced on every start: only the node's secret opens the RPC API (the whole of /api/v0).
    cfg.setdefault("API", {})["Authorizations"] = {
        AUTH_USER: {"AuthSecret": f"bearer:{secret}", "AllowedPaths": ["/api/v0"]}
    }
    for dotted, value in extra.items():
        node = cfg
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    tmp = path.with_name("config.cairn-tmp")
    tmp.write_text(json.dumps(cfg, indent=2))
    os.chmod(tmp, 0o600)  # the config holds the node's private key
    os.replace(tmp, path)
