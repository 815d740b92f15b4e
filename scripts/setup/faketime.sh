#!/usr/bin/env bash
# libfaketime moves the Spark worker JVM's clock in tests/integration/test_query_determinism.py (a result must
# not depend on when it was computed). Debian/Ubuntu package: faketime.
set -euo pipefail
exec bash "$(dirname "$0")/apt.sh" faketime "the test suite (libfaketime)" \
  bash -c 'command -v faketime && compgen -G "/usr/lib/*/faketime/libfaketime.so.1"'
