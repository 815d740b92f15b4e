"""Type checks on a node: the IO-free Algorithms 1–4 (node.domain.model.typecheck) given the node's Kubo and datasets.

* ``load``: a CID → its decoded block, from Kubo (checked against its CID; fetched from peers by bitswap when it
  is not local, within ``ipfs.timeout``).
* ``structure_of``: the Arrow structure of a dataset version or a query result. A data blob that is an ``mb_0``
  block is a version: its CID is recomputed from its bytes (DAG-CBOR is canonical) and its chain folded by
  ``Datasets.version``. An ``rc_0`` receipt names its result's structure (its signature is checked first).
* what a face may pass: ``check(ref, type)`` (REF as elsewhere: a dataset name, a dataset id or any block CID),
  ``asset(cid)`` (Algorithm 4), ``kind_of(obj)`` (what ``put`` may store).

Bad input is an error with its 4xx (not a CID, not a type, a ``type_checking`` the table lacks, a missing field);
a well-formed question whose answer is no is a result (``result`` false and the spec's ``code``), not an error.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from multiformats import CID

from node.adapters.identity import public_key_from_did
from node.domain.model import CidText, Receipt, cid_str, decode, encode, parse_cid
from node.domain.model.cid import cid_for
from node.domain.model.functions import BUILTINS, builtin_output
from node.domain.model.structure import Structure
from node.domain.model.typecheck import (
    TYPE_CHECKING,
    TypeContext,
    VerdictJson,
    is_simple_type_normal_form,
    is_term,
    is_valid_asset,
    normalize_type,
    unknown_type_checking,
)
from node.domain.model.types import Function, Type, object_kind, parse_object
from node.domain.ports.block_store import BlockStore
from node.services.datasets import Datasets
from node.support.errors import CairnError, InvalidInput, InvalidObject

Kind = Literal["Type", "Asset", "Function", "series type"]  # what POST /api/v0/types stored


class TypeChecked(VerdictJson):
    """Algorithm 3's verdict on the data ``data`` and the type ``type``."""

    type: CidText
    data: CidText


class ResultChecked(VerdictJson):
    """Algorithm 3's verdict on a query's result and the type it declared."""

    type: CidText


class AssetChecked(VerdictJson):
    """Algorithm 4's verdict on ``asset``."""

    asset: CidText


EXTERNAL_EXECUTIONS = ("WASM", "IPDR")  # Table 4's externally defined functions


