"""Every error the node raises on purpose: one tree under :class:`CairnError`, each class with its HTTP ``status``.

Each carries a one-line, user-facing message (the base folds any line breaks): the CLI prints it as
``error: <message>`` and exits non-zero, the HTTP API answers ``{"error": {"type", "message"}}`` with ``status``.

This module is the bottom layer: it imports nothing of Cairn, so any package may import it (``p2p`` and
``spark_worker`` use only :func:`one_line`). Errors of the layers below the node (``P2PError`` of ``p2p``,
``SettingsError`` of ``config``) are mapped to the classes here where node code calls those layers.
"""

from __future__ import annotations

import difflib
import errno
import re
from collections.abc import Iterable

_SPACES = re.compile(r"\s+")


def one_line(text: object, limit: int | None = 1000, *, first: bool = False) -> str:
    """``text`` for a one-line message: whitespace runs (line breaks too) become one space, cut at ``limit``
    characters with ``…``. ``first`` keeps only the first non-blank line (Spark and JVM messages put a plan or
    a stack trace after it). An exception is written ``Type: message`` (``Type`` alone when it has none)."""
    if isinstance(text, BaseException):
        inner = one_line(str(text), limit, first=True)
        return f"{type(text).__name__}: {inner}" if inner else type(text).__name__
    s = str(text)
    if first:
        s = next((line for line in s.splitlines() if line.strip()), "")
    s = _SPACES.sub(" ", s).strip()
    if limit is not None and len(s) > limit:
        s = s[: limit - 1].rstrip() + "…"
    return s


def quote(text: object, limit: int = 80) -> str:
    """Quote user text for an error message: one line, escaped, cut to ``limit`` characters."""
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    out = []
    for ch in s:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return '"' + "".join(out) + '"'


def did_you_mean(word: str, choices: Iterable[str], limit: int = 3) -> str:
    """``" (did you mean 'amount'?)"`` when some of ``choices`` are close to ``word`` (difflib, case-insensitive),
    else ``""``: appended to an error that names an unknown column, table or dataset."""
    by_key: dict[str, str] = {}
    for choice in choices:
        by_key.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(word.lower(), list(by_key), n=limit, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(by_key[c]) for c in close)}?)"


# -- the base and the generic classes ----------------------------------------------------------------


class CairnError(Exception):
    """Base of every error Cairn raises on purpose; raised itself only for the node's own faults (HTTP 500)."""

    status: int = 500  # HTTP status the API answers with

    def __init__(self, message: object = "", *args: object) -> None:
        # One line by construction: no message of any subclass can span several lines.
        super().__init__(one_line(message, None), *args)

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args and self.args[0] else self.__class__.__name__


class InvalidInput(CairnError):
    """The caller gave something malformed (bad DAG-JSON, bad CID, a bad flag or parameter value)."""

    status = 400


class Unauthorized(CairnError):
    """A request without the API token, or a loopback-only feature asked from elsewhere."""

    status = 401


class NotFound(CairnError):
    """The named thing (dataset, CID, execution, peer) does not exist here."""

    status = 404


class TooLarge(CairnError):
    """A request body over its route's cap (``api.max_json_bytes`` for JSON, ``api.max_upload_bytes`` for uploads), or
    an input over an ingest cap (``datasets.max_input_bytes``, ``max_decompression_ratio``, ``max_columns``,
    ``max_rows``): refused, nothing kept."""

    status = 413


class Forbidden(CairnError):
    """A request from a web page that is not the node's own (its ``Origin``), for anything but reading open data."""

    status = 403


class PathRefused(Forbidden):
    """``path=`` naming a file the node may not ingest in place: under ``$CAIRN_HOME``, outside ``api.ingest_dirs``
    (or none set), or not a regular file. The message never holds the file's contents."""


class MisdirectedRequest(CairnError):
    """A ``Host`` header that is not one of the node's names (DNS rebinding): the request is not for this node."""

    status = 421


class UnsupportedMediaType(CairnError):
    """A JSON route's body sent without ``Content-Type: application/json`` (a form or text/plain post)."""

    status = 415


class TooManyJobs(CairnError):
    """As many query jobs as ``api.max_jobs`` already run: try again when one ends."""

    status = 429


class RenderError(CairnError):
    """A result value this node cannot write (an Arrow type it does not know). The execution stays usable:
    its Parquet is fetched as it is."""

    status = 422


