"""Using a peer's claim (an_0) about an invocation: fetch what it names by CID and check all of it.

Nothing a peer says is taken on its word (DESIGN.md "Resolving a query"; ODF "Verifiability"). A claim is
used only if every statement in it holds against what was fetched or what we built ourselves:
- the announcement is well-formed, names at most ``MAX_PROVIDERS`` providers, each a ``/…/p2p/<id>`` multiaddr;
- the announcement and the receipt are signed by one key (their signatures verify with its did:key), and they
  agree on the invocation, execution, logical hash and row count; the invocation is the one we asked (built here);
- every block fetched is hash-checked (Kubo's bitswap, and our client re-hashes blocks it gets);
- the ex_0 succeeded, runs the bytecode we expect (the ``mbe_0`` of *our* canonical statement, built here) with
  the engine handle we expect;
- the ex_0 input is one slice list per input of the invocation, and each list has the input's identity
  (DESIGN.md "iv_0"): either it is exactly our own version's slice list (same CIDs, so same bytes), or its slices,
  fetched and hashed here, give the invocation input's abstract structure, logical hash and row count;
- every output slice reads as Parquet whose structure is the receipt's ``st_0``, and the logical hash and row
  count of all output rows, recomputed here, equal the claim's.
A claim of a recorded failure (its ``an_0`` and ``rc_0`` name ``failure``: docs/queries.md) is checked the same
way up to the execution: it failed (exitStatus true, no output), ran the bytecode asked over the inputs asked, and
its error class is one this node records itself (node/services/resolve/failures.py); it claims no rows.
Any failure refuses the claim with a reason naming the CID at fault, and leaves nothing usable in the index.
What no check here can show is that the rows are the right answer: only recomputing does (trust mode
``verify``); a label says which of the two an answer had (docs/peers.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from node.adapters.identity import public_key_from_did
from node.adapters.index import ExecutionRow
from node.domain.model import (
    CID,
    Announcement,
    Block,
    Execution,
    Failure,
    Invocation,
    ModuleBytecodeEnvelope,
    Receipt,
    RecursiveDataEnvelope,
    Structure,
    block_of,
    cid_str,
    decode,
    decode_object,
)
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets, LogicalHasher, canonical_type
from node.services.resolve.failures import recorded
from node.support import wall_clock as clock
from node.support.errors import CairnError, ClaimRefused, InvalidInput

MAX_PROVIDERS = 8  # an announcement naming more is refused: each one may cost a connect attempt
MAX_ADDR_LEN = 256
UNREACHABLE = "could not fetch what the claim names"  # a refusal that says nothing against the peer that sent it
CONNECT_TIMEOUT = 3.0  # one swarm connect; the whole network stage has its own deadline (peers.resolve_timeout)


@dataclass(frozen=True)
class Verified:
    row: ExecutionRow
    receipt: Receipt
    pins: tuple[tuple[CID, bool], ...] = ()  # (cid, recursive): what keeping this answer takes
    carried: tuple[tuple[CID, bytes], ...] = ()  # the carried blocks the checks used: to store before answering


@dataclass(frozen=True)
class Asked:
    """What we asked, built here from our own inputs: what a claim is checked against."""

    invocation: Invocation
    cid: CID  # of the iv_0
    bytecode: CID  # mbe_0 of our canonical statement
    handle: str  # the engine entry point an ex_0 must name
    inputs: tuple[tuple[CID, ...], ...]  # our versions' slice CIDs, in the invocation's input order


def bytecode_of(statement: str) -> tuple[Block, Block]:
    """The canonical SQL as Holium ModuleBytecode_v0 (a cbor leaf of its bytes) and its mbe_0 envelope."""
    leaf = block_of(statement.encode(), "cbor")
    return leaf, block_of(ModuleBytecodeEnvelope(leaf.cid))


def asked(iv_block: Block, statement: str, handle: str, inputs: list[tuple[CID, ...]]) -> Asked:
    iv = decode_object(decode(iv_block.data))
    assert isinstance(iv, Invocation)
    return Asked(iv, iv_block.cid, bytecode_of(statement)[1].cid, handle, tuple(inputs))


def _same(a: CID, b: CID) -> bool:
    return bytes(a) == bytes(b)


def _provider_ok(addr: object) -> bool:
    return isinstance(addr, str) and addr.startswith("/") and "/p2p/" in addr and len(addr) <= MAX_ADDR_LEN


# Announcements that passed check_announcement, by their exact bytes: the check is a function of the bytes alone,
# and a peer hit made it three times over the same ones (on gossip arrival, in the lookup answer, in the
# resolver), ~1 ms each. Refusals are not remembered: each is checked, logged and counted anew.
_CHECKED: dict[bytes, Announcement] = {}
CHECKED_MAX = 1024  # entries (each an an_0 of under 1 kB); the oldest half is dropped when full


def check_announcement(data: bytes) -> Announcement:
    """An an_0 block as received: well-formed, with a bounded list of provider multiaddrs, signed by the key
    it names."""
    data = bytes(data)
    hit = _CHECKED.get(data)
    if hit is not None:
        return hit
    an = _check_announcement(data)
    if len(_CHECKED) >= CHECKED_MAX:
        for old in list(_CHECKED)[: CHECKED_MAX // 2]:  # insertion order: the oldest first
            del _CHECKED[old]
    _CHECKED[data] = an
    return an


def _check_announcement(data: bytes) -> Announcement:
    try:
        obj = decode_object(decode(data))
    except CairnError as e:
        raise ClaimRefused(f"not an announcement: {e.message}") from None
    if not isinstance(obj, Announcement):
        raise ClaimRefused("not an announcement (an_0)")
    if len(obj.providers) > MAX_PROVIDERS:
        raise ClaimRefused(f"announcement names {len(obj.providers)} providers (at most {MAX_PROVIDERS})")
    if not all(_provider_ok(a) for a in obj.providers):
        raise ClaimRefused("announcement has a provider that is not a /…/p2p/<peer id> multiaddr")
    if obj.failure is not None and (obj.rows, obj.logical_hash) != (0, ""):
        raise ClaimRefused("announcement of a failure claims rows")
    try:
        obj.verify(public_key_from_did(obj.signer))
    except CairnError as e:
        raise ClaimRefused(f"bad signature: {e.message}") from None
    return obj


class Blocks:
    """Where a claim's blocks are read: first those its lookup answer carried (each hashed against its CID on
    arrival, node/services/peers/claim_intake.py), else our Kubo (bitswap; the client re-hashes what it gets), once the
    claim's
    providers were tried (``reach``: at the first block not carried). Which carried blocks a check used is
    remembered: they are put into our Kubo with the answer (``used_blocks``)."""

    def __init__(
        self, kubo: BlockStore, carried: Mapping[bytes, bytes] | None = None, providers: tuple[str, ...] = ()
    ) -> None:
        self.kubo = kubo
        self.carried = carried or {}
        self.providers = providers
        self.used: dict[bytes, CID] = {}
        self._reached = False

    async def reach(self) -> None:
        """Connect to the providers before the first fetch (not at all when everything needed was carried)."""
        if not self._reached:
            self._reached = True
            await connect_providers(self.kubo, self.providers)

    def local(self, cid: CID) -> bytes | None:
        data = self.carried.get(bytes(cid))
        if data is not None:
            self.used[bytes(cid)] = cid
        return data

    async def get(self, cid: CID, timeout: float) -> bytes:
        data = self.local(cid)
        if data is not None:
            return data
        await self.reach()
        return await self.kubo.block_get(cid, timeout=timeout)

    def used_blocks(self) -> tuple[tuple[CID, bytes], ...]:
        return tuple((c, self.carried[k]) for k, c in self.used.items())


async def _object(src: Blocks, cid: CID, timeout: float, kind: type) -> object:
    data = await src.get(cid, timeout)
    obj = decode_object(decode(data, cid.codec.code))
    if not isinstance(obj, kind):
        raise ClaimRefused(f"{cid_str(cid)} is not a {kind.__name__}")
    return obj


async def _links(src: Blocks, cid: CID, timeout: float, what: str) -> list[CID]:
    items = decode(await src.get(cid, timeout), cid.codec.code)
    if not isinstance(items, list) or not all(isinstance(c, CID) for c in items):
        raise ClaimRefused(f"{what} {cid_str(cid)} is not a list of links")
    return items


def provider_ok(addr: object) -> bool:
    """A provider address as peers may send it: a ``/…/p2p/<peer id>`` multiaddr of bounded length."""
    return _provider_ok(addr)


async def connect_providers(kubo: BlockStore, providers: tuple[str, ...] | list[str]) -> bool:
    """Reach a peer's Kubo before asking ours for blocks (bitswap does the rest): all providers at once, the
    first that answers wins. False when none could be reached."""
    tasks = [asyncio.ensure_future(kubo.swarm_connect(a, timeout=CONNECT_TIMEOUT)) for a in providers]
    try:
        for done in asyncio.as_completed(tasks):
            try:
                await done
                return True
            except CairnError:
                continue
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return False


def structure_of(schema: pa.Schema) -> Structure:
    """The st_0 of Parquet data, built exactly as the resolver builds a result's."""
    return Structure("parquet", tuple((f.name, canonical_type(f.type)) for f in schema))


