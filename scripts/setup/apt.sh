#!/usr/bin/env bash
# One Debian package for the test suite, installed only when its check fails, as root (faketime.sh, chromium.sh).
# usage: apt.sh PACKAGE "what needs it" CHECK-COMMAND [ARG…]
set -euo pipefail
pkg=$1 needs=$2
shift 2
if "$@" >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "error: $pkg is needed by $needs; run as root: apt-get update && apt-get install -y $pkg" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: $pkg is needed by $needs and this system has no apt-get; install $pkg" >&2
  exit 1
fi
echo "installing $pkg with apt-get" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
"$@" >/dev/null 2>&1 || { echo "error: apt-get installed $pkg but this still fails: $*" >&2; exit 1; }