class TypeCheckStop(InvalidInput):
    """Inside node.domain.model.typecheck only: an algorithm stops with a code (a CID it cannot expand, a schema it
    cannot
    read); the public functions answer it as ``result`` false with that code, so it never reaches a face."""

    @property
    def code(self) -> str:
        return self.message


class BlockNotRetrieved(TypeCheckStop):
    """A CID the type checks could not expand: no loader (no IPFS node), or the block is absent or unusable."""


class TypeExpansionLimit(TypeCheckStop):
    """A type, asset or schema expands past node.domain.model.typecheck.Limits (blocks, array elements, nesting)."""


class TypeMismatch(CairnError):
    """A query's result is not a term of the type the query declared (docs/provenance.md "Types"). The execution
    is recorded all the same."""

    status = 422


class InsufficientStorage(CairnError):
    """A disk is full (ENOSPC, EDQUOT) while the node writes an upload or an ingest's slices, or while Kubo stores
    them in its repo: the work is abandoned, its files removed, and nothing changed (a full disk is a
    clear error, not a 500 or a 502)."""

    status = 507

    def __init__(self, what: str, where: object) -> None:
        super().__init__(f"no space left on disk for {what} ({where}): free space and retry; nothing was changed")

    @staticmethod
    def is_disk_full(e: BaseException) -> bool:
        """``e`` says the disk is full: by errno, or by text (pyarrow's IO errors often carry no errno, and Kubo
        reports its own full repo as ``… no space left on device`` in an RPC error)."""
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e).lower()
        return "no space left on device" in text or "disk quota exceeded" in text


class IngestCancelled(CairnError):
    """An ingest stopped before its commit because the client that asked for it went away: its work is removed and
    nothing was kept (a bomb's upload must not go on eating CPU and disk for nobody)."""

    status = 499  # nobody reads it (the client is gone); nginx's "client closed request"


class ConfigError(CairnError):
    """The node's own setup is broken (config file, key, token, Kubo binary); never for a value a user just gave."""

    status = 500


class NodeNotRunning(CairnError):
    """No node runs for this CAIRN_HOME (or it does not answer)."""

    status = 503


class NodeStopping(NodeNotRunning):
    """The node is stopping (a signal or `cairn node stop`): it finishes what runs and starts nothing new."""


class Conflict(CairnError):
    """The thing changed under the request (a dataset's head moved during an ingest or pull); nothing was changed."""

    status = 409


class PeersDisabled(CairnError):
    """A peer operation on a node that runs no p2p host (``peers.enabled = false``): the request conflicts with
    the node's settings, which only its operator can change."""

    status = 409


class RemoteError(CairnError):
    """The CLI's view of an error the node answered with; its message and status are the node's."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def from_settings(e: ValueError) -> CairnError:
    """config's ``SettingsError`` as the node's error, where node code loads settings: a value the user just gave
    as a flag is :class:`InvalidInput`; the node's own configuration (config file, environment) :class:`ConfigError`.
    Duck-typed on ``origin``, so this module imports nothing (config must not import node either)."""
    return (InvalidInput if getattr(e, "origin", "file") == "flag" else ConfigError)(str(e))


# -- the object model (node/domain/model) -------------------------------------------------------------------


class InvalidCID(InvalidInput):
    """A CID string or value that cannot be parsed or is not usable."""


class InvalidDagJson(InvalidInput):
    """Text that is not valid DAG-JSON (message: ``invalid DAG-JSON: line L column C: …``)."""


class InvalidObject(InvalidInput):
    """An IPLD value with the wrong shape for its kind; the message names the field path."""


class UnknownKind(InvalidObject):
    """A ``typedVersion`` no registered kind claims."""


class EncodingError(InvalidInput):
    """A value that cannot be encoded (or a block that cannot be decoded) by a codec."""


class HashMismatch(CairnError):
    """Block bytes whose hash is not the one their CID names: corrupt or forged data from Kubo or a peer."""

    status = 502


# -- queries (node/domain/sql) -----------------------------------------------------------------------------

FRAGMENT_MAX = 80


class QueryRefused(InvalidInput):
    """A statement the canonicalizer refuses.

    ``rule`` is a short, stable id (``nondeterministic-function``, ``unknown-table``, …; the full list is
    in docs/queries.md), ``why`` says what is wrong, ``fragment`` is the offending piece of SQL, shortened.
    The message is one line: ``query refused (<rule>): <why>: <fragment>``.
    """

    def __init__(self, rule: str, why: str, fragment: str = "") -> None:
        self.rule = rule
        self.why = one_line(why, 300)
        self.fragment = one_line(fragment, FRAGMENT_MAX)
        message = f"query refused ({rule}): {self.why}"
        if self.fragment:
            message += f": {self.fragment}"
        super().__init__(message)


# -- datasets (node/services/datasets) -------------------------------------------------------------------------


class SchemaChangeRefused(InvalidInput):
    """An append whose columns or types differ from the dataset's, where the merge strategy forbids it."""