async def _hash_slices(
    datasets: Datasets,
    cids: list[CID],
    timeout: float,
    what: str,
    progress: Callable[[], None] | None = None,
    src: Blocks | None = None,
) -> tuple[Structure, LogicalHasher]:
    """Fetch, read and hash slices in order: each is decoded and hashed while its bytes arrive, and counts only
    once they gave its CID (Datasets.scan_slices). Every slice must have the first one's structure. A slice the
    lookup answer carried is cached from there."""
    for cid in cids:
        data = src.local(cid) if src is not None else None
        if data is not None:
            await datasets.cache_slice(cid, data)
        elif src is not None and not datasets.cached(cid):
            await src.reach()
    hasher: LogicalHasher | None = None
    structure: Structure | None = None

    def visit(i: int, schema: pa.Schema, rows: Iterable[pa.RecordBatch | pa.Table]) -> None:
        nonlocal hasher, structure
        got = structure_of(schema)
        if structure is not None and got != structure:
            raise ClaimRefused(f"{what}: slice {cid_str(cids[i])} has structure {got.schema}, not {structure.schema}")
        structure, hasher = got, hasher or LogicalHasher(schema)
        for batch in rows:
            hasher.update(batch)

    try:
        await datasets.scan_slices(cids, visit, timeout=timeout, done=(lambda _: progress()) if progress else None)
    except InvalidInput as e:  # names the slice that does not read
        raise ClaimRefused(f"{what}: {e.message}") from None
    if structure is None or hasher is None:  # no slice at all: nothing to give the data's identity
        raise ClaimRefused(f"{what}: names no slices")
    return structure, hasher


