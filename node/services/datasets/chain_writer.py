"""Writing a dataset's metadata chain: its key (made, kept under ``$CAIRN_HOME/keys`` and imported into Kubo for
IPNS), events signed into blocks after its head, every block stored and the new head pinned, then published."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from node.adapters import identity
from node.adapters.index import DatasetRow
from node.domain.model import CID, Block, MetadataBlock, Structure, block_of, cid_str
from node.domain.ports.block_store import BlockStore
from node.services.datasets.chain import Version
from node.services.datasets.versions import Versions
from node.support import wall_clock as clock
from node.support.errors import CairnError

log = logging.getLogger("cairn.datasets")


@dataclass(frozen=True)
class Signer:
    """The key a dataset's chain is signed with, and the block the next one follows."""

    key: Ed25519PrivateKey
    did: str
    key_name: str
    ipns: str | None
    prev: CID | None
    seq: int


def schema_blocks(
    structure: Structure, events: list[dict[str, Any]], known: dict[CID, Structure] | None = None
) -> list[Block]:
    """The structure's blocks (concrete and abstract); appends the SetDataSchema event naming them, and puts both
    structures in ``known`` by CID."""
    abstract = structure.abstract()
    st_block, abs_block = block_of(structure), block_of(abstract)
    events.append({"kind": "SetDataSchema", "structure": st_block.cid, "abstract": abs_block.cid})
    if known is not None:
        known.update({st_block.cid: structure, abs_block.cid: abstract})
    return [st_block, abs_block]


class ChainWriter:
    """Signs and stores chains in ``kubo``, the keys in ``keys_dir``; the blocks it signs are remembered by
    ``versions``, so that reading the new version decodes none of them again."""

    def __init__(self, kubo: BlockStore, versions: Versions, keys_dir: Path) -> None:
        self.kubo = kubo
        self.versions = versions
        self.keys_dir = keys_dir

    async def _new_key(self) -> tuple[Ed25519PrivateKey, str, str, str | None]:
        ident = identity.generate()
        did = ident.node_key
        key_name = "cairn-" + did.removeprefix("did:key:")
        path = self.keys_dir / f"{key_name}.pem"
        identity.save(ident, path)
        ipns = await self.kubo.key_import(key_name, path.read_bytes())
        return ident.private_key, did, key_name, ipns

    def _load_key(self, key_name: str) -> Ed25519PrivateKey:
        return identity.load(self.keys_dir / f"{key_name}.pem").private_key

    async def signer(self, row: DatasetRow | None, old: Version | None) -> Signer:
        """The dataset's key and where its chain goes on: a new key and a new chain for a new dataset."""
        if row is None or old is None:  # `old` is read from `row`: both or neither
            key, did, key_name, ipns = await self._new_key()
            return Signer(key, did, key_name, ipns, None, 0)
        return Signer(self._load_key(row.key_name), old.dataset_id, row.key_name, row.ipns, old.head, old.seq + 1)

    async def store(
        self, signer: Signer, blocks: list[Block], events: list[dict[str, Any]], shallow: list[CID] | None = None
    ) -> CID:
        """Sign `events` into metadata blocks after the signer's head, store them with `blocks`, pin the new head.
        ``shallow``: the version's slices, pinned with each block directly instead of the head recursively (a
        derivative version's AddData links the receipt that wrote it: a recursive pin would follow it into the
        producer's own datasets, which a node that took the answer from a peer need not hold)."""
        prev, seq = signer.prev, signer.seq
        chain: list[Block] = []
        for event in events:
            mb = MetadataBlock(prev, seq, clock.utc_now_iso(), event).signed(signer.key.sign)
            blk = block_of(mb)
            chain.append(blk)
            self.versions.remember([(blk.cid, mb)], {})
            prev, seq = blk.cid, seq + 1
        for blk in blocks + chain:
            await self.kubo.block_put(blk.data, codec=blk.cid.codec.name)
        head = chain[-1].cid
        if shallow is None:
            await self.kubo.pin_add(head, recursive=True)  # slices, structures and chain: all or nothing
            return head
        for cid in shallow:
            await self.kubo.pin_add(cid, recursive=True)
        for blk in blocks + chain:
            await self.kubo.pin_add(blk.cid, recursive=False)
        return head

    async def publish(self, key_name: str, head: CID) -> None:
        """Point the dataset's IPNS name at ``head``; a failure is logged, not raised."""
        try:
            await self.kubo.name_publish(head, key=key_name, allow_offline=True)
        except CairnError as e:  # the local head is authoritative; IPNS is how others follow it
            log.warning("IPNS publish failed", extra={"key": key_name, "head": cid_str(head), "error": e.message})
