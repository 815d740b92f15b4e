"""Deterministic queries end to end: two in-process nodes (real Kubo, real Spark workers), each answering over its
HTTP app; expected rows come from DuckDB over the same CSV bytes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
import pytest_asyncio
from multiformats import CID

from node.adapters.ipfs import ManagedKubo
from node.domain.model import cid_str, decode, decode_object
from tests.fixtures.inprocess import InNode, add_csv, ask, cli, inprocess_node, query, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")  # the nodes and their workers live for the module

SALES = (
    b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\nnorth,apple,1\n"
)
# Same rows, other column names: the same abstract structure and the same logical hash.
RENAMED = SALES.replace(b"region,product,amount", b"zone,item,qty")
PRICES = b"product,price\napple,2\npear,3\nfig,5\n"
TABLES = {"sales": SALES, "renamed": RENAMED, "prices": PRICES}

SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("q-csv")
    for name, data in TABLES.items():
        (d / f"{name}.csv").write_bytes(data)
    return d


def duck(csv_dir: Path, sql: str) -> list[list[Any]]:
    """The oracle: DuckDB over the same CSV files, each bound to its dataset's name."""
    con = duckdb.connect()
    for name in TABLES:
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_csv('{csv_dir / name}.csv')")
    return [list(r) for r in con.sql(sql).fetchall()]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def nodes(
    kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[InNode, InNode]]:
    base = tmp_path_factory.mktemp("q")
    async with inprocess_node(base / "a", kubo_session) as a, inprocess_node(base / "b", kubo_session) as b:
        await asyncio.gather(a[0].spark.ensure(), b[0].spark.ensure())
        for _, client in (a, b):
            for name, data in TABLES.items():
                await add_csv(client, name, data)
        yield a, b


def spark_jobs(n: InNode) -> int:
    return n[0].worker.jobs_sent


async def test_miss_then_hit_without_spark(nodes: Any, csv_dir: Path) -> None:
    a, _ = nodes
    first = await ask(a[1], SQL)
    assert first["source"] == "computed"
    assert first["rows"] == duck(csv_dir, SQL)
    assert first["columns"] == ["region", "total"] and first["row_count"] == 3
    jobs = spark_jobs(a)
    again = await ask(a[1], SQL)
    assert again["source"] == "local" and spark_jobs(a) == jobs  # the worker received no job
    for key in ("query", "invocation", "execution", "receipt", "logicalHash", "rows"):
        assert again[key] == first[key]


@pytest.mark.parametrize(
    "variant",
    [
        "select region, sum(amount) as total from sales group by region order by region",
        "SELECT  `region` ,SUM(`amount`)  FROM sales\n GROUP BY region ORDER BY region ASC",
        "SELECT s.region, SUM(s.amount) AS t FROM sales AS s GROUP BY s.region ORDER BY s.region",
    ],
)
async def test_equivalent_spellings_collide(nodes: Any, variant: str) -> None:
    a, _ = nodes
    base, other = await ask(a[1], SQL), await ask(a[1], variant)
    assert (other["query"], other["invocation"], other["source"]) == (base["query"], base["invocation"], "local")


async def test_same_shape_other_names_collides(nodes: Any) -> None:
    a, _ = nodes
    base = await ask(a[1], SQL)
    jobs = spark_jobs(a)
    other = await ask(a[1], "SELECT zone, SUM(qty) AS total FROM t GROUP BY zone ORDER BY zone", t="renamed")
    assert other["query"] == base["query"]
    assert other["invocation"] == base["invocation"]  # same content: same invocation, reused
    assert other["source"] == "local" and spark_jobs(a) == jobs
    assert other["columns"] == ["zone", "total"] and other["rows"] == base["rows"]


