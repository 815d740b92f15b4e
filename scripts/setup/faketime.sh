#!/usr/bin/env bash
# libfaketime moves the Spark worker JVM's clock in tests/integration/test_query_determinism.py (a result must
# not depend on when it was computed). Debian/Ubuntu package: faketime. Installed only when missing, as root.
set -euo pipefail
found() { command -v faketime >/dev/null 2>&1 && compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null; }
if found; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "error: libfaketime is needed by the test suite; run as root: apt-get update && apt-get install -y faketime" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: libfaketime is needed by the test suite and this system has no apt-get; install libfaketime" >&2
  exit 1
fi
echo "installing faketime (libfaketime) with apt-get" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null
found || { echo "error: apt-get installed faketime but libfaketime.so.1 is not under /usr/lib/*/faketime/" >&2; exit 1; }
