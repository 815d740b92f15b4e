#!/usr/bin/env bash
# The container's entrypoint (Dockerfile, docker-compose.yml). Without CAIRN_JOIN it runs its command as is.
# With CAIRN_JOIN=http://HOST:PORT (another node's API) it runs the command in the background, and once both
# nodes answer, `cairn connect`s to the first address that node gives to share (`addresses.cairn_connect` of
# GET /api/v0/node, an open route): peer ids are made at first start, so they cannot be written in advance.
set -euo pipefail
[ -n "${CAIRN_JOIN:-}" ] || exec "$@"

"$@" &
node=$!
trap 'kill -TERM "$node" 2>/dev/null || true' TERM INT  # `docker stop` stops the node, which stops its Kubo

join() {  # exec: the background job is python itself, so stopping it stops the polling
  exec python - "$CAIRN_JOIN" <<'PY'
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
sys.exit(f"cairn-entrypoint: not connected to {sys.argv[1]} within 600 s")
PY
}
join &
joiner=$!
status=0
# A trapped signal ends `wait` early: wait again until the node itself has exited, and exit with its status.
while kill -0 "$node" 2>/dev/null; do wait "$node" || status=$?; done
kill -TERM "$joiner" 2>/dev/null || true
exit "$status"