@pytest.mark.parametrize(
    "changed",
    [
        "SELECT region, SUM(amount) AS total FROM sales WHERE amount > 2 GROUP BY region ORDER BY region",
        "SELECT region, MAX(amount) AS total FROM sales GROUP BY region ORDER BY region",
        "SELECT region, SUM(amount) + 1 AS total FROM sales GROUP BY region ORDER BY region",
        "SELECT product, SUM(amount) AS total FROM sales GROUP BY product ORDER BY product",
    ],
)
async def test_different_questions_do_not_collide(nodes: Any, changed: str, csv_dir: Path) -> None:
    a, _ = nodes
    out = await ask(a[1], changed)
    assert out["query"] != (await ask(a[1], SQL))["query"]
    assert out["rows"] == duck(csv_dir, changed)


async def test_join_of_two_inputs(nodes: Any, csv_dir: Path) -> None:
    a, _ = nodes
    sql = (
        "SELECT s.product, SUM(s.amount * p.price) AS revenue FROM sales s JOIN prices p "
        "ON s.product = p.product GROUP BY s.product ORDER BY s.product"
    )
    out = await ask(a[1], sql, sales="sales", prices="prices")
    assert out["rows"] == duck(csv_dir, sql)


@pytest.mark.parametrize(
    "sql,rule",
    [
        ("SELECT reflect('java.lang.System', 'exit', '0') FROM sales", "reflect"),
        ("SELECT * FROM text.`/etc/hostname`", "hostname"),
        ("SELECT rand() FROM sales", "rand"),
        ("SELECT current_timestamp() FROM sales", "current_timestamp"),
        ("DROP TABLE sales", "DROP"),
        ("SELECT * FROM sales; SELECT 1", "statement"),
        ("SELECT * FROM other_table", "other_table"),
        ("SELECT region FROM sales LIMIT 2", "LIMIT"),
    ],
)
async def test_forbidden_sql_is_refused_before_spark(nodes: Any, sql: str, rule: str) -> None:
    a, _ = nodes
    jobs = spark_jobs(a)
    status, out = await query(a[1], {"sql": sql, "inputs": {"sales": "sales"}})
    assert status == 400, out
    assert out["error"]["message"].startswith("query refused") and rule.lower() in out["error"]["message"].lower(), out
    assert spark_jobs(a) == jobs


async def test_fifty_concurrent_identical_misses_run_one_job(nodes: Any) -> None:
    a, _ = nodes
    sql = "SELECT product, COUNT(*) AS n FROM sales GROUP BY product ORDER BY product"
    jobs = spark_jobs(a)
    answers = await asyncio.gather(*(query(a[1], {"sql": sql, "inputs": {"sales": "sales"}}) for _ in range(50)))
    assert all(status == 200 for status, _ in answers)
    assert spark_jobs(a) == jobs + 1
    assert len({json.dumps({k: o[k] for k in ("invocation", "execution", "rows")}) for _, o in answers}) == 1


async def test_two_nodes_compute_the_same_execution(nodes: Any) -> None:
    a, b = nodes
    sql = "SELECT region, AVG(amount) AS mean FROM sales GROUP BY region ORDER BY region"
    ra, rb = await ask(a[1], sql), await ask(b[1], sql)
    assert ra["source"] == rb["source"] == "computed"
    for key in ("query", "invocation", "execution", "logicalHash", "slices"):
        assert ra[key] == rb[key], key
    assert ra["receipt"] != rb["receipt"]  # each node signs its own receipt


async def test_execution_record_and_whole_result(nodes: Any, tmp_path: Path, csv_dir: Path) -> None:
    a, _ = nodes
    out = await ask(a[1], SQL)
    resp = await a[1].get(f"/api/v0/executions/{out['execution']}")
    ex = await resp.json()
    assert resp.status == 200 and ex["invocation"] == out["invocation"] and ex["engine"]["name"] == "spark"
    # The CLI (a real `cairn` process) against the in-process node: the whole result as a file.
    dest = tmp_path / "all.csv"
    rc, _, err = await cli(a[0], "query", SQL, "--input", "sales=sales", "-o", str(dest))
    assert rc == 0, err.decode()
    # RFC 4180: CRLF records, fields quoted only when they must be; the query's own column names.
    body = "".join(f"{r},{t}\r\n" for r, t in duck(csv_dir, SQL))
    assert dest.read_bytes() == f"region,total\r\n{body}".encode()
    rc, stdout, _ = await cli(a[0], "query", SQL, "--input", "sales=sales", "--json")
    assert rc == 0 and json.loads(stdout)["source"] == "local"


