"""The web page's files (docs/web.md, node/faces/api/webui.py): what is served is what is shipped, in the wheel too, and
the scripts never render data as HTML.

- ``test_served_files_are_the_shipped_files``: ``FILES`` names exactly the files of ``node/faces/api/web/``, and each is
  matched by the package-data globs of pyproject.toml (so an installed wheel carries it).
- ``test_every_file_the_page_loads_is_served``: the page's ``/ui/…`` references and the modules' imports are in
  ``FILES`` (a missing one would be a 404 in the browser).
- ``test_scripts_never_render_html``: no ``innerHTML``, ``outerHTML``, ``insertAdjacentHTML``, ``document.write``
  or ``eval`` in the scripts: values are set as text (dom.js).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from node.faces.api.webui import FILES, WEB_DIR

ROOT = Path(__file__).resolve().parents[2]


def test_served_files_are_the_shipped_files() -> None:
    assert set(FILES) == {p.name for p in WEB_DIR.iterdir() if p.is_file()}
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["node.faces.api"]
    for name in FILES:
        assert any(fnmatch.fnmatch(f"web/{name}", g) for g in globs), f"{name} is not in the package data"


def test_every_file_the_page_loads_is_served() -> None:
    html = (WEB_DIR / "index.html").read_text()
    loaded = set(re.findall(r'"/ui/([^"]+)"', html))
    for script in WEB_DIR.glob("*.js"):
        loaded |= set(re.findall(r'from "\./([^"]+)"', script.read_text()))
    assert {"app.js", "app.css", "api.js", "dom.js", "query.js"} <= loaded
    assert loaded <= set(FILES), loaded - set(FILES)


def test_scripts_never_render_html() -> None:
    for script in WEB_DIR.glob("*.js"):
        text = script.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert sink not in text, f"{script.name} uses {sink}"
