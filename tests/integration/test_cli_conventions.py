"""CLI conventions a newcomer expects.

- global options anywhere: ``--home`` after the subcommand too;
- `make run` says how to put ``cairn`` on PATH, and `make shim` (opt-in) installs one, as the README shows;
- empty lists say so;
- ``curl -F file=@x.csv`` uploads (multipart/form-data) are ingested like raw bodies, with the same caps, and a
  multipart body without a file part is a clear 400;
- errors never show the node's internal paths (its spool files, slices, logs).

Each failed on the code before these conventions.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from node.adapters.ipfs import ManagedKubo
from node.faces.cli.main import build_parser
from node.services.resolve.spark import SparkWorker, _hide_paths
from tests.fixtures.inprocess import cli, inprocess_node
from tests.fixtures.nodes import poll

ROOT = Path(__file__).resolve().parents[2]
CSV = b"id,city,pop\n1,Paris,2100000\n2,Lyon,520000\n3,Nice,340000\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--home", "H", "status"],
        ["status", "--home", "H"],
        ["node", "start", "--home", "H", "--detach"],
        ["node", "--home", "H", "stop"],
        ["query", "SELECT 1 FROM t", "--input", "t=t", "--home", "H"],
        ["trust", "ls", "--home", "H"],
    ],
)
def test_home_is_taken_before_or_after_the_subcommand(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).home == "H"


def test_home_before_the_subcommand_is_kept_when_none_follows() -> None:
    assert build_parser().parse_args(["--home", "A", "ls"]).home == "A"
    assert build_parser().parse_args(["ls"]).home is None


def test_make_shim_installs_a_cairn_that_runs(tmp_path: Path) -> None:
    shim_dir = tmp_path / "bin"
    out = subprocess.run(
        ["make", "-s", "shim", f"SHIM_DIR={shim_dir}"], cwd=ROOT, capture_output=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr.decode()
    assert f"installed {shim_dir}/cairn" in out.stdout.decode()
    assert f"{shim_dir} is not on PATH" in out.stdout.decode()  # says how to finish the job
    version = subprocess.run([shim_dir / "cairn", "--version"], capture_output=True, timeout=60, check=False)
    assert version.returncode == 0 and version.stdout.decode().startswith("cairn "), version


def test_make_run_says_how_to_put_cairn_on_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "CAIRN_HOME": str(home), "CAIRN_API_PORT": "0", "CAIRN_SPARK_AUTOSTART": "false"}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "cairn").exists())
    log = tmp_path / "make.log"
    with open(log, "wb") as out:
        make = subprocess.Popen(["make", "-s", "run"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        poll(lambda: (home / "node.json").exists() or make.poll() is not None, 120, what="make run's node")
        text = log.read_text()
        assert "cairn is not on PATH: run 'make shim'" in text and f"alias cairn={ROOT}/.venv/bin/cairn" in text, text
    finally:
        pid = (home / "node.pid").read_text().strip() if (home / "node.pid").exists() else None
        if pid:
            os.kill(int(pid), signal.SIGTERM)  # the node make started, by its PID file
        make.wait(60)


async def test_empty_lists_say_so(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session, **{"peers.enabled": True}) as (node, _):
        for args, said in (
            (["ls"], "no datasets yet"),
            (["peers"], "no peers: connect one with `cairn connect MULTIADDR`"),
            (["trust", "ls"], "no trusted keys: add one with `cairn trust add KEY`"),
            (["announcements"], "no announcements received from peers yet"),
        ):
            rc, out, err = await cli(node, *args)
            assert rc == 0 and out == b"" and said in err.decode(), (args, out, err)


async def _upload(client: Any, data: aiohttp.FormData | bytes, **params: str) -> tuple[int, Any]:
    resp = await client.post("/api/v0/datasets", params=params, data=data)
    return resp.status, await resp.json()


def _form(field: str, data: bytes, filename: str | None) -> aiohttp.FormData:
    """A multipart body with one part: a file (``curl -F field=@file``), or a plain field (``-F field=value``)."""
    form = aiohttp.FormData(default_to_multipart=True)
    if filename is None:
        form.add_field(field, data.decode())
    else:
        form.add_field(field, data, filename=filename, content_type="text/csv")
    return form


async def test_multipart_uploads_are_ingested_like_raw_bodies(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session, **{"api.max_upload_bytes": 4096}) as (node, client):
        status, raw = await _upload(client, CSV, name="raw", filename="cities.csv")
        assert status == 201, raw
        form = aiohttp.FormData()
        form.add_field("note", "a plain field first")  # skipped: the file part is what is ingested
        form.add_field("file", CSV, filename="cities.csv", content_type="text/csv")
        status, multi = await _upload(client, form, name="multi")  # the name and format come from the part
        assert status == 201, multi
        assert [s["cid"] for s in multi["slices"]] == [s["cid"] for s in raw["slices"]] and multi["rows_added"] == 3
        gz = await _upload(client, _form("file", gzip.compress(CSV), "c.csv.gz"), name="gz")
        assert gz[0] == 201 and gz[1]["slices"][0]["cid"] == raw["slices"][0]["cid"], gz

        status, body = await _upload(client, _form("note", b"hello", None), name="nofile")
        assert status == 400 and body["error"]["message"].startswith("the multipart body has no file part"), body
        big = CSV + b"".join(b"%d,X,1\n" % i for i in range(1000))
        status, body = await _upload(client, _form("file", big, "big.csv"), name="big")  # refused on Content-Length
        assert status == 413 and "api.max_upload_bytes" in body["error"]["message"], body
        assert not any((node.home.path / "tmp").iterdir())  # no spool file left behind


async def test_upload_errors_never_show_the_spool_path(kubo_session: ManagedKubo, tmp_path: Path) -> None:
    async with inprocess_node(tmp_path / "n", kubo_session) as (node, client):
        home = str(node.home.path)
        for data in (_form("file", b"id,city\n1,a\n2\n", "bad.csv"), _form("file", b"not parquet", "bad.parquet")):
            status, body = await _upload(client, data, name="bad")
            message = body["error"]["message"]
            assert status == 400 and message.startswith("bad."), body  # the client's file name
            assert home not in message and "upload-" not in message and "/tmp" not in message, message
        status, body = await _upload(client, b"x", name="bad", format="parquet")  # a raw body, no name given
        assert status == 400 and body["error"]["message"].startswith("upload: "), body


def test_spark_errors_hide_the_node_s_slice_folders(tmp_path: Path) -> None:
    slices = tmp_path / "home" / "cache"
    inputs = {"a": ([slices / "bafk1.parquet"], ["col_0"])}
    said = f"[FAILED_READ_FILE] Error while reading file file://{slices}/bafk1.parquet; also {slices}/bafk1.parquet"
    hidden = _hide_paths(said, inputs)
    assert str(tmp_path) not in hidden and hidden.count("<slices>/bafk1.parquet") == 2, hidden


def test_spark_start_errors_hide_the_node_s_folders(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    worker = SparkWorker(home / "spark.sock", log_path=home / "logs" / "spark.log")
    (home / "logs" / "spark.log").write_text(f"Error: cannot bind {home}/spark.sock in {worker.scratch}/tmp\n")
    tail = worker._log_tail()
    assert str(tmp_path) not in tail and "spark.log in the node's logs" in tail, tail
