"""Cairn settings: defaults < ``$CAIRN_HOME/config.toml`` < ``CAIRN_*`` environment < CLI flags.

Every setting is a field of one of the section dataclasses below; its ``doc`` metadata is the text
``docs/configuration.md`` shows (a test checks the two agree). A setting ``section.key`` is read from
the TOML table ``[section]`` key ``key`` and from the environment variable ``CAIRN_SECTION_KEY``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlsplit

DEFAULT_API_PORT = 7420


class SettingsError(ValueError):
    """A setting that cannot be used; the message is one line and names the setting and where it came from.

    ``origin`` says who gave the value: ``"flag"`` (a command-line flag: the user's input, mapped to the node's
    ``InvalidInput``), ``"env"`` (a ``CAIRN_*`` variable), ``"file"`` (``config.toml``): the node's own
    configuration, mapped to its ``ConfigError``. This package imports nothing of ``node``, so the node maps it
    where it loads settings (``node.faces.cli.main``).
    """

    def __init__(self, message: str, origin: str = "file") -> None:
        super().__init__(" ".join(message.split()))
        self.origin = origin


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class ApiSettings:
    host: str = _doc(
        "Address the HTTP API binds. Loopback by default; anything else exposes the node.", default="127.0.0.1"
    )
    port: int = _doc(
        "Port of the HTTP API; 0 picks a free port (the chosen one is in `cairn status`).", default=DEFAULT_API_PORT
    )
    flight: bool = _doc(
        "Serve Arrow Flight SQL (ADBC, JDBC, BI tools) on `api.host`, with the HTTP API's token rules "
        "(docs/flight-sql.md).",
        default=True,
    )
    flight_port: int = _doc(
        "Port of the Arrow Flight SQL endpoint; -1: the API's port + 1 (7421), or a free port when `api.port` is 0; "
        "0 picks a free port (the chosen one is in `cairn status`).",
        default=-1,
    )
    flight_max_calls: int = _doc(
        "Arrow Flight SQL calls served at once (each holds a thread while it runs); one more is refused "
        "RESOURCE_EXHAUSTED.",
        default=64,
    )
    flight_max_streams: int = _doc(
        "Arrow Flight SQL result streams (DoGet) open at once; one more is refused RESOURCE_EXHAUSTED. Each holds "
        "about `api.flight_batch_bytes` and what gRPC has not yet sent, so this bounds the streams' memory.",
        default=32,
    )
    flight_stream_bytes: int = _doc(
        "Memory all Arrow Flight SQL result streams may hold at once, in bytes, as each reserves it when it opens "
        "(from its slice's Parquet layout: a few batches, and a page and a dictionary of each column); a stream "
        "that would pass it is refused RESOURCE_EXHAUSTED.",
        default=512 << 20,
    )
    flight_batch_bytes: int = _doc(
        "Bytes of one record batch an Arrow Flight SQL stream sends, estimated from the Parquet slice's sizes: a "
        "stream reads its result a batch at a time, never a whole slice.",
        default=1 << 20,
    )
    flight_idle_timeout: float = _doc(
        "Seconds an Arrow Flight SQL call may wait on its client: to send its request, or to take the next part "
        "of the answer. Past it the call is cancelled (the client sees CANCELLED) and what it held is freed.",
        default=60.0,
    )
    flight_max_message_bytes: int = _doc(
        "Largest message an Arrow Flight SQL client may send (a statement, a ticket, an action), in bytes; a "
        "larger one is refused RESOURCE_EXHAUSTED before it is read.",
        default=1 << 20,
    )
    flight_max_pattern: int = _doc(
        "Longest filter pattern (the LIKE patterns of GetTables and GetDbSchemas) an Arrow Flight SQL client may "
        "send, in characters; a longer one is refused INVALID_ARGUMENT.",
        default=256,
    )
    max_upload_bytes: int = _doc(
        "Largest upload (dataset file, Holium import) the API accepts, in bytes; a larger `Content-Length` is "
        "refused before the body is read.",
        default=1 << 30,
    )
    max_json_bytes: int = _doc("Largest JSON request body the API accepts, in bytes.", default=1 << 20)
    open_compute: bool = _doc(
        "Let a client without the API token compute a query miss, or ask with a trust mode looser than "
        "`peers.trust`. Off: such a client is answered only from the index and from peers.",
        default=False,
    )
    allowed_hosts: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Extra names the API answers to in the `Host` header (besides 127.0.0.1, localhost, [::1] and "
        "`api.host`), e.g. a reverse proxy's `node.example.org`; `NAME` allows it on the API's port, `NAME:PORT` "
        "on that port.",
        default_factory=list,
    )
    ingest_dirs: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Absolute directories whose files a client on this machine may have the node ingest in place "
        "(`path=`, which `cairn add` uses for its own node); symlinks are resolved first, only regular files, "
        "never anything under `$CAIRN_HOME`. Empty: `path=` is refused (403) and `cairn add` uploads the file.",
        default_factory=list,
    )
    max_jobs: int = _doc("Query jobs (`wait: false`) that may run at once; more are refused (429).", default=16)
    job_keep_seconds: float = _doc("How long a finished query job's answer is kept.", default=600.0)
    gateway_max_path_segments: int = _doc(
        "Most segments in the path under a CID on `/ipfs/` (`/ipfs/CID/a/b` has 2); a deeper path is refused (400) "
        "before Kubo is asked. Kubo's gateway spends time growing with the square of a path's depth (64: about "
        "0.1 s of CPU; 1,000: about 18 s) and goes on after the client has left.",
        default=64,
    )
    gateway_timeout: float = _doc(
        "Seconds Kubo's gateway may take to begin its answer to an `/ipfs/` request (resolving the path, finding "
        "the first block); then 504. The body's reads are bounded by `ipfs.timeout`.",
        default=10.0,
    )


@dataclass(frozen=True)
class IpfsSettings:
    api: str = _doc(
        "Address of an external Kubo RPC API (`/ip4/127.0.0.1/tcp/5001` or `http://127.0.0.1:5001`, or a unix socket: "
        "`/unix/ABSOLUTE/PATH` or `unix:/ABSOLUTE/PATH`). Empty: the node runs its own Kubo with its repo under "
        "`$CAIRN_HOME/kubo`.",
        default="",
    )
    api_auth: str = _doc(
        "External Kubo only: the secret its `API.Authorizations` expects, in Kubo's `AuthSecret` form "
        "(`bearer:TOKEN`, `basic:USER:PASSWORD` or `basic:BASE64`), sent on every RPC call. Empty: none. "
        "The managed Kubo always has one, made by the node (`$CAIRN_HOME/kubo.secret`).",
        default="",
    )
    binary: str = _doc(
        "Path of the Kubo binary for the managed Kubo. Empty: the one `make run` built (cache), "
        "else `ipfs` on PATH if it is v0.42.0.",
        default="",
    )
    gateway: str = _doc(
        "External Kubo only: URL of its HTTP gateway (`http://127.0.0.1:8080`), which `/ipfs/` relays, hash-checking "
        "every block; keep it on loopback with `Gateway.NoFetch` set. Empty: `/ipfs/` serves one block or a whole-DAG "
        "CAR of a CID itself, and answers 501 to the rest of the trustless gateway (paths, dag-scope, entity-bytes).",
        default="",
    )
    api_port: int = _doc(
        "Managed Kubo: 0, its RPC API listens on a unix socket (`$CAIRN_HOME/kubo.rpc/api.sock`) that no other user "
        "can reach; a port puts it on 127.0.0.1 instead, where Kubo's `/debug/*` paths answer any local process "
        "without the secret (the node warns).",
        default=0,
    )
    gateway_port: int = _doc("Managed Kubo: gateway port on 127.0.0.1; 0 picks a free port.", default=0)
    swarm_port: int = _doc(
        "Managed Kubo: swarm (libp2p TCP) port on `ipfs.swarm_host`; 0 picks a free port.", default=0
    )
    swarm_host: str = _doc(
        "Managed Kubo: address its swarm listens on. Loopback by default (peers on this machine only); `0.0.0.0` "
        "(or `::`) lets peers on other hosts or containers fetch from it. Its RPC API and gateway stay on loopback.",
        default="127.0.0.1",
    )
    swarm_announce: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Managed Kubo: the swarm addresses it announces (Kubo `Addresses.Announce`), e.g. a public address a "
        "port is forwarded from; empty: the addresses it listens on. Announcements carry them (at most 8, public "
        "ones first) as where to fetch from.",
        default_factory=list,
    )
    swarm_no_announce: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Managed Kubo: addresses or ranges it never announces (Kubo `Addresses.NoAnnounce`), e.g. "
        "`/ip4/172.16.0.0/ipcidr/12` for a container bridge no peer can reach.",
        default_factory=list,
    )
    bootstrap: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Managed Kubo: bootstrap peer multiaddrs. Empty: no public bootstrap peers.", default_factory=list
    )
    timeout: float = _doc(
        "Seconds an RPC call to Kubo may take before it fails (fetches of absent CIDs never hang).", default=30.0
    )


@dataclass(frozen=True)
class DatasetSettings:
    rows_per_slice: int = _doc(
        "Rows per Parquet slice. Peers must agree on it for identical data to give identical slice CIDs; "
        "memory during ingest is bounded by one slice.",
        default=1 << 20,
    )
    pull_timeout: float = _doc("Seconds a pull may wait for any one block or slice from a peer.", default=60.0)
    pull_deadline: float = _doc(
        "Seconds a whole pull may take (head, chain, every slice); a source that drips its answers is cut off "
        "then (504). Raise it to pull large datasets over slow links.",
        default=600.0,
    )
    max_input_bytes: int = _doc(
        "Most bytes one ingest (upload, `path=` or pull) may read once decompressed: gzip/zstd text, a Parquet "
        "file's decoded data (Arrow), a spooled Parquet file; beyond it the ingest is refused (413) and nothing is "
        "kept.",
        default=64 << 30,
    )
    max_decompression_ratio: int = _doc(
        "Most bytes a compressed input (gzip, zstd, Parquet pages) may decompress to per byte read, beyond the first "
        "64 MiB (a decompression bomb: 10 MB of gzip holding 10 GiB of CSV); beyond it the ingest is refused (413).",
        default=100,
    )
    max_columns: int = _doc(
        "Most columns an ingested input (or a pulled dataset) may have, nested fields counted; a wider one is refused "
        "(413) from its header or Parquet footer, before its schema is built.",
        default=10_000,
    )
    max_rows: int = _doc(
        "Most rows one ingest (upload, `path=` or pull) may add; beyond it the ingest is refused (413) and nothing is "
        "kept.",
        default=1 << 31,
    )


@dataclass(frozen=True)
class SparkSettings:
    mode: str = _doc(
        'Where Spark runs (docs/spark.md "Modes"): `local` (a warm local session in the worker process), '
        "`standalone` (the worker's driver on a cluster master: `spark.master` = `spark://HOST:PORT`, `yarn` or "
        "`k8s://…`), `connect` (a Spark Connect server at `spark.remote`).",
        default="local",
    )
    master: str = _doc(
        "Spark master for the worker: `local[2]` (mode `local`, default); `spark://HOST:PORT`, `yarn` or "
        "`k8s://https://HOST:PORT` (mode `standalone`).",
        default="local[2]",
    )
    remote: str = _doc(
        "Mode `connect`: the Spark Connect server, `sc://HOST:PORT` (a token goes in `spark.token`, not here).",
        default="",
    )
    token: str = _doc(
        "Mode `connect`: the Spark Connect server's token (`spark.connect.authenticate.token`); never logged or shown. "
        "The client sends it without TLS only to the host `localhost`.",
        default="",
    )
    staging: str = _doc(
        'A location the node and every Spark executor share (docs/scaling.md "Staging"): `file:///shared/dir`, '
        "`hdfs://NAMENODE/dir` or `s3a://BUCKET/dir`. Each input slice is copied there once, under its CID "
        "(`<cid>.parquet`, never overwritten, checked before use; nodes may share it), and Spark reads it there. "
        "Empty: Spark reads the node's own slice cache (fine in `local` mode and on one machine).",
        default="",
    )
    conf: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Extra Spark settings as `key=value` items (the sandbox settings cannot be overridden).", default_factory=list
    )
    autostart: bool = _doc(
        "Start the Spark worker with the node (true), or at the first query that needs it (false).", default=True
    )
    start_timeout: float = _doc("Seconds the Spark worker may take to start before queries fail.", default=180.0)
    query_timeout: float = _doc(
        "Seconds one Spark job may run before it is cancelled (504); the wall-time budget of a query.", default=300.0
    )
    max_result_rows: int = _doc(
        "Rows a Spark result may have; a larger one is refused (400) while it streams, before the batch passing it.",
        default=10_000_000,
    )
    max_result_bytes: int = _doc(
        "Bytes (Arrow IPC) a Spark result may have; a larger one is refused (400) while it streams, before the batch "
        "passing it.",
        default=1 << 30,
    )
    max_plan_bytes: int = _doc(
        "Largest work a query may plan, estimated from Spark's optimized plan statistics before the job runs "
        "(bytes scanned and shuffled, and the product of both sides' sizes for a join without equal keys); "
        "above it the query is refused (400). 0: no limit.",
        default=1 << 40,
    )
    warmup_rows: int = _doc(
        "Rows of the worker's idle JIT warm-up (a filter, group, aggregate and order over generated Parquet, run "
        "after start while no job waits, stopped by the first job), so a first query runs as fast as later ones. "
        "0: none.",
        default=1_000_000,
    )
    max_concurrent_jobs: int = _doc("Spark jobs the worker runs at the same time (more wait their turn).", default=2)
    max_queued_jobs: int = _doc(
        "Spark jobs that may wait for a free slot beyond those running; more are refused at once (429).", default=64
    )
    stall_timeout: float = _doc(
        "Seconds the Spark JVM may use no CPU while a job runs before the worker kills it and is restarted "
        "(the job fails with 503). 0: never.",
        default=120.0,
    )


@dataclass(frozen=True)
class QuerySettings:
    answer_rows: int = _doc("Rows a query answer carries by default (the whole result is always stored).", default=100)
    canonicalize_timeout: float = _doc(
        "Seconds checking and canonicalizing one statement may take (in a child process) before it is refused "
        "`too-complex`.",
        default=5.0,
    )
    answer_from_supersets: bool = _doc(
        "Answer a query by rewriting it over a result this node computed earlier from the same input versions "
        "when a sound rule proves it a restriction (filter, projection, aggregate roll-up), instead of reading "
        'the inputs (docs/queries.md "Answers from supersets"), or over a peer\'s announced result of the same shape '
        "under the request's trust mode (with `query.answer_from_peer_supersets`); and answer the same statement "
        "over a version that only appended slices to one answered here by computing over the new slices and merging "
        '(docs/reuse.md "Appends").',
        default=True,
    )
    answer_from_peer_supersets: bool = _doc(
        "Also try peers' announced results of the query's shape (with `query.answer_from_supersets`): a miss reads and "
        "proves up to four candidates at once, within 3 s in all, and fetches only a proved one's result "
        '(docs/reuse.md "Answers from supersets").',
        default=True,
    )
    lineage_max_nodes: int = _doc(
        "Nodes a lineage walk (and `verify --recursive`) visits at most; past it the answer is cut.", default=500
    )
    lineage_timeout: float = _doc("Seconds a lineage walk may take in all; past it the answer is cut.", default=60.0)
    lineage_fetch_timeout: float = _doc(
        "Seconds a lineage walk waits for one block this node does not hold (fetched by CID through Kubo).",
        default=10.0,
    )


@dataclass(frozen=True)
class PeerSettings:
    trust: str = _doc(
        "How peers' claims are used: `self` (compute everything), `community` (claims signed by trusted keys), "
        "`verify` (any claim, recomputed and compared before answering), `any` (used, labelled unverified).",
        default="community",
    )
    community: str = _doc(
        "The trusted set `community` mode uses (`cairn trust add KEY --community NAME`); empty: every set.", default=""
    )
    listen: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "libp2p listen multiaddrs of the p2p host.", default_factory=lambda: ["/ip4/127.0.0.1/tcp/0"]
    )
    announce: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "Multiaddrs other nodes should dial to reach the p2p host (what `cairn status` prints to share), e.g. a "
        "public address a port is forwarded from; empty: the listen addresses (a wildcard expanded to this "
        "host's), public ones first.",
        default_factory=list,
    )
    bootstrap: list[str] = _doc(  # noqa: RUF009  _doc is dataclasses.field with a doc
        "libp2p peers to dial at start (`/ip4/…/tcp/…/p2p/12D3KooW…`).", default_factory=list
    )
    mdns: bool = _doc("Find peers on the local network with mDNS.", default=False)
    enabled: bool = _doc("Run the libp2p host (announcements and lookups).", default=True)
    # The host's connection, stream and frame budgets (docs/p2p.md "Limits of the host"; p2p/guard.py).
    max_inbound_connections: int = _doc(
        "Inbound libp2p connections open at once; one more is closed at accept. A connection gives its slot back "
        "when it closes.",
        default=250,
    )
    max_streams_per_peer: int = _doc(
        "Streams one peer's connection may have open toward this node; one more is reset at once.", default=128
    )
    max_streams: int = _doc(
        "Streams all peers together may have open toward this node; one more is reset at once.", default=1024
    )
    frame_budget_bytes: int = _doc(
        "Bytes of request frames this node may be receiving from all peers at once: each frame's length is "
        "reserved before its body is read, and a frame that does not fit is refused (its stream reset).",
        default=64 * 1024 * 1024,
    )
    frame_budget_per_peer_bytes: int = _doc(
        "The same budget for one peer (what it may have in flight across its streams).", default=8 * 1024 * 1024
    )
    frame_timeout: float = _doc(
        "Seconds a peer has to send the rest of a request frame once its length arrived; past it the stream is "
        "reset and the frame's budget freed.",
        default=10.0,
    )
    lookup_timeout: float = _doc("Seconds a lookup waits for peers' answers before computing instead.", default=2.0)
    fetch_timeout: float = _doc("Seconds fetching a peer's result may wait for any one block.", default=60.0)
    lookup_carry_bytes: int = _doc(
        "Bytes of a result's small blocks (receipt, execution, envelopes, structure, small slices) this node "
        "carries in each lookup answer, so that the asker needs no fetch (at most 1048576; 0: none).",
        default=262144,
    )
    fetch_ahead_bytes: int = _doc(
        "Bytes of a trusted signer's new claim (the same small blocks a lookup answer carries) this node fetches "
        "when its announcement arrives, so that answering from it later waits for no fetch, even when the signer "
        "is many hops away; only claims of a query shape this node asked lately (a claim naming no shape: one node "
        "in 4), never when the signer's node is a connected peer (its lookup answer carries them); docs/scaling.md "
        '"Who fetches ahead". At most 1048576; 0: none, the blocks are fetched when asked.',
        default=262144,
    )
    resolve_timeout: float = _doc(
        "Seconds the whole network stage of a miss (lookup, connects, fetching and checking "
        "claims) may take before the node computes instead; each output slice that arrives "
        "and checks out gives it this long again, so a large result that keeps flowing is "
        "still fetched.",
        default=10.0,
    )
    # Floods and quotas (docs/peers.md "Floods and quotas"): what peers may make this node store.
    announce_rate: float = _doc(
        "Announcements per second accepted from one peer, and signed by one key (token buckets).", default=2.0
    )
    announce_burst: float = _doc("Announcements one peer, or one key, may send at once.", default=50.0)
    new_signers_burst: float = _doc("Signing keys one peer may bring at once (keys cost nothing to mint).", default=8.0)
    new_signers_per_hour: float = _doc("Signing keys one peer may bring per hour after that.", default=60.0)
    max_claims_per_peer: int = _doc(
        "Claims kept from one peer; the oldest not yet accepted are pruned first.", default=10000
    )
    max_claims: int = _doc("Claims kept from all peers together; pruned likewise.", default=100000)
    bad_messages_before_ignore: int = _doc(
        "Malformed or badly signed messages from a peer before it is ignored.", default=20
    )
    ignore_seconds: float = _doc("Seconds a peer is ignored after that.", default=600.0)
    replay_window: float = _doc(
        "Seconds (of its signer's clock) a gossiped announcement may be older than the newest one this node took "
        "from the same key and still be new (gossip may reorder); older, or one taken already, is a replay: "
        "refused, at the cost of the peer that sent it, not the key's.",
        default=60.0,
    )
    max_signer_marks: int = _doc(
        "Signing keys whose newest gossiped announcement time is kept across restarts (replays of a key past "
        "it are refused); the least recently moved are forgotten first.",
        default=100000,
    )


@dataclass(frozen=True)
class LogSettings:
    level: str = _doc("Log level: debug, info, warning, error.", default="info")
    format: str = _doc("Log format: `text` (key=value) or `json` (one object per line).", default="text")


@dataclass(frozen=True)
class Settings:
    home: Path
    api: ApiSettings = field(default_factory=ApiSettings)
    ipfs: IpfsSettings = field(default_factory=IpfsSettings)
    datasets: DatasetSettings = field(default_factory=DatasetSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    query: QuerySettings = field(default_factory=QuerySettings)
    peers: PeerSettings = field(default_factory=PeerSettings)
    log: LogSettings = field(default_factory=LogSettings)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"home": str(self.home)}
        for name in SECTIONS:
            out[name] = dataclasses.asdict(getattr(self, name))
        return out


SECTIONS: dict[str, type] = {
    "api": ApiSettings,
    "ipfs": IpfsSettings,
    "datasets": DatasetSettings,
    "spark": SparkSettings,
    "query": QuerySettings,
    "peers": PeerSettings,
    "log": LogSettings,
}


def default_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("CAIRN_HOME") or Path.home() / ".cairn").expanduser()


def iter_fields() -> list[tuple[str, Any, str, str]]:
    """Every setting as (dotted key, default, type name, doc): the source of docs/configuration.md."""
    rows = []
    for section, cls in SECTIONS.items():
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            rows.append((f"{section}.{f.name}", default, _type_name(hints[f.name]), f.metadata["doc"]))
    return rows


def _type_name(tp: Any) -> str:
    return str(tp.__name__) if tp in (str, int, float, bool) else "list of strings"


def _coerce(key: str, tp: Any, value: Any) -> Any:
    """Convert a value from TOML/env/flags to the field's type; ValueError when it cannot be."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ValueError
    if tp in (int, float):
        if isinstance(value, bool):
            raise ValueError
        return tp(value)
    if tp is str:
        if not isinstance(value, str):
            raise ValueError
        return value
    # list[str]
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError


@dataclass(frozen=True)
class _Given:
    """A value someone set, with where it came from (for error messages and for who is to blame)."""

    value: Any
    label: str  # "flag api.port", "environment CAIRN_API_PORT", "/home/x/.cairn/config.toml"
    origin: str  # "flag" | "env" | "file" (SettingsError.origin)


def _read_file(cfg: Path) -> dict[str, dict[str, _Given]]:
    try:
        data = tomllib.loads(cfg.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SettingsError(f"{cfg}: not valid TOML: {e}") from None
    out: dict[str, dict[str, _Given]] = {}
    for section, table in data.items():
        if section not in SECTIONS or not isinstance(table, dict):
            raise SettingsError(f"{cfg}: unknown section [{section}] (known: {', '.join(SECTIONS)})")
        out[section] = {key: _Given(value, str(cfg), "file") for key, value in table.items()}
    return out


def _gather(home: Path, env: Mapping[str, str], overrides: Mapping[str, Any]) -> dict[str, dict[str, _Given]]:
    """Every value set, per section: config file < environment < flags."""
    given: dict[str, dict[str, _Given]] = {s: {} for s in SECTIONS}
    cfg = home / "config.toml"
    if cfg.exists():
        for section, table in _read_file(cfg).items():
            given[section].update(table)
    for dotted, *_ in iter_fields():
        section, key = dotted.split(".")
        var = f"CAIRN_{section}_{key}".upper()
        if var in env:
            given[section][key] = _Given(env[var], f"environment {var}", "env")
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if section not in SECTIONS:
            raise SettingsError(f"unknown setting {dotted}", "flag")
        given[section][key] = _Given(value, f"flag {dotted}", "flag")
    return given


def load_settings(
    home: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the settings of one node. ``overrides`` are CLI flags as dotted keys (``{"api.port": 0}``).
    Raises :class:`SettingsError` naming the setting and where its value came from."""
    env = os.environ if env is None else env
    home_path = Path(home).expanduser() if home is not None else default_home(env)
    given = _gather(home_path, env, overrides or {})
    built: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        hints = get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, g in given[section].items():
            if key not in names:
                raise SettingsError(
                    f"{g.label}: unknown setting {section}.{key} (known: {', '.join(sorted(names))})", g.origin
                )
            try:
                kwargs[key] = _coerce(key, hints[key], g.value)
            except (TypeError, ValueError):
                raise SettingsError(
                    f"{g.label}: {section}.{key} must be {_type_name(hints[key])}, got {g.value!r}", g.origin
                ) from None
        built[section] = cls(**kwargs)
    settings = Settings(home=home_path, **built)
    problem = _problem(settings)
    if problem is not None:
        key, why = problem
        section, _, name = key.partition(".")
        source = given[section].get(name)  # None: the default is out of range (never, short of a bug)
        raise SettingsError(f"{source.label}: {why}" if source else why, source.origin if source else "file")
    return settings


def flight_port(api: ApiSettings) -> int:
    """The Flight SQL port ``api.flight_port`` names: -1 follows ``api.port`` (the next one, or free with it)."""
    if api.flight_port != -1:
        return api.flight_port
    return api.port + 1 if 0 < api.port < 65535 else 0


def _address_problem(s: Settings) -> tuple[str, str] | None:
    """A port out of range, or an announce list that is not multiaddrs: (dotted key, why), or None."""
    for key, addrs in (
        ("ipfs.swarm_announce", s.ipfs.swarm_announce),
        ("ipfs.swarm_no_announce", s.ipfs.swarm_no_announce),
        ("peers.announce", s.peers.announce),
    ):
        if not all(_is_multiaddr(a) for a in addrs):
            return key, f"{key} must be multiaddrs (/ip4/…, /ip6/…, /dns…), got {addrs!r}"
    for key, port in (
        ("api.port", s.api.port),
        ("ipfs.api_port", s.ipfs.api_port),
        ("ipfs.gateway_port", s.ipfs.gateway_port),
        ("ipfs.swarm_port", s.ipfs.swarm_port),
    ):
        if not 0 <= port <= 65535:
            return key, f"{key} must be a port number (0-65535), got {port}"
    if not -1 <= s.api.flight_port <= 65535:
        return "api.flight_port", f"api.flight_port must be a port number (0-65535) or -1, got {s.api.flight_port}"
    return None


#: Settings that must be above 0, and those that may be 0 (each: what its message says).
_POSITIVE = (
    "datasets.rows_per_slice",
    "api.max_upload_bytes",
    "api.max_json_bytes",
    "api.max_jobs",
    "api.job_keep_seconds",
    "api.gateway_max_path_segments",
    "api.gateway_timeout",
    "datasets.pull_timeout",
    "datasets.pull_deadline",
    "datasets.max_input_bytes",
    "datasets.max_decompression_ratio",
    "datasets.max_columns",
    "datasets.max_rows",
    "peers.resolve_timeout",
    "spark.query_timeout",
    "spark.max_result_rows",
    "spark.max_result_bytes",
    "spark.max_concurrent_jobs",
    "api.flight_max_calls",
    "api.flight_max_streams",
    "api.flight_stream_bytes",
    "api.flight_batch_bytes",
    "api.flight_idle_timeout",
    "api.flight_max_message_bytes",
    "api.flight_max_pattern",
    # the p2p host's budgets: a zero one would refuse every peer
    "peers.max_inbound_connections",
    "peers.max_streams_per_peer",
    "peers.max_streams",
    "peers.frame_budget_bytes",
    "peers.frame_budget_per_peer_bytes",
    "peers.frame_timeout",
)
_NOT_NEGATIVE = {
    "spark.max_plan_bytes": "must be 0 or more",
    "spark.max_queued_jobs": "must not be negative",
    "spark.stall_timeout": "must be 0 or more",
}


def _sign_checks(s: Settings) -> list[tuple[str, bool, str]]:
    """(key, ok, why) of the settings whose only rule is their sign."""

    def value(key: str) -> Any:
        section, name = key.split(".")
        return getattr(getattr(s, section), name)

    out = [(key, value(key) > 0, f"{key} must be positive") for key in _POSITIVE]
    out += [(key, value(key) >= 0, f"{key} {why}") for key, why in _NOT_NEGATIVE.items()]
    return out


def _problem(s: Settings) -> tuple[str, str] | None:
    """The first setting whose value is out of range: (dotted key, why), or None."""
    found = _address_problem(s)
    if found:
        return found
    checks = (
        (
            "log.level",
            s.log.level.lower() in ("debug", "info", "warning", "error"),
            f"log.level must be one of debug, info, warning, error, got {s.log.level!r}",
        ),
        ("log.format", s.log.format in ("text", "json"), f"log.format must be text or json, got {s.log.format!r}"),
        (
            "ipfs.swarm_host",
            _is_ip(s.ipfs.swarm_host),
            f"ipfs.swarm_host must be an IPv4 or IPv6 address, got {s.ipfs.swarm_host!r}",
        ),
        (
            "peers.trust",
            s.peers.trust in ("self", "community", "verify", "any"),
            f"peers.trust must be self, community, verify or any, got {s.peers.trust!r}",
        ),
        (
            "api.ingest_dirs",
            all(os.path.isabs(d) for d in s.api.ingest_dirs),
            f"api.ingest_dirs must hold absolute directories, got {s.api.ingest_dirs!r}",
        ),
        _spark_mode_problem(s.spark),
        ("spark.staging", not staging_problem(s.spark.staging), staging_problem(s.spark.staging)),
        (
            "ipfs.api_auth",
            not s.ipfs.api_auth or (bool(s.ipfs.api) and _auth_secret_ok(s.ipfs.api_auth)),
            "ipfs.api_auth needs ipfs.api (the managed Kubo makes its own secret) and must be bearer:TOKEN, "
            "basic:USER:PASSWORD or basic:BASE64",  # never echo the secret itself
        ),
    )
    return next(((key, why) for key, ok, why in (*checks, *_sign_checks(s)) if not ok), None)


def _is_multiaddr(text: object) -> bool:
    return isinstance(text, str) and text.split("/")[1:2] in (["ip4"], ["ip6"], ["dns"], ["dns4"], ["dns6"])


SPARK_MODES = ("local", "standalone", "connect")


def spark_master_kind(master: str) -> str:
    """``local``, ``spark`` (standalone), ``yarn``, ``k8s``, or ``""`` for a master no mode takes."""
    m = master.strip()
    if m == "local" or m.startswith("local["):
        return "local"
    if m.startswith("spark://") and len(m) > len("spark://"):
        return "spark"
    if m == "yarn":
        return "yarn"
    if m.startswith("k8s://") and len(m) > len("k8s://"):
        return "k8s"
    return ""


STAGING_SCHEMES = ("file", "hdfs", "s3a")


def staging_problem(url: str) -> str:
    """Why ``url`` is not a ``spark.staging`` location (``""``: it is one, or empty: no staging)."""
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in STAGING_SCHEMES:
        return f"spark.staging must be file:///ABSOLUTE/PATH, hdfs://HOST/DIR or s3a://BUCKET/DIR, got {url!r}"
    if parts.scheme == "file" and (parts.netloc or not parts.path.startswith("/")):
        return f"spark.staging file:// needs an absolute path and no host (file:///shared/dir), got {url!r}"
    if parts.scheme != "file" and not (parts.netloc and parts.path.strip("/")):
        return f"spark.staging {parts.scheme}:// needs a host or bucket and a folder, got {url!r}"
    if parts.query or parts.fragment or any(c in url for c in "*?[]{}"):
        return f"spark.staging must have no ?query, #fragment or glob characters, got {url!r}"
    return ""


def _spark_mode_problem(sp: SparkSettings) -> tuple[str, bool, str]:
    """(key, ok, why) for ``spark.mode`` and the master or remote it needs. Never echoes ``spark.token``."""
    kind = spark_master_kind(sp.master)
    if sp.mode not in SPARK_MODES:
        return "spark.mode", False, f"spark.mode must be local, standalone or connect, got {sp.mode!r}"
    if sp.mode == "local" and kind != "local":
        return "spark.master", False, f"spark.mode local needs a local[N] spark.master, got {sp.master!r}"
    if sp.mode == "standalone" and kind not in ("spark", "yarn", "k8s"):
        return (
            "spark.master",
            False,
            f"spark.mode standalone needs spark.master spark://HOST:PORT, yarn or k8s://URL, got {sp.master!r}",
        )
    if sp.mode == "connect":
        if ";" in sp.remote:  # parameters (a token among them) would be echoed; the token has its own setting
            return "spark.remote", False, "spark.remote must be sc://HOST:PORT with no ;parameters (token: spark.token)"
        if not sp.remote.startswith("sc://") or len(sp.remote) <= len("sc://"):
            return "spark.remote", False, f"spark.mode connect needs spark.remote sc://HOST:PORT, got {sp.remote!r}"
        if sp.conf:  # the session lives on the server: its settings are the server's (checked at start)
            return "spark.conf", False, "spark.conf does not apply in spark.mode connect: set it on the Connect server"
    return "spark.mode", True, ""


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _auth_secret_ok(secret: str) -> bool:
    """Kubo's ``AuthSecret`` forms (Kubo config/api.go ConvertAuthSecret): ``bearer:…``, ``basic:…``, a bare token."""
    kind, sep, value = secret.partition(":")
    return bool(value) and kind in ("bearer", "basic") if sep else bool(secret.strip())
