"""Canonicalization off the event loop, in child processes with a wall-time budget (docs/queries.md "Limits").

Why: on the event loop, one hostile statement given to the canonicalizer (a 100 KB OR chain:
43.8 s) froze the whole node, ``/healthz`` included, and could be sent again at once. Here:

- each statement is canonicalized in a child process (a pool of at most ``processes``, started at first need and
  kept); the node's loop only waits on a pipe;
- a child that has not answered within ``timeout`` seconds (``query.canonicalize_timeout``) is killed and the
  request refused ``too-complex``; a child that dies is replaced and the request refused likewise;
- every outcome is remembered in an LRU keyed by the statement's hash, its inputs' structures and the
  canonicalizer's version (its rules revision): the same hostile statement is refused at once the second time, and
  identical statements in flight share one child. Refusals for time are kept only ``_TIMEOUT_MEMO_S`` seconds: a
  busy machine, not the statement, may have caused them.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import pickle
import signal
import sys
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from node.domain.sql.canonical import CANONICALIZER_VERSION, CanonicalQuery, canonicalize_declared
from node.domain.sql.declared_inputs import Input, declare
from node.support.errors import CairnError, QueryRefused, one_line

log = logging.getLogger("cairn.query")

DEFAULT_TIMEOUT = 5.0
_START_TIMEOUT = 120.0  # a child's first start imports sqlglot in the forkserver; slow under load, never hostile
_CACHED_SQL_CHARS = 16_384  # accepted statements up to this size are remembered (the rest would cost memory)
_TIMEOUT_MEMO_S = 300.0
_WARM_SQL = "SELECT k, SUM(v) AS total FROM t WHERE v > 0.5 GROUP BY k ORDER BY k"
_ROOT = str(Path(__file__).resolve().parents[3])  # the directory that holds this node package


@dataclass(frozen=True)
class _Outcome:
    """A remembered outcome: the canonical query, or the refusal's parts (rule, why, fragment)."""

    query: CanonicalQuery | None
    refusal: tuple[str, str, str] | None = None
    expires: float | None = None  # monotonic time after which it is forgotten (refusals for time only)

    def result(self) -> CanonicalQuery:
        if self.query is None:
            rule, why, fragment = self.refusal or ("too-complex", "refused before", "")
            raise QueryRefused(rule, why, fragment)
        return self.query


class _Child:
    """One child process (``python -m node.domain.sql.sandbox``), spoken to in length-prefixed pickles on its stdin/out.

    A plain subprocess, not ``multiprocessing``: its start methods re-import the parent's ``__main__`` (the CLI).
    When the node dies the child reads EOF on stdin and ends: no orphan."""

    def __init__(self, proc: asyncio.subprocess.Process, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader):
        self.proc, self.stdin, self.stdout = proc, stdin, stdout

    @classmethod
    async def start(cls) -> _Child:
        path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "node.domain.sql.sandbox",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},  # this node's code, wherever the node was started from
        )
        if proc.stdin is None or proc.stdout is None:
            raise CairnError("the canonicalizer process has no pipes")
        child = cls(proc, proc.stdin, proc.stdout)
        try:
            ready = await asyncio.wait_for(child.read(), _START_TIMEOUT)
        except (TimeoutError, EOFError, OSError, pickle.UnpicklingError) as e:
            await child.kill()
            raise CairnError(f"the canonicalizer process did not start ({one_line(e)})") from None
        if ready != "ready":
            await child.kill()
            raise CairnError("the canonicalizer process did not start (it said something else than ready)")
        return child

    async def ask(self, request: tuple[str, tuple[Input, ...]]) -> Any:
        """Send one statement and wait (without blocking the loop) for the child's answer."""
        _write(self.stdin, request)
        await self.stdin.drain()
        return await self.read()

    async def read(self) -> Any:
        size = int.from_bytes(await self.stdout.readexactly(8), "big")  # IncompleteReadError is an EOFError
        return pickle.loads(await self.stdout.readexactly(size))  # our own child's frames: trusted

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


