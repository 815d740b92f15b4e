"""The DAG-JSON samples used to compare Cairn's CIDs with Kubo's are well formed."""

from __future__ import annotations

from node.domain.model import SelectorEnvelope, cid_for, decode, decode_object, dumps, encode, loads
from tests.unit.model_samples import samples


def test_enough_distinct_samples() -> None:
    pairs = samples()
    assert len(pairs) >= 45
    assert len({name for name, _ in pairs}) == len(pairs)
    assert len({str(cid_for(encode(loads(text)))) for _, text in pairs}) >= 45


def test_samples_parse_encode_and_print_back() -> None:
    for name, text in samples():
        value = loads(text)
        data = encode(value)
        assert encode(decode(data)) == data, name
        assert encode(loads(dumps(value))) == data, name


def test_every_kind_and_selector_form_is_sampled() -> None:
    kinds, selectors = set(), set()
    for _, text in samples():
        obj = decode_object(loads(text))
        if isinstance(obj, SelectorEnvelope):
            selectors.add(next(iter(obj.to_ipld()["selector"])))
        elif obj is not None:
            kinds.add(obj.typed_version)
    assert kinds == {"sde_0", "rde_0", "mbe_0", "ex_0", "dt_0", "cx_0", "pl_0", "pr_0"}
    assert selectors == {".", "i", "r", "|"}
