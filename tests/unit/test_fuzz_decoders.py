"""Decoder and parser fuzzing. Every input a peer or a user can send ends in a typed error of the
layer (a ``CairnError`` subclass; ``P2PError`` for the p2p layer's multiaddr parsing) or a valid result: never
another exception, never a hang (inputs are bounded), never unbounded memory (each call's Python allocations are
measured with tracemalloc and bounded).

Each property runs on generated inputs (random bytes and text, and mutations of valid ones: the model samples, signed
announcements, valid CSV/JSONL, a list of SQL statements) and, first, on the committed seed corpus under
``tests/data/fuzz/<target>/``: inputs that crashed a decoder once (fixed since) and other nasty ones. Bounded here
(``FUZZ_EXAMPLES`` examples per target, 200 by default); ``scripts/fuzz.py N`` runs the same properties longer.
"""

from __future__ import annotations

import asyncio
import functools
import io
import os
import re
import resource
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from config import PeerSettings
from node.adapters.identity import Identity, generate
from node.adapters.index import Index
from node.adapters.ipfs.addr import api_base_url
from node.domain.model import Announcement, block_of, cid_for, cid_str, decode, dumps, encode, loads, parse_cid
from node.domain.model.names import name_problem
from node.domain.model.plaincbor import decode_plain
from node.domain.sql import canonicalize
from node.services.datasets.readers import ReadOptions, open_input
from node.services.peers import Network
from node.services.resolve.claim_checks import check_announcement
from node.support.errors import CairnError, ClaimRefused, QueryRefused
from p2p.errors import P2PError
from p2p.multiaddrs import parse_listen_addr, parse_peer_addr
from tests.unit.model_samples import samples

CORPUS = Path(__file__).resolve().parents[1] / "data" / "fuzz"
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
MAX_RSS_GROWTH = 512 << 20  # bytes the process's peak RSS may grow by over one property's run
MAX_PY_ALLOC = 64 << 20  # bytes of Python memory one call on a ≤ 8 KiB input may hold at its peak


@contextmanager
def bounded_memory() -> Iterator[None]:
    """With ``FUZZ_TRACEMALLOC=1`` (scripts/fuzz.py): fail when one call's peak Python allocation exceeds
    MAX_PY_ALLOC. Tracing is started once and left on: starting and stopping it around every call once ended a run
    in a fatal interpreter error (likely a start/stop race with reader threads). Off in `make test` (it triples
    the time); there each property bounds the process's peak RSS instead (``test_fuzz_property``)."""
    if os.environ.get("FUZZ_TRACEMALLOC") != "1":
        yield
        return
    if not tracemalloc.is_tracing():
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    yield
    peak = tracemalloc.get_traced_memory()[1] - base
    assert peak < MAX_PY_ALLOC, f"{peak} bytes allocated"


