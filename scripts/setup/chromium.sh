#!/usr/bin/env bash
# Debian's chromium, driven by Playwright in tests/integration/test_web_page.py (Playwright's own browser download
# cannot work here: only package registries are reachable). Installed only when missing, as root.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "error: chromium is needed by the test suite; run as root: apt-get update && apt-get install -y chromium" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: chromium is needed by the test suite and this system has no apt-get; install chromium" >&2
  exit 1
fi
echo "installing chromium with apt-get" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "error: apt-get installed chromium but it is not on PATH" >&2; exit 1; }
