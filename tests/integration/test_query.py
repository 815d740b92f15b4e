"""Deterministic queries end to end: real nodes, real Kubo, real Spark workers."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.nodes import NodeProcess, poll

SALES = (
    b"region,product,amount\nnorth,apple,10\nsouth,apple,7\nnorth,pear,3\neast,fig,12\nsouth,pear,5\nnorth,apple,1\n"
)
# Same rows, other column names: the same abstract structure and the same logical hash.
RENAMED = SALES.replace(b"region,product,amount", b"zone,item,qty")
PRICES = b"product,price\napple,2\npear,3\nfig,5\n"

SQL = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"


def _start(base: Path, name: str) -> NodeProcess:
    return NodeProcess(base / name, env={"CAIRN_SPARK_AUTOSTART": "true"}).start()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, NodeProcess]]:
    base = tmp_path_factory.mktemp("q")
    a, b = _start(base, "a"), _start(base, "b")
    for n in (a, b):
        for name, data in (("sales", SALES), ("renamed", RENAMED), ("prices", PRICES)):
            path = base / f"{name}.csv"
            path.write_bytes(data)
            r = n.cli("add", str(path), "--name", name)
            assert r.returncode == 0, r.stderr.decode()
    yield a, b
    a.stop()
    b.stop()


def post(node: NodeProcess, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        node.api + "/api/v0/query",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(node: NodeProcess, sql: str, **inputs: str) -> dict[str, Any]:
    status, out = post(node, {"sql": sql, "inputs": inputs or {"sales": "sales"}})
    assert status == 200, out
    return out


def spark_jobs(node: NodeProcess) -> int:
    return int(node.get("/api/v0/node")[1]["spark"]["jobs"])


def test_miss_then_hit_without_spark(nodes: Any) -> None:
    a, _ = nodes
    first = ask(a, SQL)
    assert first["source"] == "computed"
    assert first["rows"] == [["east", 12], ["north", 14], ["south", 12]]
    assert first["columns"] == ["region", "total"] and first["row_count"] == 3
    jobs = spark_jobs(a)
    again = ask(a, SQL)
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
def test_equivalent_spellings_collide(nodes: Any, variant: str) -> None:
    a, _ = nodes
    base, other = ask(a, SQL), ask(a, variant)
    assert (other["query"], other["invocation"], other["source"]) == (base["query"], base["invocation"], "local")


def test_same_shape_other_names_collides(nodes: Any) -> None:
    a, _ = nodes
    base = ask(a, SQL)
    jobs = spark_jobs(a)
    other = ask(a, "SELECT zone, SUM(qty) AS total FROM t GROUP BY zone ORDER BY zone", t="renamed")
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
def test_different_questions_do_not_collide(nodes: Any, changed: str) -> None:
    a, _ = nodes
    assert ask(a, changed)["query"] != ask(a, SQL)["query"]


def test_join_of_two_inputs(nodes: Any) -> None:
    a, _ = nodes
    out = ask(
        a,
        "SELECT s.product, SUM(s.amount * p.price) AS revenue FROM sales s JOIN prices p "
        "ON s.product = p.product GROUP BY s.product ORDER BY s.product",
        sales="sales",
        prices="prices",
    )
    assert out["rows"] == [["apple", 36], ["fig", 60], ["pear", 24]]


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
def test_forbidden_sql_is_refused_before_spark(nodes: Any, sql: str, rule: str) -> None:
    a, _ = nodes
    jobs = spark_jobs(a)
    status, out = post(a, {"sql": sql, "inputs": {"sales": "sales"}})
    assert status == 400, out
    assert out["error"]["message"].startswith("query refused") and rule.lower() in out["error"]["message"].lower(), out
    assert spark_jobs(a) == jobs


def test_fifty_concurrent_identical_misses_run_one_job(nodes: Any) -> None:
    a, _ = nodes
    sql = "SELECT product, COUNT(*) AS n FROM sales GROUP BY product ORDER BY product"
    jobs = spark_jobs(a)
    with ThreadPoolExecutor(50) as pool:
        answers = list(pool.map(lambda _: post(a, {"sql": sql, "inputs": {"sales": "sales"}}), range(50)))
    assert all(status == 200 for status, _ in answers)
    assert spark_jobs(a) == jobs + 1
    assert len({json.dumps({k: o[k] for k in ("invocation", "execution", "rows")}) for _, o in answers}) == 1


def test_two_nodes_compute_the_same_execution(nodes: Any) -> None:
    a, b = nodes
    sql = "SELECT region, AVG(amount) AS mean FROM sales GROUP BY region ORDER BY region"
    ra, rb = ask(a, sql), ask(b, sql)
    assert ra["source"] == rb["source"] == "computed"
    for key in ("query", "invocation", "execution", "logicalHash", "slices"):
        assert ra[key] == rb[key], key
    assert ra["receipt"] != rb["receipt"]  # each node signs its own receipt


def test_execution_record_and_whole_result(nodes: Any, tmp_path: Path) -> None:
    a, _ = nodes
    out = ask(a, SQL)
    status, ex = a.get(f"/api/v0/executions/{out['execution']}")
    assert status == 200 and ex["invocation"] == out["invocation"] and ex["engine"]["name"] == "spark"
    dest = tmp_path / "all.csv"
    r = a.cli("query", SQL, "--input", "sales=sales", "-o", str(dest))
    assert r.returncode == 0, r.stderr.decode()
    # RFC 4180: CRLF records, fields quoted only when they must be; the query's own column names.
    assert dest.read_bytes() == b"region,total\r\neast,12\r\nnorth,14\r\nsouth,12\r\n"
    r = a.cli("query", SQL, "--input", "sales=sales", "--json")
    assert json.loads(r.stdout)["source"] == "local"


def test_job_events_stream(nodes: Any) -> None:
    a, _ = nodes
    status, job = post(a, {"sql": "SELECT COUNT(*) AS n FROM sales", "inputs": {"sales": "sales"}, "wait": False})
    assert status == 202
    with urllib.request.urlopen(a.api + job["events"], timeout=300) as r:
        text = r.read().decode()
    kinds = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "started" and "done" in kinds and kinds[-1] == "result"
    final = json.loads(text.strip().splitlines()[-1].split(": ", 1)[1])
    assert final["rows"] == [[6]]


def test_worker_killed_mid_query_is_a_clear_error_then_recovers(nodes: Any) -> None:
    a, _ = nodes
    pid = a.get("/api/v0/node")[1]["spark"]["pid"]
    jobs = spark_jobs(a)
    # A query slow enough to be killed in the middle: the input cross-joined with itself 12 times (6^12 rows).
    slow = "SELECT COUNT(*) AS n FROM sales x0 " + " ".join(f"CROSS JOIN sales x{i}" for i in range(1, 12))
    status, job = post(a, {"sql": slow, "inputs": {"sales": "sales"}, "wait": False})
    assert status == 202, job
    poll(lambda: spark_jobs(a) > jobs, 60, what="the slow job to reach the Spark worker")
    os.kill(pid, signal.SIGKILL)
    view = poll(
        lambda: (lambda v: v if v["state"] != "running" else None)(a.get(f"/api/v0/jobs/{job['job']}")[1]),
        120,
        0.2,
        what="the job to end",
    )
    assert view["state"] == "failed" and "worker" in view["error"]["message"].lower(), view
    out = ask(a, "SELECT MIN(amount) AS m FROM sales")
    assert out["rows"] == [[1]]