class TypeChecks:
    def __init__(self, kubo: BlockStore, datasets: Datasets, timeout: float) -> None:
        self.kubo, self.datasets, self.timeout = kubo, datasets, timeout

    def context(self) -> TypeContext:
        """A fresh budget (node.domain.model.typecheck.Limits) for one algorithm call."""
        return TypeContext(load=self.load, structure_of=self.structure_of)

    async def load(self, cid: CID) -> Any:
        data = await self.kubo.block_get(cid, timeout=self.timeout)
        if cid.codec.name in ("dag-cbor", "cbor"):
            return await asyncio.to_thread(decode, data, cid.codec.code)
        return data  # a raw or UnixFS block: the blob itself

    async def structure_of(self, data: Any) -> Structure | None:
        """A dataset version's structure (its head ``mb_0`` block), or a query result's (the ``structure`` its
        ``rc_0`` receipt names, the receipt's signature checked: it is the signer's claim)."""
        kind = data.get("typedVersion") if isinstance(data, dict) else None
        try:
            if kind == "mb_0":
                version = await self.datasets.version(cid_for(encode(data), "dag-cbor"), timeout=self.timeout)
                return version.structure
            if kind == "rc_0":
                receipt = Receipt.from_ipld(data)
                receipt.verify(public_key_from_did(receipt.signer))
                return Structure.from_ipld(await self.load(receipt.structure))
        except CairnError:  # a chain or a receipt that does not check: no structure to compare
            return None
        return None

    async def check(self, ref: str, type_ref: str) -> TypeChecked:
        """Algorithm 3 on the data ``ref`` names and the normal form of the type ``type_ref`` (a CID)."""
        type_cid = parse_cid(type_ref)
        normal = await self.normal_form(type_cid)
        data_cid, data = await self._data(ref)
        verdict = await is_term(normal, data, self.context())
        return {**verdict.to_json(), "type": cid_str(type_cid), "data": cid_str(data_cid)}

    async def check_result(self, normal: Any, type_ref: str, schema: list[list[str]]) -> ResultChecked:
        """Algorithm 3 on a query result: D is its structure, with the column names the query gives them (or
        ``col_N`` when two columns share a name, which a structure cannot hold)."""
        columns = tuple((str(n), str(t)) for n, t in schema)
        if len({n for n, _ in columns}) != len(columns):
            columns = tuple((f"col_{i}", t) for i, (_, t) in enumerate(columns))
        verdict = await is_term(normal, Structure("parquet", columns).to_ipld(), self.context())
        return {**verdict.to_json(), "type": cid_str(parse_cid(type_ref))}

    async def normal_form(self, type_cid: CID) -> Any:
        """The type's normal form (Algorithm 2), or InvalidInput saying why it is not a type this node checks."""
        top = await self.load(type_cid)  # absent: Kubo's 404 (or its timeout), before any algorithm runs
        normal = await normalize_type(top, self.context())
        if not normal.success:
            raise InvalidInput(f"{cid_str(type_cid)} is not a Transform.Storage type: {self._why(top, normal.code)}")
        for simple in normal.result if isinstance(normal.result, list) else [normal.result]:
            checking = simple.get("type_checking") if isinstance(simple, dict) else None
            if isinstance(simple, dict) and checking not in TYPE_CHECKING:
                raise InvalidInput(unknown_type_checking(checking))
        return normal.result

    @staticmethod
    def _why(top: Any, code: str | None) -> str:
        """The spec's code, and for a map the field Table 1 misses (Algorithm 2 only says "T is not a type")."""
        if not isinstance(top, dict):
            return str(code)
        simple = is_simple_type_normal_form(top)
        try:
            Type.from_ipld(top)
        except InvalidObject as e:
            return f"{simple.code} ({e.message})"
        return str(simple.code or code)

    async def _data(self, ref: str) -> tuple[CID, Any]:
        """REF → (its block CID, its decoded block): a dataset's name or id is its head (a version)."""
        try:
            cid = parse_cid(ref)
        except CairnError:
            cid = (await self.datasets.resolve(ref))[1].head  # NotFound (404) for an unknown name or id
        return cid, await self.load(cid)

    async def asset(self, cid_text: str) -> AssetChecked:
        """Algorithm 4 on the asset a CID names."""
        cid = parse_cid(cid_text)
        await self.load(cid)  # absent: 404 here, rather than the spec's "Could not expand CID"
        verdict = await is_valid_asset(cid, self.context())
        return {**verdict.to_json(), "asset": cid_str(cid)}

    async def kind_of(self, obj: Any) -> Kind:
        """What a stored object is ("Type", "Asset", "Function" or "series type"), or InvalidInput/InvalidObject
        naming what is wrong: a Type's ``type_checking`` must be in the table, a Function's ``execution`` in
        Table 4, a built-in's ``out`` what its ``in`` gives, a series type's elements must normalize."""
        if isinstance(obj, list):
            normal = await normalize_type(obj, self.context())
            if not normal.success:
                raise InvalidInput(f"not a series type: {normal.code}")
            return "series type"
        parsed = parse_object(obj)
        if isinstance(parsed, Type) and parsed.type_checking not in TYPE_CHECKING:
            raise InvalidInput(unknown_type_checking(parsed.type_checking))
        if isinstance(parsed, Function):
            await self._check_function(parsed)
        return object_kind(obj)

    async def _check_function(self, f: Function) -> None:
        if f.execution not in (*BUILTINS, *EXTERNAL_EXECUTIONS):
            known = ", ".join((*BUILTINS, *EXTERNAL_EXECUTIONS))
            raise InvalidInput(f"execution {f.execution[:40]!r} is not in the execution table (Table 4: {known})")
        if f.execution in BUILTINS and f.execution != "pipeline":
            ins = await normalize_type(f.input, self.context())
            outs = await normalize_type(f.output, self.context())
            if not (ins.success and outs.success):
                raise InvalidInput(f"Function in/out is not a type: {ins.code or outs.code}")
            derived = await normalize_type(builtin_output(f.execution, ins.result, f.fn), self.context())
            if derived.result != outs.result:
                raise InvalidInput(f"built-in {f.execution!r}: out is not the type its in gives (Table 4)")
