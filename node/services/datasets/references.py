"""Dataset references resolved to versions: a name, a dataset id (did:key) or a block CID, optionally ``@BLOCKCID``
or ``@-N`` back in its chain, ``/changelog`` for a snapshot version's raw changelog; table names a query reads."""

from __future__ import annotations

from node.adapters.index import DatasetRow
from node.domain.model import parse_cid
from node.domain.ports.repositories import CatalogRepository
from node.services.datasets import projection as projecting
from node.services.datasets.chain import Version
from node.services.datasets.projection_cache import Projections
from node.services.datasets.versions import Versions
from node.support.errors import CairnError, InvalidInput, NotFound, did_you_mean, quote


class References:
    """References to the datasets named in ``catalog``, read as ``versions`` (and ``projections`` for snapshots)."""

    def __init__(self, catalog: CatalogRepository, versions: Versions, projections: Projections) -> None:
        self.catalog = catalog
        self.versions = versions
        self.projections = projections

    async def resolve(self, ref: str) -> tuple[DatasetRow | None, Version]:
        """A name, a dataset id (did:key) or a block CID (a frozen version) → its version; any of them followed by
        ``@BLOCKCID`` (a block of that dataset's chain) or ``@-N`` (N data versions back) → that earlier version."""
        if "@" in ref and self.catalog.dataset(ref) is None:  # a name may hold '@': the whole name comes first
            base, _, when = ref.rpartition("@")
            row, now = await self._resolve_now(base)
            return row, await self._as_of(base, now, when)
        return await self._resolve_now(ref)

    async def input(self, ref: str) -> Version:
        """What a query reads for ``ref``: its version, or for a snapshot dataset the state "as at" it (ODF
        "Projection"; node/services/datasets/projection.py); ``REF/changelog`` is the raw changelog (no name holds
        '/')."""
        if ref.endswith(projecting.CHANGELOG):
            return (await self.resolve(ref.removesuffix(projecting.CHANGELOG)))[1]
        return await self.as_input((await self.resolve(ref))[1])

    async def as_input(self, v: Version) -> Version:
        """``v`` as a query reads it by default: a changelog (snapshot dataset) as its projected state."""
        return await self.projections.projection(v) if projecting.is_changelog(v) else v

    async def _as_of(self, base: str, now: Version, when: str) -> Version:
        """``now``'s dataset as of ``when``: a block CID of its chain, or ``-N``, the version N AddData blocks back
        (each AddData block ends a version: the chain up to it; SetInfo and SetDataSchema blocks add no rows)."""
        if when.startswith("-") and when[1:].isdecimal() and when[1:].isascii():
            adds = [cid for cid, b in now.blocks if b.kind == "AddData"]  # newest first
            back = int(when[1:]) if len(when) < 20 else len(adds)  # int() refuses 4300+ digits: past the first
            if back == 0:
                return now
            if back >= len(adds):
                have = f"{len(adds)} version{'s' if len(adds) != 1 else ''}"
                raise NotFound(
                    f"{quote(base + '@' + when)} goes back before the first version of {quote(base)} ({have})"
                )
            return await self.versions.version(adds[back])
        try:
            cid = parse_cid(when)
        except CairnError:
            raise InvalidInput(
                f"{quote(base + '@' + when)}: after '@' give a block CID of the dataset's chain or -N (N versions back)"
            ) from None
        if cid not in dict(now.blocks):
            raise NotFound(
                f"block {when} is not in the chain of dataset {quote(base)}: `cairn log {quote(base)}` lists it"
            )
        return await self.versions.version(cid)

    async def _resolve_now(self, ref: str) -> tuple[DatasetRow | None, Version]:
        row = self.catalog.dataset(ref) if not ref.startswith("did:") else self.catalog.dataset_by_id(ref)
        if row is not None:
            return row, await self.versions.version(parse_cid(row.head))
        if ref.startswith("did:"):
            raise NotFound(f"no dataset with id {ref} on this node")
        try:
            cid = parse_cid(ref)
        except CairnError:
            raise NotFound(f"no dataset named {ref!r} on this node{self.suggest(ref)}") from None
        v = await self.versions.version(cid, timeout=30.0)
        return self.catalog.dataset_by_id(v.dataset_id), v

    def find_table(self, name: str) -> DatasetRow | None:
        """The dataset a query's table ``name`` names when no ``--input`` declares it. Spark's table names are
        case-insensitive: ``FROM Orders`` finds ``orders`` when no other name differs from it only in case."""
        row = self.catalog.dataset(name)
        if row is None:
            same = [r for r in self.catalog.datasets() if r.name.lower() == name.lower()]
            row = same[0] if len(same) == 1 else None
        return row

    def suggest(self, name: str) -> str:
        """`` (did you mean 'orders'?)`` when a dataset of this node has a name close to ``name``, else ``""``."""
        return did_you_mean(name, (row.name for row in self.catalog.datasets()))
