"""Faults on real processes, and the data survives.

SIGKILL of Kubo mid-ingest and mid-pull, SIGKILL of the node mid-ingest and mid-publish, a full disk during an
ingest. Each case ends with ``check_consistent``: the index passes ``PRAGMA integrity_check`` and every head and
every execution it names is pinned in Kubo; the dataset head is the old one or the new one, never between; the next
request works, and its answer is compared with pandas / DuckDB on the same file. The mid-publish case also checks
from a peer that nothing half-published was announced. (Kills of the Spark worker mid-query are in
test_spark_orphans.py and test_spark_budgets.py.)

"Mid-" is observed, never guessed: the test polls for the ingest's slice files (``tmp/ingest-*/slice-N``), the
pull's (``tmp/pull-*``) or the result's (``tmp/result-*/out-N``) and kills as soon as one appears.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

from node.adapters.ipfs import ManagedKubo
from node.adapters.ipfs.rpc_transport import auth_header
from node.core import Node
from node.faces.api import create_app
from tests.fixtures.inprocess import InNode, inprocess_node, node_settings, wait_for
from tests.fixtures.kubo import http_connection
from tests.fixtures.nodes import NodeProcess, poll

# Many small slices make an ingest, a pull and a publish last long enough to be caught in flight.
ROWS_PER_SLICE = 500
BIG_ROWS = 20_000
SMALL_ROWS = 300


def write_csv(path: Path, rows: int, seed: int, start: int = 0) -> Path:
    """A CSV of ``rows`` rows (id, grp, val, pad) whose values come from ``seed``."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "id": np.arange(start, start + rows, dtype=np.int64),
            "grp": rng.choice(["north", "south", "east", "west"], rows),
            "val": rng.integers(-1000, 1000, rows, dtype=np.int64),
            "pad": [f"{x:016x}" for x in rng.integers(0, 2**62, rows, dtype=np.int64)],
        }
    )
    df.to_csv(path, index=False)
    return path


# -- Kubo and index checks ---------------------------------------------------------------------------------


def kubo_rpc(kubo: ManagedKubo | None, path: str, **params: str) -> tuple[int, Any]:
    """One Kubo RPC call (always POST, with the daemon's RPC secret): its status and decoded JSON (None if the body
    is not JSON)."""
    assert kubo is not None, "a node on a managed Kubo"
    conn = http_connection(kubo.api_url, timeout=60)  # its API is a unix socket
    try:
        target = f"/api/v0/{path}?{urllib.parse.urlencode(params)}"
        conn.request("POST", target, body=b"", headers={"Authorization": auth_header(kubo.auth)})
        resp = conn.getresponse()
        status, body = resp.status, resp.read()
    finally:
        conn.close()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def pinned(api: ManagedKubo | None, cid: str, kind: str) -> bool:
    """``cid`` is pinned in the Kubo at ``api`` (``kind``: recursive or direct)."""
    status, body = kubo_rpc(api, "pin/ls", arg=cid, type=kind)
    return status == 200 and isinstance(body, dict) and bool(body.get("Keys"))


def held(api: ManagedKubo | None, cid: str) -> bool:
    """``cid`` is pinned recursively or directly, or present (offline) where a recursive pin keeps it. Not
    ``pin/ls --type=all``: that walks every recursive pin's DAG for indirect pins, and on the session's Kubo,
    shared by the whole suite, it took over 60 s."""
    if pinned(api, cid, "recursive") or pinned(api, cid, "direct"):
        return True
    return kubo_rpc(api, "block/stat", arg=cid, offline="true")[0] == 200