def _check_bytecode(ex: Execution, ex_cid: CID, want: Asked) -> None:
    if not _same(ex.bytecode, want.bytecode):
        raise ClaimRefused(
            f"execution {cid_str(ex_cid)} runs bytecode {cid_str(ex.bytecode)}, not "
            f"{cid_str(want.bytecode)}: the canonical statement of the query asked"
        )
    if ex.handle != want.handle:
        raise ClaimRefused(f"execution {cid_str(ex_cid)} runs handle {ex.handle!r}, not {want.handle!r}")


async def _check_inputs(
    src: Blocks, datasets: Datasets, ex: Execution, ex_cid: CID, want: Asked, timeout: float
) -> None:
    """The ex_0 read data with the identities the invocation names, input by input."""
    env = await _object(src, ex.input, timeout, RecursiveDataEnvelope)
    assert isinstance(env, RecursiveDataEnvelope)
    lists = await _links(src, env.content, timeout, f"execution {cid_str(ex_cid)}: input")
    if len(lists) != len(want.invocation.inputs):
        raise ClaimRefused(
            f"execution {cid_str(ex_cid)} read {len(lists)} inputs, the invocation names {len(want.invocation.inputs)}"
        )
    for i, (lst, ident, ours) in enumerate(zip(lists, want.invocation.inputs, want.inputs)):
        slices = await _links(src, lst, timeout, f"execution {cid_str(ex_cid)}: input {i}")
        if len(slices) == len(ours) and all(_same(a, b) for a, b in zip(slices, ours)):
            continue  # our own version's slices: same bytes, same identity
        what = f"execution {cid_str(ex_cid)}: input {i}"
        if not slices:
            raise ClaimRefused(f"{what} lists no slices")
        structure, hasher = await _hash_slices(datasets, slices, timeout, what, src=src)
        got = (block_of(structure.abstract()).cid, str(hasher.finish()), hasher.rows)
        if not _same(got[0], ident.structure) or got[1:] != (ident.logical_hash, ident.rows):
            raise ClaimRefused(
                f"{what} (slices {cid_str(lst)}) is not the data the invocation names: "
                f"structure, logical hash or row count differ"
            )


