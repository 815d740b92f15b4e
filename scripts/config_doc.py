"""Rewrite the settings table of docs/configuration.md from config/settings.py (the one source)."""

from __future__ import annotations

import re
from pathlib import Path

from config import iter_fields

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"


def table() -> str:
    rows = ["| setting | environment | type | default | meaning |", "|---|---|---|---|---|"]
    for key, default, tp, doc in iter_fields():
        env = "CAIRN_" + key.replace(".", "_").upper()
        shown = f'"{default}"' if isinstance(default, str) else repr(default)
        rows.append(f"| `{key}` | `{env}` | {tp} | `{shown}` | {doc} |")
    return "\n".join(rows)


def main() -> None:
    text = DOC.read_text()
    text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), f"{BEGIN}\n{table()}\n{END}", text, flags=re.S)
    DOC.write_text(text)


if __name__ == "__main__":
    main()
