"""Run the API contract fuzzing of tests/integration/test_api_contract.py longer than `make test` does.

    .venv/bin/python scripts/fuzz_api.py --examples 200          # every operation, 200 generated requests each
    .venv/bin/python scripts/fuzz_api.py --examples 50 -k query  # only operations whose test id matches

The same real node (the test session's Kubo, a real Spark worker, seeded data), the same document, the same checks
(no 5xx, statuses, bodies and content types as documented, the token refused where the document needs it), with
``--examples`` requests per operation and generation phase instead of the bounded default. Prints one JSON line:
requests sent by test and status class, failures, seconds. A failure prints schemathesis's reproducing curl line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/integration/test_api_contract.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=100, help="generated requests per operation and phase")
    ap.add_argument("-k", default="contract_with_token or contract_without_token or refuses", help="pytest -k")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "counts.json"
        env = {**os.environ, "CAIRN_CONTRACT_EXAMPLES": str(args.examples), "CAIRN_CONTRACT_REPORT": str(report)}
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider", "-k", args.k]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, check=False)
        counts = json.loads(report.read_text()) if report.exists() else {}
    summary = {
        "examples": args.examples,
        "requests": counts,
        "exit": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, sort_keys=True))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