async def test_job_events_stream(nodes: Any) -> None:
    a, _ = nodes
    body = {"sql": "SELECT COUNT(*) AS n FROM sales", "inputs": {"sales": "sales"}, "wait": False}
    status, job = await query(a[1], body)
    assert status == 202
    text = await (await a[1].get(job["events"])).text()
    kinds = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "started" and "done" in kinds and kinds[-1] == "result"
    final = json.loads(text.strip().splitlines()[-1].split(": ", 1)[1])
    assert final["rows"] == [[SALES.count(b"\n") - 1]]


async def test_worker_killed_mid_query_is_a_clear_error_then_recovers(nodes: Any, csv_dir: Path) -> None:
    a, _ = nodes
    pid = a[0].worker.pid
    assert pid is not None
    jobs = spark_jobs(a)
    # A query slow enough to be killed in the middle: the input cross-joined with itself 12 times (6^12 rows).
    slow = "SELECT COUNT(*) AS n FROM sales x0 " + " ".join(f"CROSS JOIN sales x{i}" for i in range(1, 12))
    status, job = await query(a[1], {"sql": slow, "inputs": {"sales": "sales"}, "wait": False})
    assert status == 202, job

    async def reached() -> bool:
        return spark_jobs(a) > jobs

    await wait_for(reached, 60, "the slow job to reach the Spark worker")
    os.kill(pid, signal.SIGKILL)

    async def ended() -> dict[str, Any] | None:
        view = await (await a[1].get(f"/api/v0/jobs/{job['job']}")).json()
        return view if view["state"] != "running" else None

    view = await wait_for(ended, 120, "the job to end")
    assert view["state"] == "failed" and "worker" in view["error"]["message"].lower(), view
    sql = "SELECT MIN(amount) AS m FROM sales"
    assert (await ask(a[1], sql))["rows"] == duck(csv_dir, sql)


# --- implicit inputs, canonical equivalences, did-you-mean ---------------------------------------------------


async def ask_implicit(client: Any, sql: str, **inputs: str) -> dict[str, Any]:
    """A query that must succeed, declaring only ``inputs`` (none: every table by its dataset's name)."""
    status, out = await query(client, {"sql": sql, **({"inputs": inputs} if inputs else {})})
    assert status == 200, out
    return out


JOIN = (
    "SELECT s.product, SUM(s.amount * p.price) AS revenue FROM sales s JOIN prices p "
    "ON s.product = p.product GROUP BY s.product ORDER BY s.product"
)


async def test_a_table_named_like_a_dataset_needs_no_input(nodes: Any) -> None:
    a, _ = nodes
    explicit = await ask(a[1], SQL)  # --input sales=sales
    jobs = spark_jobs(a)
    for sql in (SQL, SQL.replace("FROM sales", "FROM SALES")):  # Spark's table names are case-insensitive
        implicit = await ask_implicit(a[1], sql)
        assert (implicit["query"], implicit["invocation"]) == (explicit["query"], explicit["invocation"])
        assert implicit["source"] == "local"
        assert list(implicit["inputs"].values()) == list(explicit["inputs"].values())  # keyed as the SQL names it
    assert spark_jobs(a) == jobs


async def test_explicit_and_implicit_inputs_mix(nodes: Any, csv_dir: Path) -> None:
    a, _ = nodes
    both = await ask(a[1], JOIN, sales="sales", prices="prices")
    mixed = await ask_implicit(a[1], JOIN, sales="sales")  # prices by name
    none = await ask_implicit(a[1], JOIN)
    assert both["invocation"] == mixed["invocation"] == none["invocation"]
    assert mixed["inputs"] == none["inputs"] == both["inputs"] and mixed["rows"] == duck(csv_dir, JOIN)
    # An explicit input wins over the dataset of the same name.
    renamed = await ask_implicit(a[1], "SELECT COUNT(*) AS n FROM sales", sales="renamed")
    assert renamed["inputs"]["sales"] != both["inputs"]["sales"]


