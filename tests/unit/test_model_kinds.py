"""Holium kinds and selectors: round trips, field-naming errors, the kind registry."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from node.domain.model import (
    KINDS,
    Connection,
    DryTransformation,
    Execution,
    ExploreIndex,
    ExploreRange,
    ExploreUnion,
    Kind,
    Matcher,
    ModuleBytecodeEnvelope,
    Pipeline,
    PipelineEdge,
    PipelineRun,
    RecursiveDataEnvelope,
    RunStep,
    ScalarDataEnvelope,
    SelectorEnvelope,
    block_of,
    cid_for,
    decode,
    decode_object,
    dumps,
    encode,
    loads,
    register_kind,
    selector_from_ipld,
    validate,
)
from node.domain.model._shape import Ctx, want_int, want_map
from node.support.errors import EncodingError, InvalidObject, UnknownKind

A, B, C, D = (cid_for(bytes([i])) for i in range(4))
DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
RUN_STEPS = (RunStep("s", 1, "peer", A, B, C, D), RunStep("t", 2, "failed", error="why"))

OBJECTS: list[Any] = [
    ScalarDataEnvelope(A),
    RecursiveDataEnvelope(B),
    ModuleBytecodeEnvelope(cid_for(b"\x00asm", "raw")),
    Execution(A, "main", B, False, C),
    Execution(A, "main", B, True, None),
    Execution(A, "", B, True, C),
    DryTransformation(A, "handle"),
    Connection(C, D),
    Pipeline(vertices=(), edges=()),
    Pipeline(vertices=[{"dt": A}, {"dt": B, "rde": C}, {}], edges=[PipelineEdge(0, 1, D), (1, 2, D), [0, 2, D]]),
    PipelineRun("p", A, None, "ok", (), DID, "2026-11-25T20:00:00Z", b"s"),
    PipelineRun("p", A, B, "failed", RUN_STEPS, DID, "2026-11-25T20:00:00Z", b"s"),
    SelectorEnvelope(Matcher()),
    SelectorEnvelope(Matcher("label")),
    SelectorEnvelope(ExploreIndex(0, Matcher())),
    SelectorEnvelope(ExploreRange(1, 4, ExploreIndex(2, Matcher()))),
    SelectorEnvelope(ExploreUnion([Matcher("x"), ExploreRange(0, 0, Matcher())])),
]


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: getattr(o, "typed_version", "selector"))
def test_round_trip(obj: Any) -> None:
    ipld = obj.to_ipld()
    assert type(obj).from_ipld(ipld) == obj
    decoded = decode(encode(ipld))
    assert decode_object(decoded) == obj
    assert decode_object(loads(dumps(obj))) == obj
    assert obj.block() == block_of(ipld)
    validate(decoded)


def test_envelope_form_and_registry() -> None:
    ex = Execution(A, "main", B, False, C)
    assert ex.to_ipld() == {"typedVersion": "ex_0", "content": [A, "main", B, False, C]}
    assert ScalarDataEnvelope(A).to_ipld() == {"typedVersion": "sde_0", "content": A}
    assert {"sde_0", "rde_0", "mbe_0", "ex_0", "dt_0", "cx_0", "pl_0"} <= set(KINDS)
    for tv, cls in KINDS.items():
        assert cls.typed_version == tv


def test_links() -> None:
    assert Execution(A, "main", B, False, C).links() == [A, B, C]
    assert Execution(A, "main", B, True, None).links() == [A, B]
    assert Pipeline(vertices=[{"dt": A, "rde": B}], edges=[(0, 0, C)]).links() == [A, B, C]
    assert SelectorEnvelope(Matcher()).links() == []


def test_selector_forms() -> None:
    assert SelectorEnvelope(Matcher()).to_ipld() == {"selector": {".": {}}}
    assert Matcher("l").to_ipld() == {".": {"label": "l"}}
    assert ExploreIndex(2, Matcher()).to_ipld() == {"i": {"i": 2, ">": {".": {}}}}
    assert ExploreRange(0, 3, Matcher()).to_ipld() == {"r": {"^": 0, "$": 3, ">": {".": {}}}}
    assert ExploreUnion((Matcher(),)).to_ipld() == {"|": [{".": {}}]}
    assert selector_from_ipld({"|": [{".": {}}, {"i": {"i": 1, ">": {".": {}}}}]}) == ExploreUnion(
        (Matcher(), ExploreIndex(1, Matcher()))
    )


def _env(tv: str, content: Any) -> dict[str, Any]:
    return {"typedVersion": tv, "content": content}


def _run_step() -> dict[str, Any]:
    return RUN_STEPS[0].to_ipld()


def _run() -> dict[str, Any]:
    return dict(PipelineRun("p", A, None, "ok", RUN_STEPS, DID, "t", b"s").to_ipld()["content"])


def test_a_pipeline_run_is_signed_over_its_content_without_sig() -> None:
    from node.adapters.identity import generate

    key = generate()
    run = PipelineRun("p", A, None, "ok", RUN_STEPS, key.node_key, "t").signed(key.sign)
    run.verify(key.private_key.public_key())
    assert PipelineRun.from_ipld(run.to_ipld()) == run and "sig" not in decode(run.signing_bytes())["content"]
    with pytest.raises(InvalidObject, match="pr_0 by did:key"):
        dataclasses.replace(run, status="failed").verify(key.private_key.public_key())


BAD_SHAPES = [
    (_env("ex_0", [A, "main", B, 0, C]), "ex_0: content[3] (exitStatus): expected bool, got int"),
    (_env("ex_0", [A, "main", B, False, None]), "ex_0: content[4] (output): a successful execution"),
    (_env("ex_0", ["x", "main", B, False, C]), "ex_0: content[0] (bytecode): expected link, got string"),
    (_env("ex_0", [A, 7, B, False, C]), "ex_0: content[1] (handle): expected string, got int"),
    (_env("ex_0", [A, "main", None, False, C]), "ex_0: content[2] (input): expected link, got null"),
    (_env("ex_0", [A, "main", B, True, "out"]), "ex_0: content[4] (output): expected link, got string"),
    (_env("ex_0", [A, "main", B, False]), "ex_0: content: expected a list of 5 elements, got 4"),
    (_env("ex_0", {"bytecode": A}), "ex_0: content: expected list of 5, got map"),
    ({"typedVersion": "ex_0"}, 'ex_0: missing key "content"'),
    ({**_env("sde_0", A), "extra": 1}, 'sde_0: unexpected key "extra"'),
    (_env("sde_0", b"\x00"), "sde_0: content: expected link, got bytes"),
    (_env("rde_0", [A]), "rde_0: content: expected link, got list"),
    (_env("mbe_0", None), "mbe_0: content: expected link, got null"),
    (_env("dt_0", [A]), "dt_0: content: expected a list of 2 elements, got 1"),
    (_env("dt_0", [A, b"h"]), "dt_0: content[1] (handle): expected string, got bytes"),
    (_env("cx_0", [A, 1.5]), "cx_0: content[1] (headSelector): expected link, got float"),
    (_env("cx_0", [{}, B]), "cx_0: content[0] (tailSelector): expected link, got map"),
    (_env("pl_0", [[], [], []]), "pl_0: content: expected a list of 2 elements, got 3"),
    (_env("pl_0", [{}, []]), "pl_0: content[0] (vertices): expected list, got map"),
    (_env("pl_0", [[{"dt": "x"}], []]), "pl_0: content[0][0].dt: expected link, got string"),
    (_env("pl_0", [[[A]], []]), "pl_0: content[0][0]: expected map, got list"),
    (_env("pl_0", [[{}], [[0, 1, A]]]), "pl_0: content[1][0][1] (headIndex): vertex 1 does not exist"),
    (_env("pl_0", [[{}], [[-1, 0, A]]]), "pl_0: content[1][0][0] (tailIndex): must be ≥ 0, got -1"),
    (_env("pl_0", [[{}], [[True, 0, A]]]), "pl_0: content[1][0][0] (tailIndex): expected int, got bool"),
    (_env("pl_0", [[{}], [[0, 0]]]), "pl_0: content[1][0]: expected a list of 3 elements, got 2"),
    (_env("pl_0", [[{}], [[0, 0, "cx"]]]), "pl_0: content[1][0][2] (connection): expected link, got string"),
    (_env("pr_0", {**_run(), "status": "done"}), "pr_0: content.status: expected one of ok, failed"),
    (_env("pr_0", {**_run(), "sig": "s"}), "pr_0: content.sig: expected bytes, got string"),
    (_env("pr_0", {**_run(), "previous": "x"}), "pr_0: content.previous: expected link, got string"),
    (_env("pr_0", {**_run(), "steps": [{**_run_step(), "source": "cached"}]}), "pr_0: content.steps[0].source"),
    (_env("pr_0", {**_run(), "steps": [{**_run_step(), "vertex": -1}]}), "pr_0: content.steps[0].vertex: must be"),
    (_env("pr_0", {**_run(), "steps": [{"name": "s"}]}), "pr_0: content.steps[0]: missing key"),
    ({"selector": {}}, "selector: selector: empty map"),
    ({"selector": {".": {}, "i": {}}}, "selector: selector: expected exactly one of the keys"),
    ({"selector": {"x": {}}}, 'selector: selector: unexpected key "x"'),
    ({"selector": {".": {"label": 3}}}, 'selector: selector["."].label: expected string, got int'),
    ({"selector": {".": {"onlyIf": {}}}}, 'selector: selector["."]: unexpected key "onlyIf"'),
    ({"selector": {"i": {"i": -1, ">": {".": {}}}}}, "selector: selector.i.i (index): must be ≥ 0, got -1"),
    ({"selector": {"i": {"i": 0}}}, 'selector: selector.i: missing key ">"'),
    ({"selector": {"i": {"i": 0, ">": []}}}, 'selector: selector.i[">"] (next): expected map, got list'),
    (
        {"selector": {"r": {"^": 0, "$": "9", ">": {".": {}}}}},
        'selector: selector.r["$"] (end): expected int, got string',
    ),
    (
        {"selector": {"r": {"^": 5, "$": 2, ">": {".": {}}}}},
        "selector: selector.r: range start 5 is greater than its end 2",
    ),
    ({"selector": {"|": []}}, 'selector: selector["|"]: a union needs at least one selector'),
    ({"selector": {"|": [{".": {}}, 5]}}, 'selector: selector["|"][1]: expected map, got int'),
    ({"selector": {"|": {".": {}}}}, 'selector: selector["|"]: expected list, got map'),
]


@pytest.mark.parametrize(
    "obj, message", BAD_SHAPES, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD_SHAPES)]
)
def test_wrong_shapes_name_the_field(obj: Any, message: str) -> None:
    with pytest.raises(InvalidObject) as info:
        decode_object(obj)
    msg = str(info.value)
    assert msg.startswith(message), msg
    assert "\n" not in msg and info.value.status == 400
    with pytest.raises(InvalidObject):
        validate(obj)


def test_from_ipld_checks_the_discriminant() -> None:
    with pytest.raises(InvalidObject, match='sde_0: typedVersion: expected "sde_0", got "rde_0"'):
        ScalarDataEnvelope.from_ipld(_env("rde_0", A))
    with pytest.raises(InvalidObject, match="ex_0: expected map, got list"):
        Execution.from_ipld([A])


def test_objects_built_in_code_are_validated() -> None:
    with pytest.raises(InvalidObject, match=r"ex_0: content\[4\] \(output\)"):
        Execution(A, "main", B, False, None)
    with pytest.raises(InvalidObject, match=r"ex_0: content\[3\] \(exitStatus\): expected bool, got int"):
        Execution(A, "main", B, 1, C)  # type: ignore[arg-type]
    with pytest.raises(InvalidObject, match=r"pl_0: content\[1\]\[0\]\[1\] \(headIndex\)"):
        Pipeline(vertices=[{}], edges=[(0, 3, A)])
    with pytest.raises(InvalidObject, match="range start 3 is greater than its end 1"):
        ExploreRange(3, 1, Matcher())
    with pytest.raises(InvalidObject, match="expected map, got string"):
        ExploreIndex(0, "next")  # type: ignore[arg-type]
    with pytest.raises(InvalidObject, match="must be ≥ 0"):
        SelectorEnvelope(ExploreIndex(-1, Matcher()))


def test_pipeline_normalises_edges_and_vertices() -> None:
    p = Pipeline(vertices=[{"dt": A}], edges=[[0, 0, B]])
    assert p.edges == (PipelineEdge(0, 0, B),) and p.vertices == ({"dt": A},)


def test_unknown_kind_lists_known_kinds() -> None:
    with pytest.raises(UnknownKind) as info:
        decode_object(_env("zz_0", A))
    msg = str(info.value)
    assert msg.startswith('unknown kind "zz_0": known kinds are ')
    assert "ex_0" in msg and "pl_0" in msg and isinstance(info.value, InvalidObject)


def test_typed_version_must_be_a_string() -> None:
    with pytest.raises(InvalidObject, match="typedVersion: expected string, got int") as info:
        decode_object({"typedVersion": 0, "content": A})
    assert not isinstance(info.value, UnknownKind)


@pytest.mark.parametrize("value", [None, 1, "x", [A], {"a": 1}, {"content": A}, {"selector": 1, "x": 2}])
def test_plain_data_is_not_an_object(value: Any) -> None:
    assert decode_object(value) is None
    validate(value)


def test_validate_checks_ipld_too() -> None:
    with pytest.raises(EncodingError):
        validate({"a": 2**64})


# ----------------------------------------------------------------------- registering kinds


@pytest.fixture
def clean_registry() -> Iterator[None]:
    saved = dict(KINDS)
    yield
    KINDS.clear()
    KINDS.update(saved)


def test_register_a_new_kind(clean_registry: None) -> None:
    @register_kind
    @dataclass(frozen=True)
    class Thing(Kind):
        typed_version: ClassVar[str] = "zz_9"
        size: int

        def _content(self) -> Any:
            return {"size": self.size}

        @classmethod
        def _parse(cls, content: Any, ctx: Ctx) -> dict[str, Any]:
            m = want_map(content, ctx, required=("size",))
            return {"size": want_int(m["size"], ctx.at("size"), minimum=0)}

    assert KINDS["zz_9"] is Thing
    obj = decode_object(decode(encode(Thing(3))))
    assert obj == Thing(3)
    with pytest.raises(InvalidObject, match=r"zz_9: content.size: must be ≥ 0, got -1"):
        decode_object(_env("zz_9", {"size": -1}))


def test_register_refuses_clashes_and_bad_names(clean_registry: None) -> None:
    @dataclass(frozen=True)
    class Other(Kind):
        typed_version: ClassVar[str] = "ex_0"

    with pytest.raises(ValueError, match="already registered"):
        register_kind(Other)

    @dataclass(frozen=True)
    class Badly(Kind):
        typed_version: ClassVar[str] = "Bad Name"

    with pytest.raises(TypeError):
        register_kind(Badly)


def test_objects_are_immutable() -> None:
    ex = Execution(A, "main", B, False, C)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ex.handle = "other"  # type: ignore[misc]
    assert copy.deepcopy(ex) == ex
