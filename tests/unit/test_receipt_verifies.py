"""rc_0 ``verifies`` (docs/object-model.md): optional, a link, absent from every receipt that
does not verify another, so their bytes (and CIDs) are those they had before the key existed."""

from __future__ import annotations

import pytest

from node.adapters.identity import generate, public_key_from_did
from node.domain.model import Receipt, block_of, decode, decode_object
from node.support.errors import InvalidObject

LINK = block_of({"a": 1}).cid
CHECKED = block_of({"rc": "checked"}).cid


def _receipt(verifies: object = None) -> Receipt:
    return Receipt(
        LINK, LINK, "did:key:z6Mk", "2026-01-01T00:00:00Z", {"name": "spark"}, "ab", 1, LINK, (), {}, b"", LINK,
        verifies,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_verification_receipt_links_what_it_verifies_and_others_keep_their_bytes() -> None:
    new = _receipt(CHECKED)
    assert CHECKED in new.links() and decode_object(decode(block_of(new).data)).verifies == CHECKED
    old = _receipt()
    assert "verifies" not in old.to_ipld()["content"]
    assert decode_object(decode(block_of(old).data)).verifies is None
    assert block_of(new).cid != block_of(old).cid
    with pytest.raises(InvalidObject, match="verifies"):
        decode_object({**new.to_ipld(), "content": {**new.to_ipld()["content"], "verifies": "not a link"}})


def test_the_signature_covers_verifies() -> None:
    key = generate()
    signed = Receipt(**{**_receipt(CHECKED).__dict__, "signer": key.node_key}).signed(key.sign)
    signed.verify(public_key_from_did(key.node_key))
    moved = Receipt(**{**signed.__dict__, "verifies": LINK})
    with pytest.raises(InvalidObject, match="signature"):
        moved.verify(public_key_from_did(key.node_key))


def test_a_derived_receipt_names_its_superset_and_rule_and_others_keep_their_bytes() -> None:
    """rc_0 ``derived``: written only for an answer computed from a cached superset's result."""
    new = Receipt(**{**_receipt().__dict__, "derived_from": CHECKED, "rewrite": "rollup"})
    content = new.to_ipld()["content"]
    assert content["derived"] == {"execution": CHECKED, "rule": "rollup"} and CHECKED in new.links()
    back = decode_object(decode(block_of(new).data))
    assert (back.derived_from, back.rewrite) == (CHECKED, "rollup")
    assert "derived" not in _receipt().to_ipld()["content"] and block_of(new).cid != block_of(_receipt()).cid
    with pytest.raises(InvalidObject, match="derived"):
        decode_object({**new.to_ipld(), "content": {**content, "derived": {"execution": CHECKED}}})
