"""Engine profile, without Spark: the --conf allowlist, the ep_0 kind, rc_0's profile link, the index migration.

(The same on real workers and a real node: tests/integration/test_engine_profile*.py.)
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.adapters.index import Divergence, ExecutionRow, Index
from node.domain.model import EngineProfile, Receipt, block_of, decode, decode_object
from node.domain.model.cid import cid_for
from node.support.errors import InvalidObject
from spark_worker.session import ALLOWED_KEYS, FORCED, JVM_PINS, SESSION_FORCED, STATIC, check_conf, effective_conf

LINK = cid_for(b"x")

# --- the allowlist ---------------------------------------------------------------------------------------

_key_part = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=12)


@given(st.lists(_key_part, min_size=1, max_size=4).map(lambda ps: "spark.sql." + ".".join(ps)), st.text(max_size=20))
def test_unknown_sql_settings_are_refused(key: str, value: str) -> None:
    if key in FORCED or key in ALLOWED_KEYS:
        return  # hypothesis may hit a real one: covered below
    with pytest.raises(ValueError) as err:
        check_conf({key: value})
    assert str(err.value).startswith(f"{key} cannot be set") and "\n" not in str(err.value)


@given(st.sampled_from(sorted(FORCED)), st.text(min_size=1, max_size=20))
def test_forced_settings_take_only_their_value(key: str, value: str) -> None:
    if value.strip().lower() == FORCED[key].lower():
        check_conf({key: value})
        return
    with pytest.raises(ValueError) as err:
        check_conf({key: value})
    assert str(err.value).startswith(f"{key} is fixed to {FORCED[key]}")


@pytest.mark.parametrize("key", ["spark.sql.legacy.timeParserPolicy", "spark.sql.mapKeyDedupPolicy"])
def test_the_issue_examples_are_refused(key: str) -> None:
    with pytest.raises(ValueError, match=key):
        check_conf({key: {"spark.sql.mapKeyDedupPolicy": "LAST_WIN"}.get(key, "LEGACY")})


@given(
    st.sampled_from(
        sorted(
            ALLOWED_KEYS
            | {"spark.ui.port", "spark.executor.memoryOverhead", "spark.dynamicAllocation.enabled", "spark.ssl.enabled"}
        )
    ),
    st.text(max_size=20),
)
def test_resource_settings_are_allowed_and_forced_ones_win(key: str, value: str) -> None:
    check_conf({key: value})
    conf = effective_conf("local[2]", {key: value})
    assert all(conf[k] == v for k, v in FORCED.items())


def test_every_forced_setting_is_reapplied_or_static() -> None:
    assert set(SESSION_FORCED) | STATIC == set(FORCED) and not set(SESSION_FORCED) & STATIC
    for pin, value in JVM_PINS.items():
        assert f"-D{pin}={value}" in FORCED["spark.driver.extraJavaOptions"].split()


# --- ep_0 and rc_0 ---------------------------------------------------------------------------------------

REPORT = {
    "engine": "spark",
    "versions": {"spark": "4.3.0", "pyarrow": "26.0.1"},
    "jvm": {"locale": "en-US", "timezone": "UTC"},
    "settings": {"spark.sql.ansi.enabled": "true"},
}


@given(st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=30), max_size=20))
def test_engine_profile_round_trips_and_is_content_addressed(settings: dict[str, str]) -> None:
    report = {**REPORT, "settings": settings}
    ep = EngineProfile.from_report(report)
    blk = block_of(ep)
    back = decode_object(decode(blk.data))
    assert back == ep and block_of(back).cid == blk.cid
    assert block_of(EngineProfile.from_report(json.loads(json.dumps(report)))).cid == blk.cid  # same content, same CID


@pytest.mark.parametrize(
    ("report", "where"),
    [
        ({**REPORT, "settings": {"k": 1}}, "settings"),
        ({k: v for k, v in REPORT.items() if k != "jvm"}, "jvm"),
        ({**REPORT, "engine": None}, "engine"),
        ({**REPORT, "extra": "x"}, "extra"),
    ],
)
def test_malformed_profile_is_refused(report: dict, where: str) -> None:
    with pytest.raises(InvalidObject, match=where):
        EngineProfile.from_report(report)


def _receipt(profile: object = None) -> Receipt:
    return Receipt(
        LINK, LINK, "did:key:z6Mk", "2026-01-01T00:00:00Z", {"name": "spark"}, "ab", 1, LINK, (), {}, b"s" * 64, profile
    )  # type: ignore[arg-type]


def test_receipt_links_its_profile_and_old_receipts_keep_their_bytes() -> None:
    ep = block_of(EngineProfile.from_report(REPORT)).cid
    new = _receipt(ep)
    assert ep in new.links() and decode_object(decode(block_of(new).data)).profile == ep
    old = _receipt()
    assert "profile" not in old.to_ipld()["content"]  # a receipt from before profiles: same bytes as then
    assert decode_object(decode(block_of(old).data)).profile is None
    assert block_of(new).cid != block_of(old).cid
    with pytest.raises(InvalidObject, match="profile"):
        decode_object({**new.to_ipld(), "content": {**new.to_ipld()["content"], "profile": "not a link"}})


# --- the index -------------------------------------------------------------------------------------------

OLD_EXECUTIONS = """CREATE TABLE executions (invocation TEXT PRIMARY KEY, query TEXT NOT NULL, execution TEXT NOT NULL,
    receipt TEXT NOT NULL, logical_hash TEXT NOT NULL, rows INTEGER NOT NULL, structure TEXT NOT NULL,
    slices TEXT NOT NULL, source TEXT NOT NULL, created REAL NOT NULL)"""


def test_index_migration_keeps_existing_rows(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    db = sqlite3.connect(path)
    db.execute(OLD_EXECUTIONS)
    db.execute("INSERT INTO executions VALUES ('iv1', 'q', 'ex1', 'rc1', 'lh', 3, 'st', '[\"s1\"]', 'computed', 1.0)")
    db.commit()
    db.close()
    index = Index(path)
    assert index.results.execution("iv1") == ExecutionRow(
        "iv1", "q", "ex1", "rc1", "lh", 3, "st", ("s1",), "computed", 1.0, "computed", None
    )
    index.results.add_execution(
        ExecutionRow("iv2", "q", "ex2", "rc2", "lh", 1, "st", (), "computed", 2.0, profile="bafyep")
    )
    assert index.results.execution("iv2").profile == "bafyep"  # type: ignore[union-attr]
    index.close()
    assert Index(path).results.execution("iv2").profile == "bafyep"  # type: ignore[union-attr]  # reopening migrates nothing twice


def test_divergences_are_recorded_once(tmp_path: Path) -> None:
    index = Index(tmp_path / "i.sqlite")
    d = Divergence("iv", "ex", "ep1", "lh", 3, "did:key:z6Mk", "peer", "ex2", "rc2", "ep2", "lh2", 3, 1.0)
    assert index.results.add_divergence(d) and not index.results.add_divergence(d)
    assert (
        index.results.divergences("iv") == [d]
        and index.results.divergences("other") == []
        and index.count("divergences") == 1
    )
