"""Rewrite docs/openapi.json from the route table (node/faces/api/server.py ROUTES, the one source).

    .venv/bin/python scripts/openapi_doc.py

tests/integration/test_api_contract.py::test_the_committed_document_is_current fails while the file is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere

from node import __version__
from node.faces.api.openapi import COMMITTED, default_document, render
from node.faces.api.server import ROUTES


def main() -> None:
    COMMITTED.write_text(render(default_document(ROUTES, __version__)))
    print(f"wrote {COMMITTED}")


if __name__ == "__main__":
    main()