async def test_a_cte_is_never_taken_for_a_dataset(nodes: Any) -> None:
    a, _ = nodes
    sql = (
        "WITH prices AS (SELECT product, amount FROM sales) "
        "SELECT product, SUM(amount) AS n FROM prices GROUP BY product"
    )
    out = await ask_implicit(a[1], sql)
    assert list(out["inputs"]) == ["sales"]


@pytest.mark.parametrize(
    "inputs,sql,status,needles",
    [
        ({}, "SELECT region FROM sale", 400, ["unknown-table", "sale", "did you mean 'sales'"]),
        ({}, "SELECT regoin FROM sales", 400, ["unknown-column", "regoin", "did you mean 'region'"]),
        ({}, "SELECT s.amont FROM sales s", 400, ["unknown-column", "amont", "did you mean 'amount'"]),
        ({"sales": "salse"}, "SELECT region FROM sales", 404, ["no dataset named 'salse'", "did you mean 'sales'"]),
        ({}, "SELECT 1 AS one", 400, ["reads at least one dataset"]),
    ],
)
async def test_unknown_names_say_what_was_meant(
    nodes: Any, inputs: dict[str, str], sql: str, status: int, needles: list[str]
) -> None:
    a, _ = nodes
    jobs = spark_jobs(a)
    got, out = await query(a[1], {"sql": sql, "inputs": inputs})
    assert got == status, out
    assert all(n in out["error"]["message"] for n in needles), out
    assert spark_jobs(a) == jobs


async def test_cli_query_without_input_and_did_you_mean(nodes: Any, csv_dir: Path) -> None:
    a, _ = nodes
    rc, stdout, err = await cli(a[0], "query", SQL, "--json")
    assert rc == 0, err.decode()
    assert json.loads(stdout)["rows"] == duck(csv_dir, SQL)
    for command in (
        ["log", "salse"],
        ["get", "salse", "-o", str(csv_dir / "x.csv")],
        ["add", str(csv_dir / "sales.csv"), "--to", "salse"],
        ["query", "SELECT 1 FROM sale"],
    ):
        rc, _, err = await cli(a[0], *command)
        assert rc != 0 and "did you mean 'sales'" in err.decode(), (command, err.decode())


EQUIVALENT = [
    (
        "SELECT region, COUNT(*) AS n FROM sales GROUP BY region ORDER BY region",
        "SELECT region, count(1) AS n FROM sales GROUP BY region ORDER BY region",
    ),
    (
        "SELECT product, amount FROM sales WHERE amount BETWEEN 3 AND 10",
        "SELECT product, amount FROM sales WHERE 3 <= amount AND amount <= 10",
    ),
    (
        "SELECT product, amount FROM sales WHERE region IN ('north', 'east')",
        "SELECT product, amount FROM sales WHERE region IN ('east', 'north', 'east')",
    ),
    (JOIN, JOIN.replace("ON s.product = p.product", "ON p.product = s.product")),
]


@pytest.mark.parametrize("first,second", EQUIVALENT, ids=["count", "between", "in", "join"])
async def test_an_equivalent_spelling_is_a_local_hit(nodes: Any, csv_dir: Path, first: str, second: str) -> None:
    a, _ = nodes
    one = await ask_implicit(a[1], first)
    jobs = spark_jobs(a)
    two = await ask_implicit(a[1], second)
    assert (two["query"], two["invocation"], two["execution"]) == (one["query"], one["invocation"], one["execution"])
    assert two["source"] == "local" and spark_jobs(a) == jobs  # no Spark job
    assert sorted(two["rows"]) == sorted(duck(csv_dir, second))


