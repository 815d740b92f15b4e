"""A job as the worker receives it: the ``run`` request parsed and checked, the job's cancel flag and the future
its answer is put in; and the exceptions that end a job as one kind of answer (``spark_worker/answers.py``)."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_worker import budget
from spark_worker.protocol import GLOB_CHARS, INPUT_NAME, JOB_ID

MAX_INPUTS = 64


class RequestError(Exception):
    """The request is malformed (kind "request")."""


class InputMismatch(Exception):
    """An input's files do not have the declared number of columns (kind "analysis")."""


class Cancelled(Exception):
    pass


class ClientGone(Cancelled):
    """Sending the result failed: the client went away (its job is cancelled)."""


@dataclass
class Job:
    id: str
    statement: str
    inputs: dict[str, tuple[list[str], list[str]]]
    future: concurrent.futures.Future[tuple[dict[str, Any], Any]] = field(default_factory=concurrent.futures.Future)
    cancelled: threading.Event = field(default_factory=threading.Event)
    limits: budget.Limits = field(default_factory=budget.Limits)
    spark: Any = None  # the session running it (a Connect job is cancelled through its own session's tag)
    # Sends one frame to the client (header, payload), from the job thread while the result streams; None: the
    # result is dropped (a warm-up)
    send: Callable[[dict[str, Any], Any], None] | None = None


def parse_job(req: dict[str, Any]) -> Job:
    """The job a ``run`` request asks for; :class:`RequestError` says what is wrong with it."""
    job_id = req.get("job")
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        raise RequestError("run: 'job' must be 1-128 characters of [A-Za-z0-9_.:-]")
    statement = req.get("statement")
    if not isinstance(statement, str) or not statement.strip():
        raise RequestError("run: 'statement' must be a non-empty string")
    raw = req.get("inputs", {})
    if not isinstance(raw, dict) or len(raw) > MAX_INPUTS:
        raise RequestError(f"run: 'inputs' must be an object of at most {MAX_INPUTS} inputs")
    inputs: dict[str, tuple[list[str], list[str]]] = {}
    seen: set[str] = set()
    for name, spec in raw.items():
        if not INPUT_NAME.fullmatch(name):
            raise RequestError(f"run: bad input name {name!r}")
        if name.lower() in seen:  # Spark's names are case-insensitive
            raise RequestError(f"run: input {name!r} given twice")
        seen.add(name.lower())
        inputs[name] = _parse_input(name, spec)
    try:
        limits = budget.Limits.parse(req.get("limits"))
    except ValueError as e:
        raise RequestError(str(e)) from None
    return Job(job_id, statement, inputs, limits=limits)


def _parse_input(name: str, spec: Any) -> tuple[list[str], list[str]]:
    """One input's Parquet file paths and column names."""
    if not isinstance(spec, dict):
        raise RequestError(f"run: input {name!r} must be an object with 'paths' and 'columns'")
    paths, columns = spec.get("paths"), spec.get("columns")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise RequestError(f"run: input {name!r} needs a non-empty list of Parquet file paths")
    for p in paths:
        # A local file, or a slice staged on HDFS or S3 (spark.staging, node/services/resolve/staging.py).
        if not p.startswith(("/", "hdfs://", "s3a://")) or GLOB_CHARS.intersection(p) or "\0" in p:
            raise RequestError(
                f"run: input {name!r}: path {p!r} must be absolute (or hdfs://, s3a://) with no glob characters"
            )
    if not isinstance(columns, list) or not columns or not all(isinstance(c, str) and c for c in columns):
        raise RequestError(f"run: input {name!r} needs a non-empty list of column names")
    if len({c.lower() for c in columns}) != len(columns):
        raise RequestError(f"run: input {name!r} has duplicate column names")
    return list(paths), list(columns)
