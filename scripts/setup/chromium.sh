#!/usr/bin/env bash
# Debian's chromium, driven by Playwright in tests/integration/test_web_page.py (Playwright's own browser download
# cannot work here: only package registries are reachable).
set -euo pipefail
exec bash "$(dirname "$0")/apt.sh" chromium "the test suite (the web page's browser test)" command -v chromium
