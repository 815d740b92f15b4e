#!/usr/bin/env bash
# The container's entrypoint (Dockerfile, docker-compose.yml). Without CAIRN_JOIN it runs its command as is.
# With CAIRN_JOIN=http://HOST:PORT (another node's API) it runs the command in the background, and once both
# nodes answer, `cairn connect`s to the first address that node gives to share (`addresses.cairn_connect` of
# GET /api/v0/node, an open route): peer ids are made at first start, so they cannot be written in advance.
set -euo pipefail
[ -n "${CAIRN_JOIN:-}" ] || exec "$@"

"$@" &
node=$!
trap 'kill -TERM "$node" 2>/dev/null || true' TERM INT

join() {
  python - "$CAIRN_JOIN" <<'PY'
import json, subprocess, sys, time, urllib.request

def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)

deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    try:
        get("http://127.0.0.1:7420/healthz")  # our own node serves
        addrs = get(sys.argv[1].rstrip("/") + "/api/v0/node")["addresses"]["cairn_connect"]
        for addr in [a for a in addrs if "/127.0.0.1/" not in a]:
            if subprocess.run(["cairn", "connect", addr], check=False).returncode == 0:
                sys.exit(0)
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(2)
sys.exit(f"could not connect to {sys.argv[1]} within 600 s")
PY
}
join || echo "cairn-entrypoint: not connected to $CAIRN_JOIN" >&2
wait "$node"
