"""``POST /api/v0/datasets``: a file uploaded (the body, or a multipart/form-data file part; streamed to disk,
size-limited) or named on the node's machine (``path=``), then ingested; with ``progress=true`` the answer is
NDJSON progress lines, then the result. A client that goes away stops the ingest before its commit."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

from aiohttp import BodyPartReader, web
from multidict import MultiMapping

from node.core import Node
from node.core.result_types import Ingested
from node.faces.api.answering import node_of
from node.faces.api.local_files import open_local
from node.services.datasets import ReadOptions
from node.support.errors import CairnError, IngestCancelled, InsufficientStorage, InvalidInput, TooLarge, Unauthorized

log = logging.getLogger("cairn.api")


def _read_options(q: MultiMapping[str]) -> ReadOptions:
    overrides: dict[str, str] = {}
    for spec in q.getall("type", []):
        col, sep, typ = spec.partition("=")
        if not sep or not col or not typ:
            raise InvalidInput(f"type override {spec!r} must look like COLUMN=TYPE")
        overrides[col] = typ
    header = q.get("header", "true").lower()
    if header not in ("true", "false"):
        raise InvalidInput("header must be true or false")
    columns = q.get("columns")
    return ReadOptions(
        format=q.get("format") or None,
        compression=q.get("compression") or None,
        delimiter=q.get("delimiter") or None,
        encoding=q.get("encoding") or None,
        header=header == "true",
        column_names=columns.split(",") if columns else None,
        schema_overrides=overrides,
        event_time=q.get("event_time") or None,
    )


def _info(q: MultiMapping[str]) -> dict[str, object] | None:
    info: dict[str, object] = {k: q[k] for k in ("title", "description", "license") if q.get(k)}
    if q.getall("keyword", []):
        info["keywords"] = list(q.getall("keyword"))
    return info or None


async def _spool(chunks: AsyncIterator[bytes], dest: Path, limit: int) -> int:
    """Stream ``chunks`` to ``dest``, never holding them whole; refuse past ``limit`` bytes."""
    size = 0
    try:
        with open(dest, "wb") as f:  # noqa: ASYNC230  local disk, 1 MiB at a time: brief, cheaper than a thread hop
            async for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise TooLarge(f"upload larger than api.max_upload_bytes ({limit} bytes): refused")
                f.write(chunk)
    except OSError as e:  # a full disk is the node's state, not a bug: 507, and the caller removes `dest`
        if InsufficientStorage.is_disk_full(e):
            raise InsufficientStorage("the upload", "under $CAIRN_HOME/tmp") from None
        raise
    return size


def _local_file(request: web.Request, node: Node, path: str) -> BinaryIO:
    """``path=``: ingest a file on the node's machine in place (the CLI does for its own node). Only for clients on
    this machine (loopback), only under ``api.ingest_dirs``, never under ``$CAIRN_HOME``
    (node.faces.api.local_files)."""
    import ipaddress

    try:
        loopback = ipaddress.ip_address((request.remote or "").split("%")[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise Unauthorized("path= is only for clients on the node's own machine; upload the file instead")
    return open_local(path, node.home.path, node.settings.api.ingest_dirs)


async def _file_part(request: web.Request) -> BodyPartReader:
    """The first part of a multipart/form-data body that carries a file (``curl -F file=@x.csv``)."""
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if isinstance(part, BodyPartReader) and part.filename is not None:
                return part
            if isinstance(part, BodyPartReader):
                await part.release()  # a plain form field: skipped
    except (ValueError, AssertionError):  # aiohttp's words for a body that does not match its boundary
        raise InvalidInput("malformed multipart/form-data body") from None
    raise InvalidInput("the multipart body has no file part: send the file as -F file=@PATH, or the bytes as the body")


async def _part_chunks(part: BodyPartReader) -> AsyncIterator[bytes]:
    while chunk := await part.read_chunk(1 << 20):
        yield chunk


async def _receive(request: web.Request, node: Node) -> tuple[Path, str]:
    """Spool the upload (the raw body, or the file part of a multipart body) to a fresh file under the home's tmp;
    the spool file (named with the upload's extensions, which tell the reader its format) and the name errors give
    it (the client's file name, never the spool path)."""
    tmp = node.home.path / "tmp"
    tmp.mkdir(exist_ok=True)
    fd, spool = tempfile.mkstemp(prefix="upload-", dir=tmp)
    os.close(fd)
    path, name = Path(spool), request.query.get("filename", "")
    try:
        cap = node.settings.api.max_upload_bytes
        if request.content_type == "multipart/form-data":
            part = await _file_part(request)
            name = name or part.filename or ""
            await _spool(_part_chunks(part), path, cap)
        else:
            await _spool(request.content.iter_chunked(1 << 20), path, cap)
        suffix = "".join(Path(name).suffixes[-2:])
        if re.fullmatch(r"(\.[A-Za-z0-9]{1,10}){1,2}", suffix):
            path = path.rename(path.with_name(path.name + suffix))  # noqa: ASYNC240  one rename, instant
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, Path(name).name or "upload"


async def datasets_add(request: web.Request) -> web.StreamResponse:
    """Upload a file (the body, or a multipart/form-data file part; streamed to disk, size-limited), then ingest it.
    With ``progress=true`` the answer is NDJSON: ``{"bytes", "rows"}`` lines while ingesting, then ``{"result": …}``
    or ``{"error": …}``."""
    q = request.query
    name, to = q.get("name"), q.get("to")
    if bool(name) == bool(to):
        raise InvalidInput("give exactly one of name= (create a dataset) or to= (append to one)")
    node = node_of(request)
    options = _read_options(q)  # refuses bad options before the body is read
    source: Path | BinaryIO
    if q.get("path"):
        source = _local_file(request, node, q["path"])
    else:
        source, label = await _receive(request, node)
        options = replace(options, label=label)  # errors name the client's file, never the spool file
    task: asyncio.Future[Ingested] | None = None
    stop = threading.Event()
    try:
        state = {"bytes": 0, "rows": 0}

        def progress(nbytes: int, rows: int) -> None:  # called from the ingest thread: plain stores only
            state["bytes"], state["rows"] = nbytes, rows

        ingest = node.data.add(
            source,
            name=name or to or "",
            create=bool(name),
            options=options,
            strategy=q.get("merge", "append"),
            primary_key=[c for c in q.get("primary_key", "").split(",") if c],
            info=_info(q),
            progress=progress,
            stop=stop,
        )
        # The ingest runs as its own task, never cut at an arbitrary await: a client that goes away sets its `stop`
        # (below), which ends it at its next read, before its commit, with nothing kept.
        task = asyncio.ensure_future(ingest)
        if q.get("progress") != "true":
            await _while_connected(request, task)
            return web.json_response(task.result(), status=201 if name else 200)
        return await _progress_stream(request, task, state)
    finally:
        if task is None or task.done():
            _release(source)
        else:
            stop.set()  # the handler left before the ingest ended: its client went away
            task.add_done_callback(functools.partial(_after_stopped, source))


async def _while_connected(request: web.Request, task: asyncio.Future[Ingested]) -> None:
    """Wait for ``task``; IngestCancelled as soon as the client's connection closes (the caller stops the ingest).
    Watched here too: a server without aiohttp's handler_cancellation (a test server) never cancels the handler."""
    while not task.done():
        await asyncio.wait([task], timeout=_CONNECTION_CHECK_S)
        if not task.done() and _client_gone(request):
            raise IngestCancelled("the client went away: the ingest is stopped and nothing is kept")


_CONNECTION_CHECK_S = 0.25


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _after_stopped(source: Path | BinaryIO, task: asyncio.Future[Ingested]) -> None:
    """An ingest whose client went away has ended (stopped, or committed if it was past its last check)."""
    _release(source)
    error = None if task.cancelled() else task.exception()  # retrieved: nobody else will
    how = "kept" if error is None else error.message if isinstance(error, CairnError) else type(error).__name__
    log.info("an ingest whose client went away ended: %s", how)


def _release(source: Path | BinaryIO) -> None:
    """After the ingest: remove our spool file, or close the ``path=`` file."""
    if isinstance(source, Path):
        source.unlink(missing_ok=True)
    else:
        source.close()


async def _progress_stream(
    request: web.Request, task: asyncio.Future[Ingested], state: dict[str, int]
) -> web.StreamResponse:
    """NDJSON progress lines every 0.25 s while ``task`` runs, then its result or its error."""
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    while not task.done():
        await asyncio.wait([task], timeout=0.25)
        if _client_gone(request):  # the caller stops the ingest; nothing is left to write to
            raise IngestCancelled("the client went away: the ingest is stopped and nothing is kept")
        await resp.write(json.dumps(state).encode() + b"\n")
    try:
        final: dict[str, object] = {"result": task.result()}
    except CairnError as e:
        final = {"error": {"type": type(e).__name__, "message": e.message, "status": e.status}}
    except Exception as e:  # the stream has begun: a bug is reported in-band, its trace logged
        log.exception("ingest failed")
        final = {"error": {"type": "InternalError", "message": f"internal error: {type(e).__name__}", "status": 500}}
    await resp.write(json.dumps(final).encode() + b"\n")
    await resp.write_eof()
    return resp