async def test_a_kept_answer_follows_its_dataset(nodes: Any) -> None:
    """A repeated local hit comes from the node's kept answers (node/services/resolve/answers.py): the same bytes but
    ``elapsed_ms``; an append moves the dataset's head, and the very next ask reads the new version."""
    a, _ = nodes
    first_rows = b"g,x\na,1\nb,2\na,3\n"
    await add_csv(a[1], "kept", first_rows)
    sql = "SELECT g, SUM(x) AS s FROM kept GROUP BY g ORDER BY g"
    computed = await ask(a[1], sql, kept="kept")
    hit = await ask(a[1], sql, kept="kept")
    assert hit["source"] == "local" and computed["source"] == "computed"
    kept_before = len(a[0].answers)
    again = await ask(a[1], sql, kept="kept")
    assert len(a[0].answers) == kept_before  # the same entry served, none added
    assert {k: v for k, v in again.items() if k != "elapsed_ms"} == {k: v for k, v in hit.items() if k != "elapsed_ms"}
    assert hit["rows"] == [["a", 4], ["b", 2]]
    resp = await a[1].post("/api/v0/datasets", params={"to": "kept", "filename": "more.csv"}, data=b"g,x\nb,10\n")
    assert resp.status == 200, await resp.text()
    moved = await ask(a[1], sql, kept="kept")
    assert moved["source"] == "computed" and moved["rows"] == [["a", 4], ["b", 12]]
    assert moved["inputs"]["kept"] != hit["inputs"]["kept"]
    # Read by the dataset's name (an implicit input): the same rule.
    implicit = await query(a[1], {"sql": sql})
    assert implicit[0] == 200 and implicit[1]["rows"] == [["a", 4], ["b", 12]]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics parsed by prometheus_client's own parser: (sample name, labels) → value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


async def test_metrics_move_with_real_misses_hits_and_refusals(nodes: Any) -> None:
    """Metrics: queries by source with their latency, Spark jobs, Kubo calls (read with the Prometheus
    parser before and after a real miss, hit and refusal)."""
    a, _ = nodes
    before = _samples(await (await a[1].get("/metrics")).text())
    sql = "SELECT product, COUNT(*) AS n FROM sales WHERE amount > 4 GROUP BY product ORDER BY product"
    assert (await ask(a[1], sql))["source"] == "computed"
    assert (await ask(a[1], sql))["source"] == "local"
    assert (await ask(a[1], sql))["source"] == "local"
    status, _ = await query(a[1], {"sql": "SELECT * FROM no_such_table", "inputs": {}})
    assert status == 400
    after = _samples(await (await a[1].get("/metrics")).text())

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert moved("cairn_queries_total", source="computed") == 1
    assert moved("cairn_queries_total", source="local") == 2
    assert moved("cairn_queries_total", source="refused") == 1
    assert after[("cairn_queries_total", (("source", "peer"),))] == 0  # every source is there before its first
    assert moved("cairn_query_seconds_count", source="local") == 2
    assert moved("cairn_query_seconds_bucket", source="local", le="+Inf") == 2
    assert moved("cairn_spark_jobs_run_total", outcome="ok") == 1
    assert moved("cairn_spark_job_seconds_count", outcome="ok") == 1
    assert sum(v for (n, _), v in after.items() if n == "cairn_kubo_calls_total") > sum(
        v for (n, _), v in before.items() if n == "cairn_kubo_calls_total"
    )
    assert after[("cairn_kubo_repo_bytes", ())] > 0 and ("cairn_jobs_running", ()) in after


async def _receipt(node: InNode, cid: str) -> Any:
    resp = await node[0].kubo.block_get(cid)
    return decode_object(decode(resp))