def peak_rss() -> int:
    """The process's peak resident size so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- mutations of valid inputs ---------------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, seeds: st.SearchStrategy[bytes]) -> bytes:
    """A valid input with a few byte-level edits: flips, insertions, deletions, truncation, duplicated spans."""
    data = bytearray(draw(seeds))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "dup", "interesting"]))
        i = draw(st.integers(0, len(data)))
        if op == "flip" and i < len(data):
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "truncate":
            del data[i:]
        elif op == "dup":
            data[i:i] = data[i : i + draw(st.integers(1, 64))] * draw(st.integers(1, 4))
        elif op == "interesting" and i < len(data):  # CBOR heads of big lengths, breaks, tags; JSON specials
            data[i : i + 1] = draw(
                st.sampled_from([b"\xff", b"\x1b", b"\x9f", b"\xbf", b"\xd8\x2a", b'"', b"\\", b"\x00"])
            )
    return bytes(data[:8192])


def texts(seeds: list[str]) -> st.SearchStrategy[bytes]:
    """Random bytes, random text, and mutations of ``seeds``."""
    encoded = st.sampled_from([s.encode() for s in seeds])
    return st.one_of(
        st.binary(max_size=2048),
        st.text(max_size=512).map(lambda s: s.encode("utf-8", "surrogatepass")),
        mutated(encoded),
    )


_DAGJSON_SEEDS = [text for _, text in samples()]


def _cbor_seeds() -> list[bytes]:
    out = []
    for text in _DAGJSON_SEEDS:
        try:
            out.append(encode(loads(text)))
        except CairnError:
            continue  # a sample that is valid DAG-JSON text but not encodable is still a DAG-JSON seed
    return out


_CBOR_SEEDS = _cbor_seeds()


# -- the properties: each takes one input and raises AssertionError (or the unexpected exception) on a finding ----


def check_dagcbor(data: bytes) -> None:
    """Strict DAG-CBOR: an EncodingError, or a value that encodes back to the very bytes (one value, one form)."""
    try:
        value = decode(data)
    except CairnError:
        return
    assert encode(value) == data, "decoded a non-canonical DAG-CBOR block"


def check_plain_cbor(data: bytes) -> None:
    for strict in (True, False):
        try:
            decode_plain(data, strict=strict)
        except CairnError:
            continue


def check_dagjson(data: bytes) -> None:
    """DAG-JSON: InvalidDagJson, or a value whose canonical text reads back to the same value."""
    try:
        value = loads(data)
    except CairnError:
        return
    try:
        text = dumps(value)
    except CairnError:
        return  # e.g. a map using "/" in a nested position that dumps refuses: a typed error too
    assert loads(text) == value


def check_cid(data: bytes) -> None:
    """CIDs in text and binary form: InvalidCID, or a CID whose canonical text parses back to the same CID."""
    for form in (data, data.decode("utf-8", "replace")):
        try:
            c = parse_cid(form)
            text = cid_str(c)
        except CairnError:
            continue
        v1 = c if c.version == 1 else c.set(version=1)
        assert bytes(parse_cid(text)) == bytes(v1)


def check_multiaddr(data: bytes) -> None:
    """Multiaddrs: the p2p layer's P2PError (peer and listen addresses), the node's ConfigError (Kubo's address)."""
    text = data.decode("utf-8", "replace")
    for parse in (parse_peer_addr, parse_listen_addr):
        try:
            parse(text)
        except P2PError:
            pass
    try:
        api_base_url(text)
    except CairnError:
        pass


@dataclass
class _Recorder:
    """What Network asks of the resolver when a claim has passed ``check_announcement``."""

    identity: Identity
    claims: list[Announcement] = field(default_factory=list)

    def record_claim(self, peer: str, an: Announcement, data: bytes) -> bool:
        self.claims.append(an)
        return True


_NET: dict[str, Network] = {}


def _network() -> Network:
    """One real ``Network`` (real index; the resolver records) whose message handlers are fed the inputs."""
    if "net" not in _NET:
        ident = generate()
        home = Path(tempfile.mkdtemp(prefix="cairn-fuzz-"))
        index = Index(home / "index.sqlite")
        net = Network(PeerSettings(), ident, _Recorder(ident), index, None, None)  # type: ignore[arg-type]  # recorder, no Kubo
        _NET["net"] = net
    return _NET["net"]


def check_peer_message(data: bytes) -> None:
    """An announcement (gossip) is an Announcement or ClaimRefused; a catch-up and a lookup request are handled
    (bad ones logged and dropped) without raising."""
    try:
        an = check_announcement(data)
        assert isinstance(an, Announcement)
    except ClaimRefused:
        pass
    net = _network()
    assert asyncio.run(net.receiver.on_catchup("12D3KooWFuzz", data)) == b""
    assert isinstance(asyncio.run(net.own.on_lookup("12D3KooWFuzz", data)), bytes)


@functools.cache
def _announcement_seeds() -> list[bytes]:
    who = generate()
    c = cid_for(b"x")
    one = Announcement(
        c,
        c,
        c,
        "f1e20" + "00" * 32,
        1,
        {"name": "spark"},
        ("/ip4/1.2.3.4/tcp/1",),
        who.node_key,
        "2026-01-01T00:00:00Z",
    ).signed(who.sign)
    data = block_of(one).data
    return [data, encode([data, data]), encode([]), bytes(c)]


_IPLD = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.binary(max_size=40)
    | st.just(cid_for(b"x")),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def _field_swaps(draw: st.DrawFn) -> bytes:
    """A signed announcement with fields replaced by any IPLD value, added or dropped: well-formed DAG-CBOR
    that reaches the announcement's shape checks (and its signature check when the shape holds)."""
    value = decode(_announcement_seeds()[0])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from([*sorted(value), "extra"]))
        if draw(st.booleans()) and key in value:
            del value[key]
        else:
            value[key] = draw(_IPLD)
    return encode(value)