async def fetch_and_verify(
    kubo: BlockStore,
    datasets: Datasets,
    an: Announcement,
    want: Asked,
    timeout: float,
    progress: Callable[[], None] | None = None,
    carried: Mapping[bytes, bytes] | None = None,
) -> Verified:
    """Check everything the claim states (module docstring); ``progress`` is called after each output slice.
    ``carried``: blocks the lookup answer brought, hash-checked (read before asking Kubo; every check is the
    same). The carried blocks used (``Verified.carried``), for the caller to put into our Kubo before it
    answers, and the pins that keep what is used (``Verified.pins``), for it to queue durably and pin after."""
    if not _same(an.invocation, want.cid):
        raise ClaimRefused(f"the claim is about {cid_str(an.invocation)}, not {cid_str(want.cid)}")
    # Unreachable providers are not refused here: the claim is given up at peers.resolve_timeout and stays
    # pending (docs/peers.md "Scores and deadline"), since an unreachable peer says nothing of its claim.
    # With every block needed carried, nothing is fetched and no provider is connected to.
    src = Blocks(kubo, carried, tuple(an.providers))
    try:
        rc = await _verified_receipt(src, an, timeout)
        if rc.failure is not None:
            return await _verified_failure(src, datasets, an, rc, rc.failure, want, timeout)
        output = await _verified_execution(src, datasets, rc, want, timeout)
        env = await _object(src, output, timeout, RecursiveDataEnvelope)
        assert isinstance(env, RecursiveDataEnvelope)
        out_list = await _verified_output(src, datasets, env, rc, timeout, progress)
    except CairnError as e:
        if isinstance(e, ClaimRefused):
            raise
        raise ClaimRefused(f"{UNREACHABLE}: {e.message}") from None

    # Keep what we use: the receipt and execution themselves, and the output slices (not the peer's inputs).
    pins = tuple((cid, False) for cid in (an.receipt, rc.execution, output, rc.structure)) + ((env.content, True),)
    row = ExecutionRow(
        cid_str(an.invocation),
        "",
        cid_str(rc.execution),
        cid_str(an.receipt),
        rc.logical_hash,
        rc.rows,
        cid_str(rc.structure),
        tuple(cid_str(c) for c in out_list),
        "peer",
        clock.now(),
        trust="unverified",
        profile=cid_str(rc.profile) if rc.profile else None,
    )
    return Verified(row, rc, pins, src.used_blocks())