class Sandbox:
    """Canonicalizes statements in bounded child processes and remembers the outcomes (see the module doc)."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, processes: int = 2, memo_size: int = 1024) -> None:
        self.timeout = timeout
        self.memo_size = memo_size
        self._slots = asyncio.Semaphore(processes)
        self._idle: list[_Child] = []
        self._busy: set[_Child] = set()
        self._memo: OrderedDict[str, _Outcome] = OrderedDict()
        self._flights: dict[str, asyncio.Future[CanonicalQuery]] = {}
        self.child_calls = 0  # statements sent to a child: a remembered one never is (tests count on it)
        self.memo_hits = 0

    async def canonicalize(self, sql: str, inputs: Mapping[str, Sequence[tuple[str, str]]]) -> CanonicalQuery:
        """As :func:`node.domain.sql.canonicalize`, off the loop, within ``timeout`` seconds, remembered."""
        if not isinstance(sql, str):
            raise QueryRefused("parse-error", "the statement must be a string", repr(sql))
        declared = declare(inputs)
        key = _key(sql, declared)
        remembered = self._recall(key)
        if remembered is not None:
            self.memo_hits += 1
            return remembered.result()
        flight = self._flights.get(key)
        if flight is None:  # identical statements in flight share one child
            flight = asyncio.ensure_future(self._compute(key, sql, declared))
            self._flights[key] = flight
            flight.add_done_callback(lambda f: self._landed(key, f))
        return await asyncio.shield(flight)

    async def warm(self) -> None:
        """Start a child and have it canonicalize one small statement now, so that a node's first query does not
        pay for the child's start and sqlglot's first use (about 0.5 s here: a first peer hit's whole `prepare`)."""
        if self._idle or self._busy:
            return
        try:
            await self.canonicalize(_WARM_SQL, {"t": [("k", "int64"), ("v", "double")]})
        except CairnError as e:  # a real statement says what is wrong, again
            log.info("canonicalizer warm-up: %s", one_line(e))

    async def close(self) -> None:
        """Stop every child (in use or idle); a later call starts new ones."""
        for flight in list(self._flights.values()):
            flight.cancel()
        children = [*self._idle, *self._busy]
        self._idle.clear()
        for child in children:
            await child.kill()

    # -- the memo ------------------------------------------------------------------------------

    def _recall(self, key: str) -> _Outcome | None:
        outcome = self._memo.get(key)
        if outcome is None:
            return None
        if outcome.expires is not None and time.monotonic() > outcome.expires:
            del self._memo[key]
            return None
        self._memo.move_to_end(key)
        return outcome

    def _remember(self, key: str, outcome: _Outcome) -> None:
        self._memo[key] = outcome
        self._memo.move_to_end(key)
        while len(self._memo) > self.memo_size:
            self._memo.popitem(last=False)

    def _landed(self, key: str, flight: asyncio.Future[CanonicalQuery]) -> None:
        self._flights.pop(key, None)
        if not flight.cancelled():
            flight.exception()  # retrieved here: every waiter may have gone (the exception is theirs to see)

    async def _compute(self, key: str, sql: str, declared: tuple[Input, ...]) -> CanonicalQuery:
        outcome = await self._in_child(sql, declared)
        if outcome.query is None or len(sql) <= _CACHED_SQL_CHARS:
            self._remember(key, outcome)
        return outcome.result()

    # -- the children --------------------------------------------------------------------------

    async def _in_child(self, sql: str, declared: tuple[Input, ...]) -> _Outcome:
        async with self._slots:
            for attempt in (1, 2):  # a kept child may have died while idle (killed from outside): retry once
                child, fresh = await self._take()
                self.child_calls += 1
                try:
                    reply = await asyncio.wait_for(child.ask((sql, declared)), self.timeout)
                except TimeoutError:
                    await self._drop(child)
                    why = f"canonicalizing took longer than {self.timeout:g} s (query.canonicalize_timeout)"
                    return _refused("too-complex", why, sql, time.monotonic() + _TIMEOUT_MEMO_S)
                except (EOFError, OSError) as e:
                    await self._drop(child)
                    if not fresh and attempt == 1:
                        continue
                    log.warning("canonicalizer process died", extra={"error": one_line(e), "sql_chars": len(sql)})
                    return _refused("too-complex", "the canonicalizer's process died on this statement", sql)
                except BaseException:  # cancelled mid-answer: the pipe holds a stale reply, so the child goes
                    await asyncio.shield(self._drop(child))
                    raise
                self._busy.discard(child)
                self._idle.append(child)
                return _unpack(reply, sql)
        raise CairnError("unreachable: the second attempt always returns")  # for mypy's flow analysis

    async def _take(self) -> tuple[_Child, bool]:
        """An idle child (fresh=False) or a new one (fresh=True)."""
        while self._idle:
            child = self._idle.pop()
            if child.alive:
                self._busy.add(child)
                return child, False
            await child.kill()  # died while idle and already reaped: forget it
        child = await _Child.start()  # outside the budget: a start (about 1 s of imports) is not the statement's
        self._busy.add(child)
        return child, True

    async def _drop(self, child: _Child) -> None:
        self._busy.discard(child)
        await child.kill()


def _key(sql: str, declared: tuple[Input, ...]) -> str:
    """The memo key: the statement's hash, its inputs' structures and the canonicalizer's version (its rules)."""
    digest = hashlib.sha256(sql.encode("utf-8", "surrogatepass"))
    digest.update(b"\0" + repr(declared).encode("utf-8", "surrogatepass"))
    return f"{CANONICALIZER_VERSION}:{digest.hexdigest()}"


def _unpack(reply: Any, sql: str) -> _Outcome:
    kind = reply[0]
    if kind == "ok":
        return _Outcome(reply[1])
    if kind == "refused":
        return _refused(reply[1], reply[2], reply[3])
    # Our bug on this statement: the caller still gets a clear 4xx, the log keeps the cause.
    log.warning("canonicalizer failed", extra={"error": reply[1], "sql_chars": len(sql)})
    return _refused("unsupported-construct", f"the canonicalizer failed on this statement ({reply[1]})", sql)


def _refused(rule: str, why: str, fragment: str, expires: float | None = None) -> _Outcome:
    """A refusal to remember, shortened as its message is (the memo never holds a whole hostile statement)."""
    e = QueryRefused(rule, why, fragment)
    return _Outcome(None, (e.rule, e.why, e.fragment), expires)


# -- the child's side --------------------------------------------------------------------------------


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """A child's loop: answer statements until the node closes the pipe (or dies: EOF too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the node stops its children
    _write(sink, "ready")
    while True:
        header = source.read(8)
        if len(header) < 8:
            return
        sql, declared = pickle.loads(source.read(int.from_bytes(header, "big")))  # the node's frames: trusted
        _write(sink, answer(sql, declared))


def _write(sink: IO[bytes] | asyncio.StreamWriter, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sink.write(len(data).to_bytes(8, "big") + data)
    if not isinstance(sink, asyncio.StreamWriter):
        sink.flush()


def answer(sql: str, declared: tuple[Input, ...]) -> tuple[Any, ...]:
    """One statement's outcome as a picklable tuple (QueryRefused's constructor does not survive pickling)."""
    try:
        return ("ok", canonicalize_declared(sql, declared))
    except QueryRefused as e:
        return ("refused", e.rule, e.why, e.fragment)
    except Exception as e:  # noqa: BLE001  any other failure is reported to the node, which refuses with it
        return ("failed", one_line(e, 200))


if __name__ == "__main__":
    # stdout is the pipe to the node: anything else printed goes to stderr instead of corrupting a frame.
    pipe = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, pipe)