INPUTS: dict[str, list[tuple[str, str]]] = {"t": [("a", "bigint"), ("b", "string"), ("ts", "timestamp")]}
INPUTS["u"] = [("a", "bigint"), ("c", "double")]
_SQL_SEEDS = [
    "SELECT a, b FROM t WHERE a > 1 ORDER BY a",
    "SELECT b, count(*) AS n FROM t GROUP BY b HAVING count(*) > 2 ORDER BY n DESC, b",
    "SELECT t.a, u.c FROM t JOIN u ON t.a = u.a WHERE u.c BETWEEN 0.5 AND 2.0",
    "WITH x AS (SELECT a, b FROM t) SELECT * FROM x WHERE b LIKE 'a%' ORDER BY a, b LIMIT 10",
    "SELECT a, sum(c) OVER (PARTITION BY a ORDER BY c ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM u",
    "SELECT CASE WHEN a IS NULL THEN 'n' ELSE upper(b) END FROM t UNION ALL SELECT 'x' FROM u",
    "SELECT a FROM t WHERE a IN (SELECT a FROM u) AND ts < TIMESTAMP '2024-01-01 00:00:00'",
    "SELECT rand(), now(), a FROM t",
    "SELECT explode(array(1,2,3)) FROM t",
    "SELECT cast(b AS int) / 0, -a % 3, a << 2 FROM t ORDER BY 1",
]


def check_sql(data: bytes) -> None:
    """The canonicalizer: QueryRefused, or a canonical form that canonicalizes to itself."""
    sql = data.decode("utf-8", "replace")
    # Declare the inputs the text names (every declared input must be read), so that more mutants are valid.
    inputs = {k: v for k, v in INPUTS.items() if re.search(rf"\b{k}\b", sql)} or INPUTS
    try:
        q = canonicalize(sql, inputs)
    except QueryRefused:
        return
    again = canonicalize(q.statement, {name: list(columns) for name, columns in q.abstract_inputs})
    assert again.statement == q.statement


def _sql_tokens() -> st.SearchStrategy[bytes]:
    """Statements assembled from SQL tokens: keywords, names, literals, punctuation, in any order."""
    words = "SELECT FROM WHERE GROUP BY ORDER HAVING JOIN ON UNION ALL WITH AS CASE WHEN THEN ELSE END NOT NULL IN"
    words += " LIMIT OVER PARTITION ROWS * , ( ) = < > + - / . ' \" ` ; -- /* */ t u a b c 1 0.5 'x' 1e309 count sum"
    return st.lists(st.sampled_from(words.split()), max_size=40).map(lambda ws: " ".join(ws).encode())


_CSV_SEEDS = [
    'a,b,c\n1,x,2024-01-01\n2,"y,z",2024-01-02\n3,"multi\nline",\n',
    'id;name;score\n1;ann;1.5\n2;bob;\n3;"c;d";2e3\n',
    "x\ty\n1\ttrue\n2\tfalse\n",
    "\ufeffa,b\r\n1,2\r\n",
    'q,r\n"a""b",1\n"",2\n',
]
_JSONL_SEEDS = [
    '{"a": 1, "b": "x", "c": [1, 2]}\n{"a": 2, "b": null, "c": []}\n',
    '{"t": "2024-01-31T12:00:00Z", "n": 1.5}\n\n{"t": null, "n": -2}\n',
    '{"a": {"nested": true}}\n{"a": {"nested": false}}\n',
]


