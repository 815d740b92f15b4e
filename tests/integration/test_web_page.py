"""The node's web page (docs/web.md) in a real browser: Playwright (PyPI) driving Debian's
``chromium`` (scripts/setup/chromium.sh) against a real in-process node (the session's real Kubo, a real Spark
worker) served on a real 127.0.0.1 port.

- ``test_the_page_ingests_queries_and_explains_an_execution``: load ``/``; ingest a CSV through the page's file
  input (the token dialog opens once, the token is entered); run a query: the result table (checked against
  DuckDB over the same CSV) under the ``computed`` badge; run it again: ``hit``; open the execution's page: the
  offline checks pass, the sample rows and the lineage graph are shown; a screenshot of each view is saved to
  ``$CAIRN_ARTEFACTS`` (default ``tests/artefacts/``); a query of minutes shows Spark's stages live in its job's
  row, and its Cancel button ends it. No console error and no Content-Security-Policy violation
  was logged all along; an inline script injected at the end is refused and reported, so that check can fail.
- ``test_the_token_is_asked_once_and_again_when_refused``: a refused token opens the dialog again; the right one is
  kept for the tab (a reload asks nothing) until "Forget the token".
- ``test_the_page_files_are_served_with_their_policy``: only the known files, with their types and headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from aiohttp.test_utils import TestClient
from multiformats import CID, multihash
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, async_playwright, expect

from node.adapters.ipfs import ManagedKubo
from node.domain.model import cid_str
from node.faces.api.webui import CSP, FILES
from tests.fixtures.inprocess import add_csv, inprocess_node, wait_for

pytestmark = pytest.mark.kubo

ROOT = Path(__file__).resolve().parents[2]
ARTEFACTS = Path(os.environ.get("CAIRN_ARTEFACTS") or ROOT / "tests" / "artefacts")
# A cell that is markup: the page must show it as text (an <img> whose onerror ran would also be a CSP violation)
MARKUP = "<img src=x onerror=alert(1)>"
CSV = f"city,pop,founded\nParis,2100000,-250\nLyon,520000,-43\n{MARKUP},400000,1\nNice,340000,-350\nLille,230000,640\n"
CSV_BYTES = CSV.encode()
SQL = "SELECT city, pop FROM c WHERE pop > 300000 ORDER BY pop DESC"
LONG_ROWS = 200_000  # a self join of minutes: only ever cancelled
SPARK = 120_000  # ms: the first query starts the node's Spark worker
# Reported by the page itself: a CSP violation also shows as a console error, this says which directive.
WATCH_CSP = (
    "document.addEventListener('securitypolicyviolation', "
    "(e) => console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI))"
)


def expected_rows(csv: Path) -> list[list[str]]:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW c AS SELECT * FROM read_csv('{csv}')")
    return [[str(v) for v in row] for row in con.sql(SQL).fetchall()]


def csp_reported(problems: list[str]) -> Callable[[], Awaitable[bool]]:
    async def reported() -> bool:
        return any("CSP violation: script-src" in p for p in problems)

    return reported


async def table_text(page: Page, selector: str) -> list[list[str]]:
    rows: list[list[str]] = await page.eval_on_selector_all(
        f"{selector} tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    return rows


async def shot(page: Page, name: str) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  one mkdir, instant
    path = ARTEFACTS / f"web-page-{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    return path


async def ingest(page: Page, csv: Path, token: str) -> None:
    await expect(page.locator("#datasets")).to_contain_text("No dataset yet")
    await page.set_input_files("#file", str(csv))
    await page.fill("#dataset-name", "cities")
    await page.click("#upload")
    await expect(page.locator("#token-dialog")).to_be_visible()  # the first write asks for the token
    await page.fill("#token-input", token)
    await page.click("#token-save")
    await expect(page.locator("#ingested")).to_contain_text("cities: 5 rows added", timeout=30_000)
    await expect(page.locator("#datasets tr[data-name='cities'] td.num").first).to_have_text("5")


async def run_query(page: Page, badge: str) -> None:
    await page.click("#run")
    await expect(page.locator("#result .answer .badge")).to_have_text(badge, timeout=SPARK)
    await expect(page.locator("#result .timings")).to_contain_text("answered in")


async def test_the_page_ingests_queries_and_explains_an_execution(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: `make setup` installs it (scripts/setup/chromium.sh)"
    csv = tmp_path / "cities.csv"
    csv.write_bytes(CSV_BYTES)
    problems: list[str] = []
    # no plan limit: the cancelled query is a join of minutes that the default limit would refuse before it ran
    no_limit = {"spark.max_plan_bytes": 0}
    async with inprocess_node(tmp_path / "node", kubo_session, **no_limit) as (node, client), async_playwright() as pw:
        warm = asyncio.ensure_future(node.spark.ensure())  # the worker's JVM starts while the browser does
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            await page.add_init_script(WATCH_CSP)
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
            await page.goto(f"{node.api_url}/")
            await ingest(page, csv, node.home.token())
            await shot(page, "datasets")
            await check_dataset_and_peers(page, client)
            await page.click("nav a[href='#/']")
            await page.click("#datasets tr[data-name='cities'] a:text('query')")
            await page.fill("#sql", SQL)
            await page.fill("#inputs", "c = cities")
            await warm
            await run_query(page, "computed")
            assert await table_text(page, "#result table.result") == expected_rows(csv)
            assert MARKUP in [r[0] for r in expected_rows(csv)]
            assert await page.locator("#result table.result img").count() == 0  # shown as text, not as markup
            await run_query(page, "hit")  # the same query again: answered from the node's index
            assert await table_text(page, "#result table.result") == expected_rows(csv)
            await expect(page.locator("#jobs li.job[data-state='done']")).to_have_count(2)
            await shot(page, "query")
            await check_execution_page(page, csv)
            await check_cancel(page, client)
            assert problems == [], problems
            await page.evaluate("document.body.append(Object.assign(document.createElement('script'), {text: '1'}))")
            await wait_for(csp_reported(problems), 10, "the page to report the inline script's CSP violation")
        finally:
            await browser.close()


async def check_execution_page(page: Page, csv: Path) -> None:
    await page.click("#result .answer a.cid")
    await expect(page.locator("#execution-title")).to_be_visible()
    await expect(page.locator("#checks")).to_contain_text("checks pass", timeout=30_000)
    await expect(page.locator("pre.sql")).to_contain_text("WHERE")  # the canonical SQL of the query block
    await expect(page.locator("table.checks tbody tr")).not_to_have_count(0)
    statuses = await page.eval_on_selector_all("table.checks tbody tr td:first-child", "c => c.map(x => x.textContent)")
    assert set(statuses) == {"ok"}, statuses
    await expect(page.locator("table.result tbody tr")).to_have_count(len(expected_rows(csv)))
    await expect(page.locator("svg.lineage g.lineage-node").first).to_be_visible(timeout=30_000)
    kinds = await page.eval_on_selector_all("svg.lineage g.lineage-node", "g => g.map(x => x.dataset.kind)")
    assert {"receipt", "execution", "dataset"} <= set(kinds), kinds
    assert "#/execution/" in page.url  # the page's address, to share
    await page.click("#verify")  # recomputed on this node's Spark worker: a verify job, followed to its report
    await expect(page.locator("#verified")).to_have_text("1 reproduced, 0 diverged, 0 could not run", timeout=SPARK)
    await shot(page, "execution")


async def check_dataset_and_peers(page: Page, client: TestClient[Any, Any]) -> None:
    """The dataset's page lists its chain as the API does, with its events; the peers page says peers are off."""
    await page.click("#datasets tr[data-name='cities'] a:text('cities')")
    log = await (await client.get("/api/v0/datasets/cities/log")).json()
    await expect(page.locator("#chain tbody tr")).to_have_count(len(log["blocks"]))
    shown = await table_text(page, "#chain")
    assert [row[0] for row in shown] == [str(b["seq"]) for b in log["blocks"]]  # as the log gives them
    assert shown[0][0] == str(len(shown) - 1) and shown[-1][2] == "Seed"  # newest first, back to the Seed
    await expect(page.locator("svg.lineage g.lineage-node[data-kind='dataset']").first).to_be_visible()
    await shot(page, "dataset")
    await page.click("nav a[href='#/peers']")
    await expect(page.locator("#main")).to_contain_text("Peers are off on this node")
    await expect(page.locator("#main")).to_contain_text("No announcement received yet.")