class SliceCorrupt(CairnError):
    """Bytes fetched for a slice do not give its CID: they never enter the cache."""

    status = 502


class SliceFetchStopped(SliceCorrupt):
    """A slice decoded while it arrives lost its bytes: its fetch failed or was given up (the fetch's own error,
    which comes first, is what callers see; node/services/datasets/fetching.py)."""


class PullRefused(CairnError):
    """Something a peer sent in a pull does not check out; the message names the CID that failed."""

    status = 502


class PullTimeout(PullRefused):
    """A pull that did not finish within ``datasets.pull_deadline`` (a source that drips its answers)."""

    status = 504


class PullCancelled(PullRefused):
    """A pull ended because the node is stopping; nothing of it was kept."""

    status = 503


# -- peers (node/services/peers/, node/services/resolve/claim_checks.py; P2PError of p2p/ is mapped to these)
# ------------


class PeerError(CairnError):
    """A peer could not be reached or answered nothing usable (p2p/'s ``P2PError`` at the node's boundary)."""

    status = 502


class PeerTimeout(PeerError):
    """A peer did not answer before the deadline (p2p/'s ``P2PTimeout`` at the node's boundary)."""

    status = 504


class NotCairnPeer(InvalidInput):
    """An address whose libp2p peer does not speak Cairn's protocols (often a Kubo swarm address): not kept."""


def peer_failure(e: Exception) -> CairnError:
    """A failure of the p2p layer (p2p's ``P2PError``) as a node error, where node code calls p2p: a timeout is
    :class:`PeerTimeout`, the caller's bad address or peer id (``P2PBadInput``, a ``ValueError``) is
    :class:`InvalidInput`, anything else :class:`PeerError`. Duck-typed, so this module imports nothing."""
    if isinstance(e, CairnError):
        return e
    if isinstance(e, TimeoutError):
        return PeerTimeout(str(e))
    if isinstance(e, ValueError):
        return InvalidInput(str(e))
    return PeerError(str(e))


class ClaimRefused(CairnError):
    """A peer's claim (announcement, receipt, execution) does not check out against what we asked."""

    status = 502


# -- Kubo (node/adapters/ipfs) ----------------------------------------------------------------------------------


class KuboError(CairnError):
    """Kubo failed us: unreachable, timed out, answered an error or something we refuse."""

    status = 502


class KuboUnreachable(KuboError):
    """Nothing answers at the API address (connection refused, unknown host)."""

    status = 503
    hint = (
        "is the Kubo daemon running? `cairn node start` runs a managed one; "
        "for an external Kubo check `ipfs.api` in the config"
    )

    def __init__(self, api_url: str, detail: str = "") -> None:
        self.api_url = api_url
        self.detail = one_line(detail)
        why = f" ({self.detail})" if self.detail else ""
        super().__init__(f"cannot reach Kubo at {api_url}{why}: {self.hint}")


class KuboTimeout(KuboError):
    """A call did not finish in time: Kubo's own ``timeout=`` fired, or our client gave up."""

    status = 504

    def __init__(self, path: str, timeout: float | None, detail: str = "") -> None:
        self.path = path
        self.timeout = timeout
        limit = f" within {timeout:g} s" if timeout is not None else ""
        tail = f" ({one_line(detail)})" if detail else ""
        super().__init__(f"Kubo {path} did not answer{limit}{tail}")


class KuboRPCError(KuboError):
    """Kubo answered an error: its ``{"Message", "Code", "Type"}`` JSON (or a plain-text 4xx)."""

    def __init__(self, path: str, message: str, code: int | None = None, http_status: int | None = None) -> None:
        self.path = path
        self.kubo_message = one_line(message)
        self.code = code
        self.http_status = http_status
        super().__init__(f"Kubo {path}: {self.kubo_message}")


class KuboNotFound(KuboRPCError, NotFound):
    """Kubo says the thing does not exist (block not local, name unresolved, not pinned, ...)."""

    status = 404