def check_consistent(home: Path, kubo_api: ManagedKubo | None) -> dict[str, str]:
    """The node's index is sound and names nothing Kubo lacks: ``PRAGMA integrity_check`` is ok, every dataset
    head is pinned recursively (so its chain and slices are all present), every execution's receipt, execution
    and slices are in Kubo, and its receipt pinned recursively or that pin owed (``pending_pins``: an answer's pin
    follows it once misses are quiet, resumed at start, docs/peers.md "Answer first"). Reads the index as another
    process would (read-only). Returns the heads by name."""
    db = sqlite3.connect(f"file:{home / 'index.sqlite'}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        heads = dict(db.execute("SELECT name, head FROM datasets").fetchall())
        executions = db.execute("SELECT execution, receipt, slices FROM executions").fetchall()
        owed = {c for (c,) in db.execute("SELECT cid FROM pending_pins WHERE recursive = 1").fetchall()}
    finally:
        db.close()
    for name, head in heads.items():
        assert pinned(kubo_api, head, "recursive"), f"dataset {name!r}: head {head} is not pinned in Kubo"
    for execution, receipt, slices in executions:
        ok = receipt in owed or pinned(kubo_api, receipt, "recursive")
        assert ok, f"receipt {receipt} of {execution} is neither pinned nor owed"
        assert held(kubo_api, receipt), f"receipt {receipt} of {execution} is not in Kubo"
        for cid in (execution, *json.loads(slices)):
            assert held(kubo_api, cid), f"{cid} of execution {execution} is not in Kubo"
    return heads


def owed_pins(home: Path) -> list[str]:
    db = sqlite3.connect(f"file:{home / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return [c for (c,) in db.execute("SELECT cid FROM pending_pins").fetchall()]
    finally:
        db.close()


def leftovers(home: Path) -> list[str]:
    """Work files of an ingest, upload, pull or publish still in ``$CAIRN_HOME/tmp``."""
    tmp = home / "tmp"
    return sorted(p.name for p in tmp.iterdir()) if tmp.exists() else []


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat.rsplit(b")", 1)[1].split()[0] == b"Z"


def first_file(home: Path, prefix: str, name: str) -> Callable[[], bool]:
    """A predicate: some ``tmp/<prefix>*`` work directory holds ``name``."""
    return lambda: any((d / name).exists() for d in (home / "tmp").glob(prefix + "*"))


async def appeared(pred: Callable[[], bool], what: str, timeout: float = 120) -> None:
    async def check() -> bool:
        return pred()

    await wait_for(check, timeout, what)


def assert_one_line_error(status: int, body: dict[str, Any], allowed: set[int]) -> str:
    assert status in allowed, (status, body)
    message = body["error"]["message"]
    assert message and "\n" not in message, body
    return message


def frame_of(csv_bytes: bytes) -> pd.DataFrame:
    return pd.read_csv(io.BytesIO(csv_bytes)).sort_values("id").reset_index(drop=True)


def expected(*files: Path) -> pd.DataFrame:
    return pd.concat([pd.read_csv(f) for f in files]).sort_values("id").reset_index(drop=True)


# -- nodes ---------------------------------------------------------------------------------------------------


@asynccontextmanager
async def managed_node(home: Path, kubo_binary: Path, **overrides: Any) -> AsyncIterator[InNode]:
    """An in-process node running its OWN (managed, supervised) Kubo, so the test can kill that Kubo."""
    from aiohttp.test_utils import TestClient, TestServer

    settings = node_settings(home, "", **{"ipfs.binary": str(kubo_binary), **overrides})
    async with Node.running(settings) as node:
        app = create_app(node, node.home.token(), settings.api.max_upload_bytes)
        async with TestClient(TestServer(app), headers={"Authorization": f"Bearer {node.home.token()}"}) as client:
            yield node, client


async def ingest(client: Any, path: Path, **params: str) -> tuple[int, dict[str, Any]]:
    resp = await client.post("/api/v0/datasets", params={"path": str(path), **params})
    return resp.status, await resp.json()


async def dataset_frame(client: Any, name: str) -> pd.DataFrame:
    resp = await client.get(f"/api/v0/datasets/{name}/data", params={"format": "csv"})
    assert resp.status == 200, await resp.text()
    return frame_of(await resp.read())


async def kubo_up_again(node: Node, restarts: int) -> None:
    """The supervisor restarted the managed Kubo (one more restart than before) and it answers."""
    managed = node.managed
    assert managed is not None

    async def up() -> bool:
        if managed.restarts <= restarts or node.kubo_state != "up":
            return False
        try:
            await node.kubo.version()
        except Exception:  # noqa: BLE001  not answering yet: poll again
            return False
        return True

    await wait_for(up, 60, "the managed Kubo to be restarted")


# -- 1. Kubo killed mid-ingest ------------------------------------------------------------------------------


async def test_kubo_killed_mid_ingest_keeps_old_head_and_retry_works(tmp_path: Path, kubo_binary: Path) -> None:
    first = write_csv(tmp_path / "first.csv", SMALL_ROWS, seed=1)
    big = write_csv(tmp_path / "big.csv", BIG_ROWS, seed=2, start=SMALL_ROWS)
    home = tmp_path / "node"
    async with managed_node(home, kubo_binary, **{"datasets.rows_per_slice": ROWS_PER_SLICE}) as (node, client):
        assert node.managed is not None
        status, created = await ingest(client, first, name="d")
        assert status == 201, created
        old_head, restarts = created["head"], node.managed.restarts
        task = asyncio.ensure_future(ingest(client, big, to="d"))
        await appeared(first_file(home, "ingest-", "slice-2.parquet"), "the ingest to cut its third slice")
        assert not task.done()
        kill(node.managed.pid or 0)
        status, body = await task
        assert_one_line_error(status, body, {502, 503})
        await kubo_up_again(node, restarts)
        heads = check_consistent(home, node.managed)
        assert heads == {"d": old_head}  # the old head: the failed ingest moved nothing
        assert leftovers(home) == []  # its work directory went with it
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first))
        status, again = await ingest(client, big, to="d")  # the retry works on the restarted Kubo
        assert status == 200 and again["previous"] == old_head and again["rows_added"] == BIG_ROWS, again
        assert check_consistent(home, node.managed) == {"d": again["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first, big))


# -- 2. Kubo killed mid-pull ---------------------------------------------------------------------------------


async def test_kubo_killed_mid_pull_leaves_nothing_and_retry_works(
    tmp_path: Path, kubo_binary: Path, kubo_session: ManagedKubo
) -> None:
    big = write_csv(tmp_path / "big.csv", BIG_ROWS, seed=3)
    source_home, home = tmp_path / "source", tmp_path / "node"
    async with (
        inprocess_node(source_home, kubo_session, **{"datasets.rows_per_slice": ROWS_PER_SLICE}) as (src, src_client),
        managed_node(home, kubo_binary) as (node, client),
    ):
        assert node.managed is not None
        status, created = await ingest(src_client, big, name="big")
        assert status == 201, created
        url = f"{src.api_url}/odf/big"
        restarts = node.managed.restarts

        async def pull() -> tuple[int, dict[str, Any]]:
            resp = await client.post("/api/v0/pull", json={"source": url, "name": "copy"})
            return resp.status, await resp.json()

        task = asyncio.ensure_future(pull())
        # A slice fetched into the pull's work directory: the pull is in flight, adding slices to Kubo.
        await appeared(lambda: any(d.glob("*.parquet") for d in (home / "tmp").glob("pull-*")), "a pulled slice")
        assert not task.done()
        kill(node.managed.pid or 0)
        status, body = await task
        assert_one_line_error(status, body, {502, 503})
        await kubo_up_again(node, restarts)
        assert check_consistent(home, node.managed) == {}  # nothing of the pull became visible
        assert leftovers(home) == []
        status, body = await pull()
        assert status == 200 and body["head"] == created["head"], body
        assert check_consistent(home, node.managed) == {"copy": created["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "copy"), expected(big))


# -- 4. a full disk during an ingest --------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 16 MiB tmpfs mounted for the test (we run as root), unmounted after it."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, check=False
    )
    if done.returncode != 0:  # the only skip: a machine where this process may not mount
        pytest.skip(f"mount -t tmpfs not permitted here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


async def test_full_disk_during_upload_and_ingest_is_507_and_frees_space(
    tmp_path: Path, small_disk: Path, kubo_session: ManagedKubo
) -> None:
    big = write_csv(tmp_path / "big.csv", 400_000, seed=4)  # 13 MB of CSV, 5 MB of Parquet
    assert big.stat().st_size > 12 << 20
    first = write_csv(tmp_path / "first.csv", SMALL_ROWS, seed=5)
    later = write_csv(tmp_path / "later.csv", SMALL_ROWS, seed=6, start=SMALL_ROWS)
    home = small_disk / "node"
    async with inprocess_node(home, kubo_session) as (_, client):
        status, created = await ingest(client, first, name="d")
        assert status == 201, created
        filler = small_disk / "filler"
        filler.write_bytes(b"\0" * (6 << 20))  # others use the disk too: less room than the upload needs
        baseline = used(small_disk)
        # The upload is spooled to $CAIRN_HOME/tmp: the disk fills while the body streams in.
        resp = await client.post("/api/v0/datasets", params={"to": "d", "filename": "big.csv"}, data=big.read_bytes())
        assert_one_line_error(resp.status, await resp.json(), {507})
        assert leftovers(home) == [] and used(small_disk) <= baseline + (64 << 10)  # the spool file is gone
        # In place (path=): the file fits elsewhere, but its slices, cut in $CAIRN_HOME/tmp, do not.
        filler.unlink()
        filler.write_bytes(b"\0" * (13 << 20))
        baseline = used(small_disk)
        status, body = await ingest(client, big, to="d")
        assert_one_line_error(status, body, {507})
        assert leftovers(home) == [] and used(small_disk) <= baseline + (64 << 10)
        assert check_consistent(home, kubo_session) == {"d": created["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first))
        filler.unlink()  # space freed: a smaller ingest works
        status, again = await ingest(client, later, to="d")
        assert status == 200 and again["previous"] == created["head"], again
        assert check_consistent(home, kubo_session) == {"d": again["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first, later))


# -- 3. the node killed mid-ingest and mid-publish -----------------------------------------------------------

GROUPS = "SELECT grp, COUNT(*) AS n, SUM(val) AS s FROM t GROUP BY grp"
ALL_ROWS = "SELECT id, grp, val FROM t WHERE val >= -1000"  # every row: a large result, many slices to publish


def call(node: NodeProcess, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, Any]:
    """One request with the node's token, as the CLI sends it; (status, JSON), or (0, reason) if the
    connection broke (the node was killed under it)."""
    token = (node.home / "api.token").read_text().strip()
    req = urllib.request.Request(
        node.api + path, data=body, method=method, headers={"Authorization": f"Bearer {token}", **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except (urllib.error.URLError, ConnectionError) as e:
        return 0, str(e)


def ask(node: NodeProcess, sql: str) -> tuple[int, Any]:
    body = json.dumps({"sql": sql, "inputs": {"t": "t"}}).encode()
    return call(node, "POST", "/api/v0/query", body, **{"Content-Type": "application/json"})


def upload(node: NodeProcess, path: Path, **params: str) -> tuple[int, Any]:
    query = urllib.parse.urlencode({"filename": path.name, **params})
    return call(node, "POST", f"/api/v0/datasets?{query}", path.read_bytes())


def fetch_csv(node: NodeProcess, path: str) -> pd.DataFrame:
    with urllib.request.urlopen(node.api + path, timeout=120) as r:
        return frame_of(r.read())


def oracle(sql: str, *files: Path) -> pd.DataFrame:
    """DuckDB on the same CSV files (the dataset ``t`` is their rows)."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_csv({[str(f) for f in files]!r}, header = true)")
    return con.execute(sql).df()


def claims_seen(peer: NodeProcess) -> list[dict[str, Any]]:
    status, body = peer.get("/api/v0/announcements")
    assert status == 200, body
    return list(body["claims"])


def assert_claims_backed(peer: NodeProcess, kubo_api: ManagedKubo, home: Path) -> list[str]:
    """Every execution the peer heard of is whole on the announcing node's Kubo: nothing half-published was
    announced. Its receipt is pinned recursively, or that pin is owed in the announcing node's index (``home``)
    and the receipt's whole DAG is in Kubo already (``dag/stat`` offline walks every block it links). Returns the
    executions heard of."""
    claims = claims_seen(peer)
    owed = set(owed_pins(home))
    for c in claims:
        receipt = c["receipt"]
        if receipt in owed and not pinned(kubo_api, receipt, "recursive"):
            status, body = kubo_rpc(kubo_api, "dag/stat", arg=receipt, offline="true", progress="false")
            assert status == 200, f"announced receipt {receipt}, its pin owed, is not whole in Kubo: {body}"
        else:
            assert pinned(kubo_api, receipt, "recursive"), f"announced receipt {receipt} is neither pinned nor owed"
        assert held(kubo_api, c["execution"]), f"announced execution {c['execution']} is not in Kubo"
    return [c["execution"] for c in claims]


def kill_node(node: NodeProcess, ready: Callable[[], bool], what: str) -> None:
    """SIGKILL the node the moment ``ready`` holds (polled), then wait for its worker to be gone."""
    assert node.proc is not None
    worker = _spark_worker_of(node.proc.pid)
    poll(lambda: ready() or node.proc is None or node.proc.poll() is not None, 120, what=what)
    assert node.proc.poll() is None, f"the node ended before {what}"
    node.proc.kill()
    node.proc.wait(10)
    node.stop()  # closes its log
    if worker is not None:  # the orphan rule is test_spark_orphans.py's subject; here it only must not linger
        try:
            poll(lambda: _gone(worker), 30, what="the killed node's worker to end")
        except AssertionError:
            with contextlib.suppress(ProcessLookupError):  # the worker leads its own group (its JVM is in it)
                os.killpg(worker, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                kill(worker)


def _spark_worker_of(pid: int) -> int | None:
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            if b"spark_worker" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
        except OSError:
            continue
    return None


def compare(answer: dict[str, Any], node: NodeProcess, sql: str, *files: Path, key: str) -> None:
    got = fetch_csv(node, f"/api/v0/executions/{answer['execution']}/data?format=csv") if key == "id" else None
    want = oracle(sql, *files).sort_values(key).reset_index(drop=True)
    if got is None:
        got = pd.DataFrame(answer["rows"], columns=answer["columns"]).sort_values(key).reset_index(drop=True)
    assert answer["row_count"] == len(want)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def restart(node: NodeProcess, env: dict[str, str], peer: NodeProcess) -> NodeProcess:
    """A new node process on the killed one's home, connected to the peer again."""
    return connected(NodeProcess(node.home, env=env).start(), peer)


def connected(node: NodeProcess, peer: NodeProcess) -> NodeProcess:
    assert node.cli("connect", peer.get("/api/v0/node")[1]["p2p_addrs"][0]).returncode == 0
    return node


def test_node_killed_mid_ingest_and_mid_publish(tmp_path: Path, kubo_session: ManagedKubo) -> None:
    first = write_csv(tmp_path / "first.csv", SMALL_ROWS, seed=7)
    big = write_csv(tmp_path / "big.csv", BIG_ROWS, seed=8, start=SMALL_ROWS)
    env = {
        "CAIRN_IPFS_API": kubo_session.api_url,  # the session's Kubo: nothing managed outlives the killed node
        "CAIRN_IPFS_API_AUTH": kubo_session.auth,
        "CAIRN_SPARK_AUTOSTART": "false",  # the worker starts on the first miss: two JVM starts in all
        "CAIRN_SPARK_WARMUP_ROWS": "0",  # no idle JIT warm-up: it only competes with the test for the CPU
        "CAIRN_DATASETS_ROWS_PER_SLICE": str(ROWS_PER_SLICE),
    }
    home, kubo_api = tmp_path / "n1", kubo_session
    peer = NodeProcess(tmp_path / "peer").launch()  # its own managed Kubo, no Spark: it only listens
    n1 = NodeProcess(home, env=env).launch()  # both start side by side
    n1 = connected(n1.wait_ready(), peer.wait_ready())
    try:
        status, created = upload(n1, first, name="t")
        assert status == 201, created
        old_head = created["head"]
        # Killed mid-ingest: an upload whose slices are being cut and added to Kubo.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(upload, n1, big, to="t")
            kill_node(n1, first_file(home, "ingest-", "slice-2.parquet"), "the ingest to cut its third slice")
        n1 = restart(n1, env, peer)
        assert check_consistent(home, kubo_api) == {"t": old_head}  # the old head, never between
        assert leftovers(home) == []  # the upload and the ingest's slices were swept at start
        status, again = upload(n1, big, to="t")  # the next request works
        assert status == 200 and again["previous"] == old_head and again["rows_added"] == BIG_ROWS, again
        status, groups = ask(n1, GROUPS)
        assert status == 200 and groups["source"] == "computed", groups
        poll(lambda: groups["execution"] in assert_claims_backed(peer, kubo_api, home), 60, what="the peer to hear Q1")

        # Killed mid-publish: a miss whose many result slices are being written and added.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(ask, n1, ALL_ROWS)
            kill_node(n1, first_file(home, "result-", "out-2.parquet"), "the result's third slice")
        heard = assert_claims_backed(peer, kubo_api, home)  # nothing half-published reached the peer
        n1 = restart(n1, env, peer)
        assert check_consistent(home, kubo_api) == {"t": again["head"]}
        assert leftovers(home) == []
        status, rows = ask(n1, ALL_ROWS)  # asked again: the same answer as DuckDB on the same files
        assert status == 200, rows
        compare(rows, n1, ALL_ROWS, first, big, key="id")
        status, groups2 = ask(n1, GROUPS)  # the answer from before the kill is still served, and still right
        assert status == 200 and groups2["source"] == "local", groups2
        compare(groups2, n1, GROUPS, first, big, key="grp")
        poll(lambda: rows["execution"] in assert_claims_backed(peer, kubo_api, home), 60, what="the peer to hear Q2")
        assert set(heard) <= set(assert_claims_backed(peer, kubo_api, home))
        check_consistent(home, kubo_api)
        poll(lambda: not owed_pins(home), 60, what="the owed pins drained")
        check_consistent(home, kubo_api)  # now every receipt pinned
    finally:
        for n in (n1, peer):
            if n.proc is not None and n.proc.poll() is None:
                n.stop()


async def test_full_kubo_repo_during_ingest_is_507_and_kubo_survives(
    tmp_path: Path, small_disk: Path, kubo_binary: Path
) -> None:
    big = write_csv(tmp_path / "big.csv", 400_000, seed=9)  # 5 MB of Parquet
    first = write_csv(tmp_path / "first.csv", SMALL_ROWS, seed=10)
    later = write_csv(tmp_path / "later.csv", SMALL_ROWS, seed=11, start=SMALL_ROWS)
    home = tmp_path / "node"
    home.mkdir()
    os.symlink(small_disk, home / "kubo")  # the managed Kubo's repo on the small disk, the node's home elsewhere
    async with managed_node(home, kubo_binary) as (node, client):
        status, created = await ingest(client, first, name="d")
        assert status == 201, created
        assert node.managed is not None
        restarts = node.managed.restarts
        filler = small_disk / "filler"
        filler.write_bytes(b"\0" * (13 << 20))  # less room than the 5 MB of slices Kubo must store
        status, body = await ingest(client, big, to="d")
        assert "Kubo's repo" in assert_one_line_error(status, body, {507})
        assert leftovers(home) == []  # the slices cut in $CAIRN_HOME/tmp are gone
        assert node.managed.restarts == restarts and node.managed.alive()  # Kubo itself lived through it
        assert check_consistent(home, node.managed) == {"d": created["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first))
        filler.unlink()  # space freed: the next ingest works
        status, again = await ingest(client, later, to="d")
        assert status == 200 and again["previous"] == created["head"], again
        assert check_consistent(home, node.managed) == {"d": again["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first, later))


def fill(disk: Path) -> Path:
    """Write a file until the disk refuses one more byte."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (64 << 10))
                f.flush()
        except OSError as e:
            assert e.errno == 28  # ENOSPC
    return filler


async def test_full_disk_under_the_index_is_507_and_loses_nothing(
    tmp_path: Path, small_disk: Path, kubo_session: ManagedKubo
) -> None:
    first = write_csv(tmp_path / "first.csv", SMALL_ROWS, seed=12)
    later = write_csv(tmp_path / "later.csv", SMALL_ROWS, seed=13, start=SMALL_ROWS)
    home = small_disk / "node"
    async with inprocess_node(home, kubo_session) as (node, client):
        status, created = await ingest(client, first, name="d")
        assert status == 201, created
        filler = fill(small_disk)
        # A write that touches only the index (SQLite: "database or disk is full").
        resp = await client.post("/api/v0/trust", json={"key": node.identity.node_key})
        assert "the index" in assert_one_line_error(resp.status, await resp.json(), {507})
        status, body = await ingest(client, later, to="d")
        assert_one_line_error(status, body, {507})
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first))  # reads still work
        assert leftovers(home) == []
        assert check_consistent(home, kubo_session) == {"d": created["head"]}
        filler.unlink()
        resp = await client.post("/api/v0/trust", json={"key": node.identity.node_key})
        assert resp.status == 200, await resp.text()
        status, again = await ingest(client, later, to="d")
        assert status == 200 and again["previous"] == created["head"], again
        assert check_consistent(home, kubo_session) == {"d": again["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "d"), expected(first, later))


async def test_full_disk_during_pull_is_507_and_retry_works(
    tmp_path: Path, small_disk: Path, kubo_session: ManagedKubo
) -> None:
    big = write_csv(tmp_path / "big.csv", 400_000, seed=14)  # 5 MB of Parquet in 2 slices
    async with (
        inprocess_node(tmp_path / "source", kubo_session, **{"datasets.rows_per_slice": 200_000}) as (src, src_c),
        inprocess_node(small_disk / "node", kubo_session) as (node, client),
    ):
        status, created = await ingest(src_c, big, name="big")
        assert status == 201, created
        home = node.home.path
        filler = small_disk / "filler"
        filler.write_bytes(b"\0" * (13 << 20))  # less room than the pulled slices need

        async def pull() -> tuple[int, dict[str, Any]]:
            resp = await client.post("/api/v0/pull", json={"source": f"{src.api_url}/odf/big", "name": "copy"})
            return resp.status, await resp.json()

        status, body = await pull()
        assert_one_line_error(status, body, {507})
        # The pull's work files are gone (slices it had checked stay in the CID-keyed cache: a retry reuses them).
        assert leftovers(home) == []
        assert check_consistent(home, kubo_session) == {}  # nothing of it became visible
        filler.unlink()
        status, body = await pull()
        assert status == 200 and body["head"] == created["head"], body
        assert check_consistent(home, kubo_session) == {"copy": created["head"]}
        pd.testing.assert_frame_equal(await dataset_frame(client, "copy"), expected(big))


def in_process_asker(client: Any) -> Callable[[str], Awaitable[tuple[int, dict[str, Any]]]]:
    """``ask(sql)`` over the dataset ``t`` through an in-process node's API client: (status, body)."""

    async def ask(sql: str) -> tuple[int, dict[str, Any]]:
        resp = await client.post("/api/v0/query", json={"sql": sql, "inputs": {"t": "t"}})
        return resp.status, await resp.json()

    return ask


async def test_full_disk_during_query_publish_is_507_and_hits_still_answer(
    tmp_path: Path, small_disk: Path, kubo_session: ManagedKubo
) -> None:
    big = write_csv(tmp_path / "big.csv", 200_000, seed=15)  # 2.5 MB of Parquet: the result is as large
    home = small_disk / "node"
    async with inprocess_node(home, kubo_session) as (_, client):
        status, created = await ingest(client, big, name="t")
        assert status == 201, created

        ask = in_process_asker(client)

        status, groups = await ask(GROUPS)  # computed while there is room (and the worker warm)
        assert status == 200 and groups["source"] == "computed", groups
        filler = fill(small_disk)
        status, body = await ask(ALL_ROWS)  # a miss: its result slices cannot be written
        assert_one_line_error(status, body, {507})
        status, hit = await ask(GROUPS)  # a hit needs no room: it still answers
        assert status == 200 and hit["execution"] == groups["execution"], hit
        assert leftovers(home) == []
        assert check_consistent(home, kubo_session) == {"t": created["head"]}
        filler.unlink()
        status, rows = await ask(ALL_ROWS)
        assert status == 200 and rows["source"] == "computed", rows
        got = frame_of(await (await client.get(f"/api/v0/executions/{rows['execution']}/data?format=csv")).read())
        pd.testing.assert_frame_equal(got, oracle(ALL_ROWS, big).sort_values("id").reset_index(drop=True))
        check_consistent(home, kubo_session)


async def test_full_disk_during_a_query_miss_in_spark_is_507(
    tmp_path: Path, small_disk: Path, kubo_session: ManagedKubo
) -> None:
    """Spark's own scratch (shuffle files, under $CAIRN_HOME) on a full disk: a one-line 507, never Spark's 500;
    nothing is recorded as the query's failure, hits still answer, the retry works once space is freed."""
    big = write_csv(tmp_path / "big.csv", 200_000, seed=16)
    home = small_disk / "node"
    shuffles = "SELECT grp, MAX(val) AS m, COUNT(DISTINCT pad) AS d FROM t GROUP BY grp"
    async with inprocess_node(home, kubo_session) as (_, client):
        status, created = await ingest(client, big, name="t")
        assert status == 201, created

        ask = in_process_asker(client)

        status, groups = await ask(GROUPS)  # the worker started and warm while there is room
        assert status == 200 and groups["source"] == "computed", groups
        filler = fill(small_disk)
        status, body = await ask(shuffles)  # a miss whose shuffle files Spark cannot write
        assert "no space left on disk" in assert_one_line_error(status, body, {507}), body
        status, hit = await ask(GROUPS)
        assert status == 200 and hit["execution"] == groups["execution"], hit
        filler.unlink()
        status, done = await ask(shuffles)  # not a recorded failure: computed now that there is room
        assert status == 200 and done["source"] == "computed", done
        got = {r[0]: (r[1], r[2]) for r in done["rows"]}
        want = oracle(shuffles, big)
        assert got == {g: (int(m), int(d)) for g, m, d in want.itertuples(index=False)}
        assert check_consistent(home, kubo_session)["t"] == created["head"]