def _read_all(source: Any, options: ReadOptions) -> None:
    try:
        opened = open_input(source, options)
        for _ in opened.batches:
            pass
    except CairnError:
        return


def check_ingest(data: bytes) -> None:
    """CSV, TSV and JSON Lines readers, from a file and from a stream, with a tiny block size (so chunking runs):
    an InvalidInput (or another CairnError), or batches."""
    with tempfile.TemporaryDirectory(prefix="cairn-fuzz-") as tmp:
        for fmt in ("csv", "tsv", "jsonl", None):
            path = Path(tmp) / f"in.{fmt or 'bin'}"
            path.write_bytes(data)
            _read_all(path, ReadOptions(format=fmt, block_size=64))
            _read_all(io.BufferedReader(io.BytesIO(data)), ReadOptions(format=fmt))  # a stream, as stdin
        _read_all(io.BytesIO(data), ReadOptions(format="csv", encoding="utf-16"))


def check_dataset_name(data: bytes) -> None:
    """Names: refused, or printable (no control, format or separator characters) and not a did: or a path."""
    name = data.decode("utf-8", "replace")
    if name_problem(name) is None:
        assert name.isprintable(), repr(name)  # str.isprintable: no Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs but " "
        assert "/" not in name and not name.startswith("did:")


@dataclass(frozen=True)
class Target:
    check: Callable[[bytes], None]
    inputs: st.SearchStrategy[bytes]


TARGETS: dict[str, Target] = {
    "dagcbor": Target(check_dagcbor, st.one_of(st.binary(max_size=2048), mutated(st.sampled_from(_CBOR_SEEDS)))),
    "plaincbor": Target(check_plain_cbor, st.one_of(st.binary(max_size=2048), mutated(st.sampled_from(_CBOR_SEEDS)))),
    "dagjson": Target(check_dagjson, texts(_DAGJSON_SEEDS)),
    "cid": Target(check_cid, texts([cid_str(cid_for(b"x")), "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG"])),
    "multiaddr": Target(
        check_multiaddr,
        texts(["/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN", "/dns4/a.b/tcp/1"]),
    ),
    "peer": Target(
        check_peer_message,
        st.one_of(st.binary(max_size=1024), mutated(st.sampled_from(_announcement_seeds())), _field_swaps()),
    ),
    "sql": Target(check_sql, st.one_of(texts(_SQL_SEEDS), _sql_tokens())),
    "ingest": Target(check_ingest, texts(_CSV_SEEDS + _JSONL_SEEDS)),
    "names": Target(check_dataset_name, texts(["sales 2024", "données", "a-b_c.d"])),
}


def run_one(name: str, data: bytes) -> None:
    with bounded_memory():
        TARGETS[name].check(data)


def corpus(name: str) -> list[Path]:
    return sorted((CORPUS / name).glob("*")) if (CORPUS / name).is_dir() else []


def property_test(name: str, examples: int) -> Callable[[], None]:
    """The hypothesis test of target ``name`` with ``examples`` examples (the test below, and scripts/fuzz.py)."""

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        database=None,
    )
    @given(data=TARGETS[name].inputs)
    def prop(data: bytes) -> None:
        run_one(name, data)

    return prop


# Fewer examples where one example is a real parse of several readers or sqlglot (still hundreds of inputs in all).
_SCALE = {"ingest": 0.5, "sql": 1.0, "peer": 0.5}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz_property(name: str) -> None:
    before = peak_rss()
    property_test(name, max(50, int(EXAMPLES * _SCALE.get(name, 1.0))))()
    assert peak_rss() - before < MAX_RSS_GROWTH  # no input of ≤ 8 KiB may blow the process up


@pytest.mark.parametrize(
    ("name", "path"), [(n, p) for n in sorted(TARGETS) for p in corpus(n)], ids=lambda v: getattr(v, "name", v)
)
def test_fuzz_corpus(name: str, path: Path) -> None:
    run_one(name, path.read_bytes())


def test_corpus_is_there() -> None:
    """Every target has a committed seed corpus (the crashes found, and other nasty inputs)."""
    assert all(corpus(n) for n in TARGETS), [n for n in TARGETS if not corpus(n)]
