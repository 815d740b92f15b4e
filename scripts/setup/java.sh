#!/usr/bin/env bash
# Spark 4 needs Java 17 or newer: say so clearly instead of failing deep inside PySpark.
set -euo pipefail
if ! command -v java >/dev/null 2>&1; then
  echo "error: Java 17+ is needed for the Spark worker and no 'java' is on PATH (Debian: apt install openjdk-17-jre-headless)" >&2
  exit 1
fi
ver="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
major="${ver%%.*}"
if [ "${major:-0}" -lt 17 ] 2>/dev/null; then
  echo "error: Java 17+ is needed for the Spark worker, found $ver ($(command -v java))" >&2
  exit 1
fi
