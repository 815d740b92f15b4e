"""Using a peer's claim (an_0) about an invocation: fetch what it names by CID and check all of it.

Nothing a peer says is taken on its word (DESIGN.md "Resolving a query"; ODF "Verifiability"):
- the announcement's and the receipt's signatures verify with the signer's did:key, and they agree on the
  invocation, execution, logical hash and row count;
- every block fetched is hash-checked (Kubo's bitswap, and our client re-hashes blocks it gets);
- the ex_0 is a successful execution whose output list the receipt's data hashes match: the logical hash
  of the fetched rows, recomputed here, equals the claim's, and so does the row count.
Any failure refuses the claim, with the reason, and leaves nothing usable in the index.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from node.datasets import Datasets, LogicalHasher, SliceRef
from node.datasets.slices import read_slice
from node.errors import CairnError
from node.identity import public_key_from_did
from node.index import ExecutionRow
from node.ipfs import KuboClient
from node.model import (
    CID, Announcement, Execution, RecursiveDataEnvelope, Receipt, Structure, cid_str, decode, decode_object,
)


class ClaimRefused(CairnError):
    status = 502


@dataclass(frozen=True)
class Verified:
    row: ExecutionRow
    receipt: Receipt


def check_announcement(data: bytes) -> Announcement:
    """An an_0 block as received: well-formed and signed by the key it names."""
    try:
        obj = decode_object(decode(data))
    except CairnError as e:
        raise ClaimRefused(f"not an announcement: {e.message}") from None
    if not isinstance(obj, Announcement):
        raise ClaimRefused("not an announcement (an_0)")
    try:
        obj.verify(public_key_from_did(obj.signer))
    except CairnError as e:
        raise ClaimRefused(f"bad signature: {e.message}") from None
    return obj


async def _object(kubo: KuboClient, cid: CID, timeout: float, kind: type) -> object:
    data = await kubo.block_get(cid, timeout=timeout)  # the client re-hashes it against the CID
    obj = decode_object(decode(data, cid.codec.code))
    if not isinstance(obj, kind):
        raise ClaimRefused(f"{cid_str(cid)} is not a {kind.__name__}")
    return obj


async def fetch_and_verify(kubo: KuboClient, datasets: Datasets, an: Announcement, invocation: CID,
                           timeout: float) -> Verified:
    if an.invocation != invocation:
        raise ClaimRefused(f"the claim is about {cid_str(an.invocation)}, not {cid_str(invocation)}")
    for addr in an.providers:  # reach the claimant's Kubo directly; bitswap does the rest
        try:
            await kubo.swarm_connect(addr, timeout=min(timeout, 10.0))
            break
        except CairnError:
            continue
    try:
        rc = await _object(kubo, an.receipt, timeout, Receipt)
        assert isinstance(rc, Receipt)
        try:
            rc.verify(public_key_from_did(rc.signer))
        except CairnError as e:
            raise ClaimRefused(f"receipt {cid_str(an.receipt)}: {e.message}") from None
        if (rc.invocation, rc.execution, rc.logical_hash, rc.rows) != (an.invocation, an.execution, an.logical_hash, an.rows):
            raise ClaimRefused(f"receipt {cid_str(an.receipt)} does not say what the announcement says")
        ex = await _object(kubo, rc.execution, timeout, Execution)
        assert isinstance(ex, Execution)
        if ex.exit_status or ex.output is None:
            raise ClaimRefused(f"execution {cid_str(rc.execution)} did not succeed")
        env = await _object(kubo, ex.output, timeout, RecursiveDataEnvelope)
        assert isinstance(env, RecursiveDataEnvelope)
        out_list = decode(await kubo.block_get(env.content, timeout=timeout))
        if not isinstance(out_list, list) or not all(isinstance(c, CID) for c in out_list) or not out_list:
            raise ClaimRefused(f"execution {cid_str(rc.execution)}: output is not a list of slices")
        structure = await _object(kubo, rc.structure, timeout, Structure)
        assert isinstance(structure, Structure)

        hasher: LogicalHasher | None = None
        # Fetch slice i+1 while slice i is decoded and hashed: the transfer and the check overlap.
        fetches = [asyncio.ensure_future(datasets.slice_path(SliceRef(out_list[0], 0, 0, "", 0), timeout=timeout))]
        try:
            for i in range(len(out_list)):
                path = await fetches[i]
                if i + 1 < len(out_list):
                    fetches.append(asyncio.ensure_future(
                        datasets.slice_path(SliceRef(out_list[i + 1], 0, 0, "", 0), timeout=timeout)))
                table = await asyncio.to_thread(read_slice, path)
                hasher = hasher or LogicalHasher(table.schema)
                await asyncio.to_thread(hasher.update, table)
        finally:
            for f in fetches:
                f.cancel()
            await asyncio.gather(*fetches, return_exceptions=True)
        assert hasher is not None
        if str(hasher.finish()) != rc.logical_hash or hasher.rows != rc.rows:
            for cid in out_list:  # what we cached is not what was claimed: do not keep it
                (datasets.cache_dir / f"{cid_str(cid)}.parquet").unlink(missing_ok=True)
            raise ClaimRefused(f"the data of execution {cid_str(rc.execution)} does not match the logical hash "
                               f"and row count its receipt claims")
    except CairnError as e:
        if isinstance(e, ClaimRefused):
            raise
        raise ClaimRefused(f"could not fetch what the claim names: {e.message}") from None

    # Keep what we use: the receipt and execution themselves, and the output slices (not the peer's inputs).
    for cid in (an.receipt, rc.execution, ex.output, rc.structure):
        await kubo.pin_add(cid, recursive=False)
    await kubo.pin_add(env.content, recursive=True)
    row = ExecutionRow(cid_str(an.invocation), "", cid_str(rc.execution), cid_str(an.receipt), rc.logical_hash,
                       rc.rows, cid_str(rc.structure), tuple(cid_str(c) for c in out_list), "peer", time.time())
    return Verified(row, rc)
