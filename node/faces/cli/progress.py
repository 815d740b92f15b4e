"""Progress for long CLI work (rich), on stderr so stdout stays clean for pipes: upload and ingest bars, a query's
stages; shown only on a terminal."""

from __future__ import annotations

import collections
import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from node.faces.cli.api_client import NodeClient
from node.support.errors import RemoteError


class _Reading:
    """A file whose reads advance a progress bar; urllib streams it in 1 MiB chunks."""

    def __init__(self, f: BinaryIO, advance: Callable[[int], None]) -> None:
        self._f, self._advance = f, advance

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._advance(len(data))
        return data

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(1 << 20):
            yield chunk


@contextlib.contextmanager
def upload_progress(
    f: BinaryIO, total: int | None, quiet: bool = False, upload: bool = True
) -> Iterator[tuple[object, Callable[[int, int], None]]]:
    """The body to send and a callback for the node's ingest progress (bytes of input read, rows). ``upload``
    False: the node reads the file in place (``total`` its size), nothing is sent, only the ingest bar shows."""
    # Sent as 1 MiB chunks whether the length is known or not: given a file, http.client reads and sends 8 KiB at a
    # time (a 1 GB upload took ~1 s of the CLI's CPU, on the cores the node ingests with).
    if quiet or not sys.stderr.isatty():
        yield iter(lambda: f.read(1 << 20), b""), (lambda b, r: None)
        return
    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TextColumn("{task.fields[rows]}"),
    ]
    with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
        sent = bar.add_task("upload", total=total, rows="", visible=upload)
        ingest = bar.add_task("ingest", total=total, rows="", start=False)

        def on_progress(nbytes: int, rows: int) -> None:
            if not bar.tasks[ingest].started:
                bar.start_task(ingest)
            bar.update(ingest, completed=nbytes, rows=f"{rows:,} rows")

        yield iter(_Reading(f, lambda n: bar.advance(sent, n))), on_progress


# -- a query's stages, from its job's server-sent events (node/services/resolve: resolver and jobs) --------------------

STAGES = {
    "started": "resolving the query and its inputs",
    "prepared": "looking it up in the index",
    "lookup": "asking peers",
    "fetching": "fetching the answer from peer {peer}",
    "peers-deadline": "no peer answered within {timeout} s",
    "waiting": "waiting for the Spark worker to start",
    "computing": "computing on Spark",
    "publishing": "publishing the result ({rows} rows)",
}


class Stages:
    """One line per stage, a spinner on the current one and its time, on stderr; gone when the answer is shown."""

    def __init__(self, show: bool) -> None:
        self.bar: Progress | None = None
        if show:
            columns = (SpinnerColumn(finished_text="✓"), TextColumn("{task.description}"), TimeElapsedColumn())
            self.bar = Progress(*columns, console=Console(stderr=True), transient=True)
        self.current: TaskID | None = None

    def __enter__(self) -> Stages:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if self.bar is not None and kind == "spark" and self.current is not None:  # Spark's own progress
            self.bar.update(self.current, description=f"{STAGES['computing']}: {spark_progress(data)}")
            return
        text = STAGES.get(kind)
        if self.bar is None or text is None:
            return
        if self.current is not None:
            self.bar.update(self.current, total=1, completed=1)
        self.current = self.bar.add_task(text.format_map(collections.defaultdict(str, data)), total=None)


def spark_progress(p: dict[str, Any]) -> str:
    """``stage 1/2, tasks 5/8 (2 running)`` from a ``spark`` event (node.services.resolve.spark)."""
    running = f" ({p.get('tasks_running', 0)} running)" if p.get("tasks_running") else ""
    stages = f"stage {min(p.get('stages_done', 0) + 1, p.get('stages', 0))}/{p.get('stages', 0)}"
    return f"{stages}, tasks {p.get('tasks_done', 0)}/{p.get('tasks', 0)}{running}"


def server_sent_events(lines: Iterable[bytes]) -> Iterator[tuple[str, Any]]:
    """(event, data as JSON) from a text/event-stream, one per blank-line-terminated block."""
    kind, data = "message", b""
    for raw in lines:
        line = raw.rstrip(b"\r\n")
        if not line:
            if data:
                yield kind, json.loads(data)
            kind, data = "message", b""
        elif line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data += line[5:].strip()
    if data:
        yield kind, json.loads(data)


def follow_job(
    client: NodeClient, path: str, body: dict[str, Any], stages: Any, what: str, cancelled: str
) -> dict[str, Any]:
    """Start a job (``POST path`` with ``body``, which asks for one) and follow its events to its result, handing
    each other event to ``stages`` (a context manager called with (kind, data)). Ctrl-C cancels the job
    (``DELETE /api/v0/jobs/{id}``, which cancels its Spark job too), says so on stderr with ``cancelled`` and
    raises KeyboardInterrupt again (exit 130). ``what`` names the job's result in errors."""
    started = client.post_json(path, json.dumps(body).encode())
    job = started["job"]
    try:
        with stages as stage, client.open("GET", started["events"]) as resp:
            for kind, data in server_sent_events(resp):
                if kind == "result":
                    return dict(data)
                if kind == "failed":
                    raise RemoteError(data["message"], int(data.get("status", 500)))
                stage(kind, data)
    except KeyboardInterrupt:
        view = json.loads(client.request("DELETE", f"/api/v0/jobs/{job}")[1])
        if view.get("state") == "failed":
            print(f"cancelled: {cancelled.format(job=job)}", file=sys.stderr)
        else:
            print(f"job {job} had already finished: nothing to cancel", file=sys.stderr)
        raise
    raise RemoteError(f"the node ended job {job}'s events before its {what}", 502)


def follow_query(client: NodeClient, body: dict[str, Any], show: bool) -> dict[str, Any]:
    """Ask the node for ``body`` as a job (``wait: false``) and follow its events to its answer, showing its stages
    when ``show``."""
    body = {**body, "wait": False}
    return follow_job(client, "/api/v0/query", body, Stages(show), "answer", "query job {job} and its Spark job")