class KuboCIDMismatch(KuboError):
    """Kubo's CID (or the bytes it returned) disagree with what we computed locally."""

    def __init__(self, expected: object, got: object, *, message: str | None = None) -> None:
        self.expected = str(expected)
        self.got = str(got)
        super().__init__(message or f"Kubo returned CID {self.got}, expected {self.expected}")


class KuboTruncated(KuboError):
    """A streamed answer (cat, dag export) ended early or malformed.

    Once Kubo has sent ``200 OK`` it reports a failure only in the ``X-Stream-Error`` HTTP trailer,
    which aiohttp drops; we notice from the byte count (cat) or the CAR check (dag export).
    """


class GatewayRefused(KuboError):
    """The Kubo gateway behind ``/ipfs/`` refused a request (a bad CID or path, a format it cannot give, content
    this node does not hold): its status is kept, its text becomes the message (docs/gateway.md)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class GatewayUnavailable(CairnError):
    """A gateway request only a Kubo gateway answers (a path, a dag-scope, entity-bytes) on a node whose external
    Kubo has no ``ipfs.gateway`` set."""

    status = 501


class KuboStartError(KuboError):
    """The managed daemon could not be initialised or did not come up (the message carries its log tail)."""


# -- Spark (node/services/resolve/spark.py, the node's handle on spark_worker/) -------------------------------


class SparkError(CairnError):
    """A query failed in Spark (analysis or runtime error), with Spark's message on one line."""

    status = 500

    def __init__(
        self, message: str, *, kind: str = "runtime", condition: str | None = None, sqlstate: str | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind  # "analysis" | "runtime" | "request" | "cancelled" | "worker" | "refused"
        if (
            kind == "analysis"
            or (sqlstate or "")[:2] in ("22", "42")
            or "UNSUPPORTED_DATA_TYPE" in (condition or message)
        ):
            self.status = 422  # the query (or its data) is what Spark refused: the asker's to fix, not a 500
        self.condition = condition  # Spark's error class, e.g. UNRESOLVED_COLUMN.WITH_SUGGESTION
        self.sqlstate = sqlstate


class RecordedFailure(CairnError):
    """The invocation failed deterministically (a data error Spark raises under the pinned ANSI profile:
    docs/queries.md "Recorded failures"): recorded as a failed ``ex_0`` with a signed receipt, and answered
    again from that record, without Spark, until a request asks to retry."""

    status = 422

    def __init__(self, message: str, *, error_class: str, execution: str, receipt: str) -> None:
        super().__init__(message)
        self.error_class, self.execution, self.receipt = error_class, execution, receipt


class SparkQueueFull(SparkError):
    """``spark.max_queued_jobs`` queries already wait for a free Spark slot: this one is refused at once instead of
    joining an unbounded queue (each waiting miss holds a connection and memory)."""

    status = 429

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="busy")


class SparkRefused(SparkError):
    """The worker's guard refused the plan (spark_worker/guard.py): the query's fault, not the engine's."""

    status = 400

    def __init__(self, message: str, *, condition: str | None = None) -> None:
        super().__init__(message, kind="refused", condition=condition)


class SparkWorkerDied(SparkError):
    """The worker process died (or vanished) while it held our job; it is being restarted."""

    status = 503

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="worker")


class SparkStartError(SparkError):
    """The worker did not come up (bad setting, no Java, timeout); the message ends with its log's tail."""

    status = 503

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="worker")


class SparkTimeout(SparkError):
    """``run`` gave up after its timeout; the worker cancels the job."""

    status = 504

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="cancelled")


# -- provenance (node.services.provenance; docs/provenance.md) ---------------------------------------------------------


class BlockMissing(NotFound):
    """A block a walk needs that this node does not hold and that did not come within the deadline (or was not
    asked for: offline). A lineage shows it as a ``missing`` node; verify as a check it could not make."""

    def __init__(self, cid: str, reason: str) -> None:
        super().__init__(reason)
        self.cid = cid


class ProofMalformed(InvalidInput):
    """A proof file that is not a well-formed proof CAR (docs/provenance.md "Proofs"): the message names the first
    fault and its byte. ``cairn verify FILE.car`` reports it as a failed check, not as an error."""


class ProofLacks(ProofMalformed):
    """A block the checks read that the proof file does not hold: the proof fails (it is not merely unchecked)."""