async def _verified_receipt(src: Blocks, an: Announcement, timeout: float) -> Receipt:
    """The announced receipt, signed by the announcement's signer and saying what the announcement says."""
    rc = await _object(src, an.receipt, timeout, Receipt)
    assert isinstance(rc, Receipt)
    try:
        rc.verify(public_key_from_did(rc.signer))
    except CairnError as e:
        raise ClaimRefused(f"receipt {cid_str(an.receipt)}: {e.message}") from None
    if (rc.invocation, rc.execution, rc.logical_hash, rc.rows) != (
        an.invocation,
        an.execution,
        an.logical_hash,
        an.rows,
    ):
        raise ClaimRefused(f"receipt {cid_str(an.receipt)} does not say what the announcement says")
    if (rc.failure.error_class if rc.failure else None) != an.failure:
        raise ClaimRefused(f"receipt {cid_str(an.receipt)} and its announcement disagree on a failure")
    if rc.signer != an.signer:  # trust in a signer is trust in what it computed, not in what it relays
        raise ClaimRefused(f"receipt {cid_str(an.receipt)} is signed by {rc.signer}, the announcement by {an.signer}")
    return rc


async def _verified_failure(
    src: Blocks, datasets: Datasets, an: Announcement, rc: Receipt, failure: Failure, want: Asked, timeout: float
) -> Verified:
    """A recorded failure (``rc.failure``): the execution failed, ran the asked bytecode over the asked inputs, and
    its class is one this node would record (a peer cannot make us cache a timeout or an unknown class as a fact)."""
    if not recorded(failure.error_class):
        raise ClaimRefused(f"receipt {cid_str(an.receipt)}: {failure.error_class!r} is not a deterministic failure")
    ex = await _object(src, rc.execution, timeout, Execution)
    assert isinstance(ex, Execution)
    if not ex.exit_status or ex.output is not None:
        raise ClaimRefused(f"execution {cid_str(rc.execution)} did not fail, its receipt says it did")
    _check_bytecode(ex, rc.execution, want)
    await _check_inputs(src, datasets, ex, rc.execution, want, timeout)
    row = ExecutionRow(
        cid_str(an.invocation),
        "",
        cid_str(rc.execution),
        cid_str(an.receipt),
        "",
        0,
        cid_str(rc.structure),
        (),
        "peer",
        clock.now(),
        trust="unverified",
        profile=cid_str(rc.profile) if rc.profile else None,
        failure=failure,
    )
    pins = tuple((cid, False) for cid in (an.receipt, rc.execution, rc.structure))
    return Verified(row, rc, pins, src.used_blocks())


async def _verified_execution(src: Blocks, datasets: Datasets, rc: Receipt, want: Asked, timeout: float) -> CID:
    """The output of the receipt's execution, once that succeeded, ran the asked bytecode, over the asked inputs."""
    ex = await _object(src, rc.execution, timeout, Execution)
    assert isinstance(ex, Execution)
    if ex.exit_status or ex.output is None:
        raise ClaimRefused(f"execution {cid_str(rc.execution)} did not succeed")
    output = ex.output
    _check_bytecode(ex, rc.execution, want)
    await _check_inputs(src, datasets, ex, rc.execution, want, timeout)
    return output


async def _verified_output(
    src: Blocks,
    datasets: Datasets,
    env: RecursiveDataEnvelope,
    rc: Receipt,
    timeout: float,
    progress: Callable[[], None] | None,
) -> list[CID]:
    """The output's slices, fetched and hashed: their structure, logical hash and row count are the receipt's."""
    out_list = await _links(src, env.content, timeout, f"execution {cid_str(rc.execution)}: output")
    if not out_list:
        raise ClaimRefused(f"execution {cid_str(rc.execution)}: output is not a list of slices")
    claimed = await _object(src, rc.structure, timeout, Structure)
    structure, hasher = await _hash_slices(
        datasets, out_list, timeout, f"execution {cid_str(rc.execution)}: output", progress, src
    )
    if structure != claimed:
        raise ClaimRefused(
            f"execution {cid_str(rc.execution)}: its output's structure is {structure.schema}, "
            f"not the {cid_str(rc.structure)} its receipt claims"
        )
    if str(hasher.finish()) != rc.logical_hash or hasher.rows != rc.rows:
        raise ClaimRefused(
            f"the data of execution {cid_str(rc.execution)} does not match the logical hash "
            f"and row count its receipt claims"
        )
    return out_list
