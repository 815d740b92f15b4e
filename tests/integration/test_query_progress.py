"""Progress and cancel in the CLI, on a real Spark worker.

`cairn query` runs in a real terminal (a pty) against an in-process node: it shows the query's live stages from
its job's server-sent events, prints nothing but the answer when piped, and Ctrl-C (the terminal's ^C) cancels the
job and its Spark job with a clear line; a local-path `cairn add` shows its ingest bar with the file's size.

Each failed on the code before (no stages; Ctrl-C exited silently; the in-place add showed 0/0 bytes).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import select
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from node.adapters.ipfs import ManagedKubo
from node.faces.cli.progress import STAGES
from tests.fixtures.inprocess import InNode, add_csv, cli, inprocess_node, wait_for

pytestmark = pytest.mark.asyncio(loop_scope="module")

MID_ROWS = 15_000  # a self join of 15 k rows: seconds of Spark work, long enough to see its stage
LONG_ROWS = 200_000  # minutes: only ever cancelled
PAIRS = "SELECT count(*) AS n FROM mid a JOIN mid b ON a.x < b.x"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def node(kubo_session: ManagedKubo, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[InNode]:
    base = tmp_path_factory.mktemp("progress")
    async with inprocess_node(base / "n", kubo_session, **{"spark.max_plan_bytes": 0}) as pair:
        await pair[0].spark.ensure()
        for name, rows in (("mid", MID_ROWS), ("big", LONG_ROWS)):
            await add_csv(pair[1], name, b"x\n" + b"".join(b"%d\n" % i for i in range(rows)))
        yield pair


def in_terminal(argv: list[str], env: dict[str, str], react: Callable[[bytes], bytes] | None = None) -> tuple[int, str]:
    """Run ``argv`` with a pty as its terminal (stdin, stdout, stderr): its exit code and all it wrote.
    ``react`` sees the output so far and may answer keystrokes (b"\\x03" is Ctrl-C)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, Ctrl-C as a fresh terminal gives it (ignored or blocked is inherited)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(argv[0], argv, env)
    out, deadline = b"", time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                if react is not None and (keys := react(out)):
                    os.write(fd, keys)
                    react = None
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def _cairn(node: InNode, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "CAIRN_HOME": str(node[0].home.path), "COLUMNS": "120", "TERM": "xterm"}
    return [sys.executable, "-m", "node", *args], env


async def test_query_on_a_terminal_shows_its_live_stages(node: InNode) -> None:
    argv, env = _cairn(node, "query", PAIRS, "--input", "mid=mid")
    rc, out = await asyncio.to_thread(in_terminal, argv, env)
    assert rc == 0, out
    for stage in ("resolving the query and its inputs", "looking it up in the index", "computing on Spark"):
        assert stage in out, out
    assert re.search(r"computing on Spark: stage \d+/\d+, tasks \d+/\d+", out), out  # Spark's own progress
    assert f"{MID_ROWS * (MID_ROWS - 1) // 2}" in out and "computed in" in out  # then the answer, as before


async def test_a_job_s_events_carry_spark_stages_and_tasks(node: InNode) -> None:
    _, client = node
    sql = "SELECT count(*) AS n FROM mid a JOIN mid b ON a.x < b.x + 1"
    resp = await client.post("/api/v0/query", json={"sql": sql, "inputs": {"mid": "mid"}, "wait": False})
    started = await resp.json()
    assert resp.status == 202, started
    text = await (await client.get(started["events"])).text()
    events = [(b.split("\n")[0].removeprefix("event: "), b) for b in text.split("\n\n") if b.strip()]
    kinds = [k for k, _ in events]
    assert kinds.index("computing") < kinds.index("spark") < kinds.index("publishing"), kinds
    sparks = [json.loads(b.split("\ndata: ")[1]) for k, b in events if k == "spark"]
    last = sparks[-1]
    assert last["stages"] >= 1 and last["tasks"] >= 1 and 0 <= last["tasks_done"] <= last["tasks"], sparks


async def test_query_piped_prints_nothing_but_the_answer(node: InNode) -> None:
    rc, out, err = await cli(
        node[0], "query", "SELECT count(*) AS n FROM mid a JOIN mid b ON a.x <= b.x", "-i", "mid=mid"
    )
    assert rc == 0 and err.startswith(b"1 rows, computed in "), err  # the answer's footer, as before
    assert b"\x1b" not in err and not any(stage.encode() in err for stage in STAGES.values()), err
    assert f"{MID_ROWS * (MID_ROWS + 1) // 2}" in out.decode()


async def test_ctrl_c_cancels_the_query_job_and_its_spark_job(node: InNode) -> None:
    before = await node[0].worker.stats()
    argv, env = _cairn(node, "query", "SELECT count(*) AS n FROM big a JOIN big b ON a.x < b.x", "-i", "big=big")
    rc, out = await asyncio.to_thread(in_terminal, argv, env, lambda o: b"\x03" if b"computing on Spark" in o else b"")
    assert rc == 130, out
    said = re.search(r"cancelled: query job (\S+) and its Spark job\r?$", out, re.MULTILINE)
    assert said is not None, out
    job = said.group(1)
    view = node[0].jobs.get(job).view()
    assert view["state"] == "failed" and view["error"]["type"] == "Cancelled", view

    async def idle() -> dict[str, object] | None:
        stats = await node[0].worker.stats()
        return stats if stats["running"] is None else None

    after = await wait_for(idle, 60, "the Spark job to be cancelled")
    assert after["cancelled"] == before["cancelled"] + 1 and after["restarts"] == before["restarts"]


async def test_a_local_path_add_shows_its_ingest_bar_with_the_file_size(node: InNode, tmp_path: Path) -> None:
    data = tmp_path / "wide.csv"  # ~4 MB: the node reads it in place (the test's tmp is an ingest dir)
    data.write_bytes(b"id,v\n" + b"".join(b"%d,%d\n" % (i, i * 7919 % 10007) for i in range(400_000)))
    argv, env = _cairn(node, "add", str(data), "--name", "wide")
    rc, out = await asyncio.to_thread(in_terminal, argv, env)
    assert rc == 0 and "created wide: 400000 rows added" in out, out
    size_mb = f"{data.stat().st_size / 1e6:.1f} MB"  # rich's DownloadColumn: completed/total in MB
    assert "ingest" in out and f"/{size_mb}" in out, out
    assert "0/0 bytes" not in out and "upload" not in out, out  # nothing is uploaded: no empty upload bar
