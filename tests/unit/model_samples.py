"""DAG-JSON samples for comparing Cairn's CIDs with Kubo's.

``samples()`` returns (name, DAG-JSON text) pairs. For each, ``cid_for(encode(loads(text)))``
must equal the CID printed by
``ipfs dag put --input-codec dag-json --store-codec dag-cbor --hash blake3``.
Every sample was checked by hand against Kubo 0.42. Texts avoid inputs where Kubo and the
DAG-JSON spec disagree (see docs/object-model.md), e.g. integer-valued floats written with
more than 19 integer digits, trailing commas, leading zeros, lone surrogates.
"""

from __future__ import annotations

from node.domain.model import (
    CID,
    Connection,
    DryTransformation,
    Execution,
    ExploreIndex,
    ExploreRange,
    ExploreUnion,
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
    data_tree,
    dumps,
)


def _links() -> dict[str, CID]:
    leaf_null = block_of(None, "cbor").cid  # the Holium null leaf
    leaf_text = block_of("hello", "cbor").cid
    tree = data_tree({"name": "cairn", "n": [1, 2.5, None]}).root
    wasm = cid_for(b"\x00asm\x01\x00\x00\x00", "raw")
    mbe = ModuleBytecodeEnvelope(wasm).block().cid
    rde_in = RecursiveDataEnvelope(tree).block().cid
    rde_out = RecursiveDataEnvelope(block_of([leaf_text], "dag-cbor").cid).block().cid
    sel_tail = SelectorEnvelope(ExploreIndex(0, Matcher())).block().cid
    sel_head = SelectorEnvelope(ExploreIndex(1, Matcher())).block().cid
    cx = Connection(sel_tail, sel_head).block().cid
    dt = DryTransformation(mbe, "main").block().cid
    ex = Execution(mbe, "main", rde_in, False, rde_out).block().cid
    return {
        "leaf_null": leaf_null,
        "leaf_text": leaf_text,
        "tree": tree,
        "wasm": wasm,
        "mbe": mbe,
        "rde_in": rde_in,
        "rde_out": rde_out,
        "sel_tail": sel_tail,
        "sel_head": sel_head,
        "cx": cx,
        "dt": dt,
        "ex": ex,
    }


def _kind_samples(k: dict[str, CID]) -> list[tuple[str, str]]:
    diamond = Pipeline(
        vertices=[{"dt": k["dt"]}, {"dt": k["dt"], "rde": k["rde_in"]}, {"ex": k["ex"]}, {"rde": k["rde_out"]}, {}],
        edges=[
            PipelineEdge(0, 1, k["cx"]),
            PipelineEdge(0, 2, k["cx"]),
            PipelineEdge(1, 3, k["cx"]),
            PipelineEdge(2, 3, k["cx"]),
            PipelineEdge(3, 4, k["cx"]),
            PipelineEdge(0, 4, k["cx"]),
        ],
    )
    objects = [
        ("sde_0", ScalarDataEnvelope(k["leaf_null"])),
        ("rde_0", RecursiveDataEnvelope(k["tree"])),
        ("mbe_0", ModuleBytecodeEnvelope(k["wasm"])),
        ("ex_0 success", Execution(k["mbe"], "main", k["rde_in"], False, k["rde_out"])),
        ("ex_0 failure without output", Execution(k["mbe"], "main", k["rde_in"], True, None)),
        ("ex_0 failure with output", Execution(k["mbe"], "transformé", k["rde_in"], True, k["rde_out"])),
        ("dt_0", DryTransformation(k["mbe"], "main")),
        ("cx_0", Connection(k["sel_tail"], k["sel_head"])),
        ("pl_0 empty", Pipeline(vertices=[], edges=[])),
        (
            "pl_0 three vertices two edges",
            Pipeline(
                vertices=[{"dt": k["dt"]}, {"dt": k["dt"]}, {"rde": k["rde_in"]}],
                edges=[PipelineEdge(0, 1, k["cx"]), PipelineEdge(1, 2, k["cx"])],
            ),
        ),
        ("pl_0 diamond five vertices six edges", diamond),
        ("pl_0 as a pipeline run writes it", _run_pipeline(k)),
        ("pr_0 a run with a failed and a skipped step", _run(k)),
        ("selector matcher", SelectorEnvelope(Matcher())),
        ("selector matcher with label", SelectorEnvelope(Matcher("out"))),
        ("selector explore index", SelectorEnvelope(ExploreIndex(3, Matcher()))),
        ("selector explore range", SelectorEnvelope(ExploreRange(0, 10, Matcher()))),
        ("selector explore union", SelectorEnvelope(ExploreUnion((Matcher("a"), ExploreIndex(0, Matcher()))))),
        (
            "selector nested",
            SelectorEnvelope(
                ExploreUnion(
                    (
                        ExploreIndex(0, ExploreRange(2, 5, ExploreIndex(1, Matcher("deep")))),
                        ExploreRange(0, 0, Matcher()),
                        Matcher(),
                    )
                )
            ),
        ),
    ]
    out = [(name, dumps(obj)) for name, obj in objects]
    out.append(("ex_0 pretty-printed", dumps(objects[3][1], indent=2)))
    out.append(("recursive data block", dumps([k["leaf_null"], k["leaf_text"], k["tree"]])))
    return out


