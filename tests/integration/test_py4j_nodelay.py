"""spark_worker/nodelay.py on a real JVM: the worker's job threads get TCP_NODELAY on the JVM's end of their py4j
connection (else each py4j answer over 8 KiB waited 40 ms for a delayed ACK), and nothing else changes.

The probe runs in a child Python with its own SparkSession (local[1]), so no JVM outlives the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, sys, tempfile, threading
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
sys.path.insert(0, sys.argv[1])
from spark_worker import nodelay
from spark_worker.jobs import Job
from spark_worker.worker import Worker
from spark_worker.session import build_session

spark = build_session("local[1]", {})
jvm = spark._jvm
worker = Worker(spark, None, Path(tempfile.mkdtemp()) / "unused.sock", 0, None, warmup=False)
path = str(Path(tempfile.mkdtemp()) / "t.parquet")
pq.write_table(pa.table({"k": [1, 2, 2], "v": [0.5, 1.5, 2.5]}), path)
# A filter under a GROUP BY: the guard's plan JSON is over 8 KiB, the case that waited 40 ms.
statement = (
    "SELECT col_0, count(*) AS n, sum(col_1) AS s, min(col_1) AS lo, max(col_1) AS hi FROM a "
    "WHERE col_1 > 1.0 GROUP BY col_0 ORDER BY col_0"
)
seen = {}

def job_thread():
    header, _ = worker.execute(Job("probe", statement, {"a": ([path], ["col_0", "col_1"])}))
    seen["rows"] = header["rows"]
    seen["job_thread"] = nodelay.connection_socket(jvm).getTcpNoDelay()

def other_thread():
    seen["other_thread"] = nodelay.connection_socket(jvm).getTcpNoDelay()

for target in (job_thread, other_thread):
    t = threading.Thread(target=target)
    t.start()
    t.join()
spark.read.parquet(path).toDF("col_0", "col_1").createOrReplaceTempView("a")
seen["plan_json_chars"] = len(spark.sql(statement)._jdf.queryExecution().analyzed().toJSON())
print(json.dumps(seen))
spark.stop()
"""


def test_a_job_thread_sets_nodelay_on_its_py4j_connection() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT)], capture_output=True, text=True, timeout=600, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["rows"] == 1  # the job ran and answered (only k = 2 passes the filter)
    assert seen["job_thread"] is True  # set by Worker.execute on its thread's connection
    assert seen["other_thread"] is False  # py4j's default, on a connection no job used: what was fixed
    assert seen["plan_json_chars"] > 8192  # the guard's JSON of this plan is an answer that waited 40 ms