async def test_a_restriction_is_answered_from_a_cached_superset(nodes: Any, csv_dir: Path) -> None:
    """query.answer_from_supersets on node b: a filter+projection and a roll-up are computed from
    b's cached supersets (receipt ``derived``), with the execution (slices, logical hash) node a computes from the
    base data: in b with Arrow where node.domain.sql.arrow_eval computes the rewritten statement (receipt timings
    ``arrow_ms``, no Spark job), else on Spark (a scalar expression); a query no rule covers reads the base data.
    Oracle for the rows: DuckDB over the CSV."""
    a, b = nodes
    was = a[0].resolver.from_supersets, b[0].resolver.from_supersets
    a[0].resolver.from_supersets, b[0].resolver.from_supersets = False, True  # a computes from the base data
    try:
        pairs = [
            (
                "SELECT product, amount, region FROM sales WHERE amount < 100",
                "SELECT region, amount FROM sales WHERE amount < 10 AND amount > 1",
                "select-project",
                "arrow_ms",
            ),
            (
                "SELECT product, amount, region FROM sales WHERE amount < 90",
                "SELECT region, amount * 2 FROM sales WHERE amount < 50",
                "select-project",
                "compute_ms",
            ),
            (
                "SELECT region, product, SUM(amount), COUNT(*), MAX(amount) FROM sales GROUP BY region, product",
                "SELECT region, MAX(amount), COUNT(*), SUM(amount) FROM sales GROUP BY region",
                "rollup",
                "arrow_ms",
            ),
            (  # avg from sums and counts, guarded by min and max (node/domain/sql/rewrite.py "rollup"): on Spark
                "SELECT product, region, SUM(amount), COUNT(amount), MIN(amount), MAX(amount) FROM sales "
                "GROUP BY product, region",
                "SELECT product, AVG(amount) FROM sales GROUP BY product",
                "rollup",
                "compute_ms",
            ),
        ]
        receipts = []
        for cached_sql, new_sql, rule, evaluated in pairs:
            cached = await ask(b[1], cached_sql)
            jobs = b[0].resolver.worker.jobs_sent
            derived = await ask(b[1], new_sql)
            receipts.append(CID.decode(derived["receipt"]))
            scratch = await ask(a[1], new_sql)
            assert (cached["source"], derived["source"], scratch["source"]) == ("computed",) * 3
            assert sorted(derived["rows"]) == sorted(duck(csv_dir, new_sql))
            assert (derived["execution"], derived["logicalHash"]) == (scratch["execution"], scratch["logicalHash"])
            rc = await _receipt(b, derived["receipt"])
            # A derived answer is no candidate itself (its source answers all it can): the second pair's cached
            # query is a restriction of the first's, so the second's answer comes from the first's result.
            source = (await _receipt(b, cached["receipt"])).derived_from or CID.decode(cached["execution"])
            assert (rc.derived_from, rc.rewrite) == (source, rule)
            assert evaluated in rc.timings and jobs + (evaluated == "compute_ms") == b[0].resolver.worker.jobs_sent
            assert (await _receipt(a, scratch["receipt"])).derived_from is None

        async def pinned() -> bool | None:  # a derived answer's pin follows it: owed first, drained after
            kubo = b[0].resolver.kubo
            kinds = [(await kubo.pin_ls(r, type="recursive")).get(r) for r in receipts]
            return (kinds == ["recursive"] * len(receipts) and not b[0].index.pins.pending_pins()) or None

        await wait_for(pinned, 15.0, "the derived answers' receipts pinned recursively")
        before = b[0].resolver.derived
        refused = await ask(b[1], "SELECT region, AVG(amount * 2) FROM sales GROUP BY region")  # no rule: avg(expr)
        # 5: the four asked to be, and the second pair's cached query (a restriction of the first's)
        assert refused["source"] == "computed" and b[0].resolver.derived == before == 5
        metrics = await (await b[1].get("/metrics")).text()
        assert "\ncairn_answers_derived 5.0\n" in metrics
    finally:
        a[0].resolver.from_supersets, b[0].resolver.from_supersets = was


