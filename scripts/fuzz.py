"""Run the decoder and parser fuzz properties of tests/unit/test_fuzz_decoders.py longer than `make test` does.

    .venv/bin/python scripts/fuzz.py 20000                 # every target, 20,000 generated inputs each
    .venv/bin/python scripts/fuzz.py 5000 --target sql     # one target (repeat --target for several)

Same properties, same seed corpus (replayed first), more examples: every input must end in a typed error or a valid
result. A failure prints hypothesis's shrunk input; save it under tests/data/fuzz/<target>/ (the corpus the bounded
test replays) once the decoder is fixed. Prints one JSON line per target: inputs tried, seconds, result.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("FUZZ_TRACEMALLOC", "1")  # long runs also bound each call's Python allocations
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: the tests package is the source

# Imported by name, not followed by mypy (which checks scripts/, not tests/): the properties live with the test.
_props: Any = importlib.import_module("tests.unit.test_fuzz_decoders")
TARGETS, corpus, property_test, run_one = _props.TARGETS, _props.corpus, _props.property_test, _props.run_one


def fuzz(name: str, examples: int) -> dict[str, object]:
    """Replay the corpus of ``name``, then run its property on ``examples`` generated inputs."""
    t0 = time.monotonic()
    seeds = corpus(name)
    for path in seeds:
        run_one(name, path.read_bytes())
    try:
        property_test(name, examples)()
        result = "ok"
    except Exception as e:  # noqa: BLE001  a finding: reported (hypothesis printed the shrunk input), the run goes on
        traceback.print_exc()
        result = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return {
        "target": name,
        "corpus": len(seeds),
        "examples": examples,
        "seconds": round(time.monotonic() - t0, 1),
        "result": result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("examples", type=int, help="generated inputs per target")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="only this target (repeatable)")
    args = parser.parse_args(argv)
    failed = 0
    for name in args.target or sorted(TARGETS):
        report = fuzz(name, args.examples)
        failed += report["result"] != "ok"
        print(json.dumps(report), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
