#!/usr/bin/env bash
# Build the pinned Kubo once into a cache outside the repo and print the binary's path.
#
# Why not `go install github.com/ipfs/kubo/cmd/ipfs@vX`: Kubo's go.mod carries `exclude`
# directives, which `go install pkg@version` refuses, and the module proxy here answers 403
# to Kubo's version list (shared/NOTES.md). `go mod download` of the exact version works,
# so we fetch the module source and `go build` it in a scratch folder.
set -euo pipefail

KUBO_VERSION="${KUBO_VERSION:-v0.42.0}"
CACHE="${CAIRN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn}"
BIN="$CACHE/kubo/$KUBO_VERSION/ipfs"
want="${KUBO_VERSION#v}"

# An `ipfs` of the pinned version already on PATH is used as is.
if command -v ipfs >/dev/null 2>&1; then
  have="$(ipfs version --number 2>/dev/null || true)"
  if [ "$have" = "$want" ]; then command -v ipfs; exit 0; fi
fi
if [ -x "$BIN" ] && [ "$("$BIN" version --number 2>/dev/null)" = "$want" ]; then
  echo "$BIN"; exit 0
fi

command -v go >/dev/null 2>&1 || { echo "error: Go is needed to build Kubo $KUBO_VERSION (https://go.dev/dl/)" >&2; exit 1; }
echo "building Kubo $KUBO_VERSION into $BIN (one time, about 4 minutes on 2 cores)" >&2
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
dir="$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/ipfs/kubo@$KUBO_VERSION" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$dir" "$work/src"
chmod -R u+w "$work/src"
mkdir -p "$(dirname "$BIN")"
(cd "$work/src" && go build -trimpath \
    -ldflags="-X github.com/ipfs/kubo.taggedRelease=$KUBO_VERSION" -o "$BIN.tmp" ./cmd/ipfs)
mv "$BIN.tmp" "$BIN"
"$BIN" version --number >&2
echo "$BIN"