def _run_pipeline(k: dict[str, CID]) -> Pipeline:
    """node.services.pipelines: a vertex per root dataset version, one per step (its qy_0, or the dt_0 of a step that
    did
    not run), edges from the whole output to the head's input at its index, labelled with the alias."""
    return Pipeline(
        vertices=[{"dataset": k["rde_in"]}, {"query": k["rde_out"]}, {"transformation": k["dt"]}],
        edges=[PipelineEdge(0, 1, k["cx"]), PipelineEdge(1, 2, k["cx"])],
    )


def _run(k: dict[str, CID]) -> PipelineRun:
    steps = (
        RunStep("clean", 1, "computed", k["rde_in"], k["ex"], k["rde_out"], k["tree"]),
        RunStep("by_city", 2, "failed", error="column 'nope' is not in the input"),
        RunStep("top", 3, "skipped", error='not run: step "by_city" it reads did not succeed'),
    )
    sig = bytes(range(64))  # the shape of an ed25519 signature: these samples compare bytes, not signers
    did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    return PipelineRun("sales", k["cx"], k["dt"], "failed", steps, did, "2026-11-25T20:00:00.000000Z", sig)


def _data_samples(k: dict[str, CID]) -> list[tuple[str, str]]:
    link = lambda c: '{"/":"' + c.encode("base32") + '"}'  # noqa: E731
    nested_lists = "[" * 100 + "1" + "]" * 100
    nested_maps = '{"a":' * 50 + "null" + "}" * 50
    return [
        ("null", "null"),
        ("true", "true"),
        ("false", "false"),
        ("small int", "1"),
        ("negative int", "-1"),
        ("string", '"hello"'),
        ("empty map", "{}"),
        ("empty list", "[]"),
        ("empty containers inside", '{"l":[],"m":{},"s":"","b":{"/":{"bytes":""}}}'),
        ("unsorted keys", '{"b":1,"a":2,"aa":3,"":0,"ab":4,"B":5}'),
        ("unicode keys", '{"é":1,"z":2,"aaa":3,"日本語":4,"😀":5,"e\u0301":6}'),
        ("int64 max", "9223372036854775807"),
        ("int64 min", "-9223372036854775808"),
        ("int head sizes", "[0,1,23,24,255,256,65535,65536,4294967295,4294967296,-24,-25,-256,-257,-65536,-65537]"),
        ("int64 extremes in a map", '{"max":9223372036854775807,"min":-9223372036854775808,"zero":-0}'),
        ("floats", "[1.0,-0.0,0.0,0.1,1.5,0.30000000000000004,123456.789,-2.5e-7]"),
        ("float extremes", "[1e300,5e-324,1.7976931348623157e308,2.2250738585072014e-308,-1e-300]"),
        ("float exponent forms", "[1E+2,2.5e-1,1e2,1.0e0,1e+16,1e-07]"),
        ("float underflow to zero", "[1e-400,-1e-400]"),
        ("bytes", '{"/":{"bytes":"aGVsbG8"}}'),
        ("empty bytes", '{"/":{"bytes":""}}'),
        ("bytes with padding", '{"/":{"bytes":"aGVsbA=="}}'),
        ("all byte values", '{"/":{"bytes":"' + _all_bytes_b64() + '"}}'),
        ("link cidv1 dag-cbor", link(k["ex"])),
        ("link cidv1 cbor leaf", link(k["leaf_null"])),
        ("link cidv1 raw", link(k["wasm"])),
        ("link cidv0", '{"/":"QmdfTbBqBPQ7VNxZEYEj14VmRuZBkqFbiwReogJgS1zR1n"}'),
        ("link identity", '{"/":"bafkqaaa"}'),
        (
            "nested links",
            '{"a":'
            + link(k["ex"])
            + ',"b":['
            + link(k["dt"])
            + ',{"c":'
            + link(k["cx"])
            + '}],"d":{"e":{"f":['
            + link(k["tree"])
            + "]}}}",
        ),
        ("deeply nested lists", nested_lists),
        ("deeply nested maps", nested_maps),
        ("string escapes", '"a\\"b\\\\c\\n\\t\\u0001\\u001f é 😀 \\/ </x>"'),
        ("string with nul", '"a\\u0000b"'),
        ("escaped surrogate pair", '"\\ud83d\\ude00"'),
        ("long string", '"' + "cairn " * 300 + '"'),
        ("whitespace everywhere", ' \n{ "b" : [ 1 ,\t2 ] ,\r\n "a" : { } } \n'),
        (
            "mixed",
            '{"int":42,"float":4.25,"str":"s","bytes":{"/":{"bytes":"AAEC"}},"null":null,'
            '"bool":[true,false],"link":' + link(k["leaf_text"]) + ',"list":[[],{},[{}]]}',
        ),
        ("typed-looking plain map", '{"typedVersion_":"ex_0","content":[1,2]}'),
    ]


def _all_bytes_b64() -> str:
    import base64

    return base64.b64encode(bytes(range(256))).decode("ascii").rstrip("=")


def samples() -> list[tuple[str, str]]:
    """All (name, DAG-JSON) samples; names are unique."""
    k = _links()
    out = _kind_samples(k) + _data_samples(k)
    assert len({name for name, _ in out}) == len(out)
    return out
