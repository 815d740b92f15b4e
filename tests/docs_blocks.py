"""The shell commands that README.md and docs/*.md show, as data, and the shape of their output.

A block is a fenced ```console (``$ `` lines, each followed by the output it shows) or ```sh block (each line a
command). A heredoc (``cat > f <<'EOF'`` … ``EOF``) belongs to its command. Blocks are named by file, the heading
they sit under and their place under it (``datasets.md › Ingest #1``), so prose edits do not rename them.

What a doc shows is compared with what ran after `shape`, which maps what belongs to one run or one node (CIDs of
keys and times, peer ids, ports, timings, temporary paths, column widths) to placeholders; everything else (words,
row counts, values, the lines and their order) must match. A shown line ``…`` stands for any number of lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGS = ("console", "sh")


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    path: Path
    line: int
    key: str
    steps: list[Step]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _steps(lang: str, body: list[str]) -> list[Step]:
    steps: list[Step] = []
    lines = iter(body)
    for line in lines:
        if lang == "sh":
            if line.strip() and not line.lstrip().startswith("#"):
                steps.append(Step(line))
            continue
        if not line.startswith("$ "):
            if steps:
                steps[-1].shown.append(line)
            continue
        command = line[2:]
        heredoc = re.search(r"<<'?(\w+)'?", command)
        if heredoc:  # the document the command reads is part of it
            for more in lines:
                command += "\n" + more
                if more == heredoc.group(1):
                    break
        steps.append(Step(command))
    return steps


def blocks() -> list[Block]:
    found: list[Block] = []
    for path in doc_files():
        heading, count = "", 0
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("#"):
                heading, count = line.lstrip("#").strip(), 0
            fence = re.match(r"^```(\w*)$", line)
            if fence:
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                if fence.group(1) in SHELL_LANGS:
                    count += 1
                    key = f"{path.name} › {heading} #{count}"
                    found.append(Block(path, i + 1, key, _steps(fence.group(1), lines[i + 1 : end])))
                i = end
            i += 1
    return found


# What is one run's or one node's, mapped to a placeholder: applied to what a doc shows and to what ran alike.
# The first ones are values a user copies from one command into the next (`learn` pairs them up).
_VALUES = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z|\b\d{4}-…"), "<time>"),
    (re.compile(r"\bbaf[a-zA-Z0-9]*…?"), "<cid>"),
    (re.compile(r"\bQm[1-9A-HJ-NP-Za-km-z]{44}"), "<cid>"),
    (re.compile(r"\b12D3KooW[1-9A-HJ-NP-Za-km-z]*…?"), "<peer>"),
    (re.compile(r"did:key:z[1-9A-HJ-NP-Za-km-z]*…?"), "<did>"),
    (re.compile(r"\b[0-9a-f]{10,}…?|\b[0-9a-f]{4,}…"), "<hex>"),
    (re.compile(r"(?<=127\.0\.0\.1[:/])(tcp/)?\d+"), "<port>"),
]
_NOISE = [
    (re.compile(r"\b\d+(\.\d+)? (ms|s)\b"), r"<t> \2"),
    (re.compile(r"(/tmp|/work)/\S*/"), "<dir>/"),
    (re.compile(r"━+"), "━"),
    (re.compile(r"\s+"), " "),
]


def shape(line: str, here: str = "", exact: str = r"^$") -> str:
    if here:
        line = line.replace(here + "/", "<dir>/")
    keep = re.search(exact, line) is not None
    for pattern, to in _VALUES + _NOISE:
        if not (keep and to == "<cid>"):
            line = pattern.sub(to, line)
    return line.strip()


def learn(shown: str, got: str) -> dict[str, str]:
    """The values a doc's line shows, paired with this run's (the lines have the same shape)."""
    pairs: dict[str, str] = {}
    for pattern, to in _VALUES:
        a, b = [m.group(0) for m in pattern.finditer(shown)], [m.group(0) for m in pattern.finditer(got)]
        if len(a) == len(b):
            pairs.update((x, y) for x, y in zip(a, b, strict=True) if x != y and len(x) >= 5)
        shown, got = pattern.sub(to, shown), pattern.sub(to, got)
    return pairs


def _same(want: str, have: str) -> bool:
    if "…" not in want:
        return want == have
    return re.fullmatch(".*".join(re.escape(p) for p in want.split("…")), have) is not None


def align(shown: list[str], got: list[str], here: str = "", exact: str = r"^$") -> list[tuple[str, str]] | None:
    """`got` has the shown lines, in order and nothing else (a shown `…` stands for any number of lines, a `…`
    within a line for any text): the (shown, got) pairs of lines, or None."""
    want = [(s, shape(s, exact=exact)) for s in shown if s.strip()]
    have = [(g, shape(g, here, exact)) for g in got if g.strip()]
    return _align(want, have)


def _align(want: list[tuple[str, str]], have: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    if not want:
        return [] if not have else None
    if want[0][1].startswith("…"):  # any lines; what follows the mark is the doc's comment on them
        for k in range(len(have) + 1):
            rest = _align(want[1:], have[k:])
            if rest is not None:
                return rest
        return None
    if not have or not _same(want[0][1], have[0][1]):
        return None
    rest = _align(want[1:], have[1:])
    return None if rest is None else [(want[0][0], have[0][0]), *rest]


def matches(shown: list[str], got: list[str], here: str = "") -> bool:
    return align(shown, got, here) is not None