async def test_more_restrictions_than_the_candidate_window_are_all_derived(nodes: Any, csv_dir: Path) -> None:
    """Derived answers are not remembered as candidates: 40 restrictions of one cached roll-up,
    more than ``ShapeRepository.shape_candidates`` lists, are each derived from it, none computed from the base data."""
    b = nodes[1]
    was, b[0].resolver.from_supersets = b[0].resolver.from_supersets, True
    try:
        # over `renamed`: no other test caches a result of this shape there
        roll_up = "SELECT zone, qty, item, COUNT(*) FROM renamed GROUP BY zone, qty, item"
        cached = await ask(b[1], roll_up, renamed="renamed")
        before, jobs = b[0].resolver.derived, b[0].resolver.worker.jobs_sent
        for c in range(40):
            sql = f"SELECT item, COUNT(*) FROM renamed WHERE qty < {c} GROUP BY item"
            derived = await ask(b[1], sql, renamed="renamed")
            assert sorted(derived["rows"]) == sorted(duck(csv_dir, sql)), sql
            assert (await _receipt(b, derived["receipt"])).derived_from == CID.decode(cached["execution"]), sql
        assert (b[0].resolver.derived, b[0].resolver.worker.jobs_sent) == (before + 40, jobs)
    finally:
        b[0].resolver.from_supersets = was


async def test_an_appended_version_is_answered_from_the_old_result(nodes: Any) -> None:
    """Appends (under query.answer_from_supersets): node b computes over the first version of a
    dataset; the dataset gains rows on both nodes; b answers over the new version by running only over the new slice
    and merging (receipt ``derived``: the old execution, rule ``append``; cairn_answers_forwarded; with Arrow in the
    node where it computes the statement, else on Spark), with the execution (slices, logical hash) node a computes
    from scratch over the new version."""
    a, b = nodes
    was = a[0].resolver.from_supersets, b[0].resolver.from_supersets
    a[0].resolver.from_supersets, b[0].resolver.from_supersets = False, True  # a computes from the base data
    expected = {  # the oracle: the rows of g,x = (a,1) (b,2) (a,3) + (b,10) (c,4), by hand
        # first: asked after the next one, it would be a restriction of its result (select-project), not forwarded
        "SELECT x * 2, g FROM grow WHERE x > 1": [[4, "b"], [6, "a"], [8, "c"], [20, "b"]],
        "SELECT g, SUM(x), COUNT(*), MAX(x) FROM grow GROUP BY g": [["a", 4, 2, 3], ["b", 12, 2, 10], ["c", 4, 1, 4]],
        "SELECT x, g FROM grow WHERE x > 1": [[2, "b"], [3, "a"], [4, "c"], [10, "b"]],
    }
    # Where it was computed: in b with Arrow (node.domain.sql.arrow_eval.forward), or on Spark (a scalar expression).
    evaluated = {sql: "compute_ms" if "x * 2" in sql else "arrow_ms" for sql in expected}
    try:
        for n in (a, b):
            await add_csv(n[1], "grow", b"g,x\na,1\nb,2\na,3\n")
        old = {sql: await ask(b[1], sql, grow="grow") for sql in expected}
        for n in (a, b):
            resp = await n[1].post(
                "/api/v0/datasets", params={"to": "grow", "filename": "more.csv"}, data=b"g,x\nb,10\nc,4\n"
            )
            assert resp.status == 200, await resp.text()
        before = b[0].resolver.forwarded
        for sql, rows in expected.items():
            forwarded, scratch = await ask(b[1], sql, grow="grow"), await ask(a[1], sql, grow="grow")
            assert (old[sql]["source"], forwarded["source"], scratch["source"]) == ("computed",) * 3
            assert forwarded["inputs"]["grow"] != old[sql]["inputs"]["grow"]
            assert sorted(forwarded["rows"]) == rows
            assert (forwarded["execution"], forwarded["logicalHash"]) == (scratch["execution"], scratch["logicalHash"])
            rc = await _receipt(b, forwarded["receipt"])
            assert (cid_str(rc.derived_from), rc.rewrite) == (old[sql]["execution"], "append")
            assert evaluated[sql] in rc.timings, rc.timings
        assert b[0].resolver.forwarded == before + 3
        metrics = _samples(await (await b[1].get("/metrics")).text())
        assert metrics[("cairn_answers_forwarded", ())] == b[0].resolver.forwarded
    finally:
        a[0].resolver.from_supersets, b[0].resolver.from_supersets = was