async def check_cancel(page: Page, client: TestClient[Any, Any]) -> None:
    """A query of minutes, followed live (Spark's stages over the job's events), cancelled from its job's row."""
    await add_csv(client, "big", b"x\n" + b"".join(b"%d\n" % i for i in range(LONG_ROWS)))
    await page.click("nav a[href='#/query']")
    await page.fill("#sql", "SELECT count(*) AS n FROM big a JOIN big b ON a.x < b.x")
    await page.fill("#inputs", "big")  # a bare name: the dataset under its own name
    await page.click("#run")
    running = page.locator("#jobs li.job[data-state='running']")
    await expect(running).to_contain_text("spark: stage", timeout=SPARK)
    await running.locator("button.cancel").click()
    await expect(page.locator("#result .error")).to_contain_text("was cancelled", timeout=60_000)
    await expect(page.locator("#jobs li.job[data-state='cancelled']")).to_have_count(1)
    await shot(page, "cancelled")


async def test_the_token_is_asked_once_and_again_when_refused(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """A wrong token: the node refuses it (401) and the dialog asks again; the right one is kept for the tab (a
    reload asks nothing for the next write) until the page is told to forget it."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: `make setup` installs it (scripts/setup/chromium.sh)"
    csv = tmp_path / "cities.csv"
    csv.write_bytes(CSV_BYTES)
    errors: list[str] = []
    async with inprocess_node(tmp_path / "node", kubo_session) as (node, _), async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            await page.goto(f"{node.api_url}/")
            await page.set_input_files("#file", str(csv))
            await page.click("#upload")
            await page.fill("#token-input", "not-the-token")
            await page.click("#token-save")
            await expect(page.locator("#token-why")).to_have_text("The node refused this token.")
            await page.fill("#token-input", node.home.token())
            await page.click("#token-save")
            await expect(page.locator("#ingested")).to_contain_text("cities: 5 rows added")
            await page.reload()
            await page.set_input_files("#file", str(csv))
            await page.fill("#dataset-name", "again")
            await page.click("#upload")
            await expect(page.locator("#ingested")).to_contain_text("again: 5 rows added")
            assert not await page.locator("#token-dialog").is_visible()  # kept: not asked again
            await page.click("#token-button")  # "Forget the token"
            await expect(page.locator("#token-button")).to_have_text("Enter the token")
            assert await page.evaluate("sessionStorage.length") == 0
        finally:
            await browser.close()
    assert len(errors) == 1 and "401" in errors[0], errors  # the browser's own line for the refused request


async def test_the_page_files_are_served_with_their_policy(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "node", kubo_session) as (_, client):
        pages: dict[str, Any] = {}
        for path in ["/", *(f"/ui/{name}" for name in FILES)]:
            resp = await client.get(path, headers={"Authorization": ""})
            assert resp.status == 200, path
            pages[path] = resp
            assert resp.headers["Content-Security-Policy"] == CSP
            assert resp.headers["Cache-Control"] == "no-cache"
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert pages["/"].content_type == "text/html" and "/ui/app.js" in await pages["/"].text()
        assert pages["/ui/app.js"].content_type == "text/javascript"
        assert pages["/ui/app.css"].content_type == "text/css"
        for bad in ("/ui/nope.js", "/ui/..%2Fwebui.py", "/ui/%2E%2E%2Fserver.py"):
            resp = await client.get(bad)
            assert resp.status == 404, bad
            assert (await resp.json())["error"]["type"] == "NotFound"


async def test_a_page_from_the_gateway_cannot_read_the_token(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    """Bytes anyone can have the node serve under /ipfs/ (an identity CID: every node "holds" it), opened in the tab
    that keeps the token: HTML is saved, not shown (its script would put the token in its title), and a file that
    is shown (text) has an origin of its own: neither can read the tab's sessionStorage."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: `make setup` installs it (scripts/setup/chromium.sh)"
    script = b"<html><script>document.title='ran '+sessionStorage.getItem('cairn.api-token')</script></html>"
    html, text = identity_cid(script), identity_cid(b"plain text, shown as it is")
    settings = {"ipfs.gateway": kubo_session.gateway_url}  # Kubo's gateway serves the script as text/html
    async with inprocess_node(tmp_path / "node", kubo_session, **settings) as (node, _), async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = await browser.new_page(accept_downloads=True)
            downloads: list[str] = []
            page.on("download", lambda d: downloads.append(d.url))
            await page.goto(f"{node.api_url}/")
            await page.evaluate("sessionStorage.setItem('cairn.api-token', 'the-tabs-token')")
            for n, url in enumerate((f"{node.api_url}/ipfs/{html}", f"{node.api_url}/ipfs/{html}?filename=x.html")):
                with contextlib.suppress(PlaywrightError):  # a download: "net::ERR_ABORTED" / "Download is starting"
                    await page.goto(url)
                assert "ran" not in await page.title(), await page.title()  # no script of it ran in this tab
                await wait_for(lambda n=n: _at_least(downloads, n + 1), 30, f"the download of {url}")
            await page.goto(f"{node.api_url}/ipfs/{text}")  # shown inline, sandboxed
            assert await page.evaluate("window.origin") == "null"
            assert await page.evaluate(READ_TOKEN) == "SecurityError"
            await page.goto(f"{node.api_url}/")  # the page itself still has its token
            assert await page.evaluate("sessionStorage.getItem('cairn.api-token')") == "the-tabs-token"
        finally:
            await browser.close()


READ_TOKEN = "(() => { try { return sessionStorage.getItem('cairn.api-token'); } catch (e) { return e.name; } })()"


def identity_cid(data: bytes) -> str:
    """A CID whose bytes are in the CID itself: any node serves it without storing anything."""
    return cid_str(CID("base32", 1, "raw", multihash.get("identity").wrap(data)))


async def _at_least(items: list[str], n: int) -> bool | None:
    return True if len(items) >= n else None
