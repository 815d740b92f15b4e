"""Engine profile (DESIGN.md "Engine profile"), on real Spark workers and a real node.

- a ``--conf`` that could change an answer is refused at start, naming the key;
- two real workers, one started in a hostile environment (Turkish locale, a far time zone, JVM options
  that try to override the pins), report the same profile and give the same answers, which also match
  an oracle computed here in Python (Unicode case mapping, UTC calendar arithmetic);
(The node side, ep_0 linked from receipts and divergences, is in test_engine_profile_node.py.)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
import pytest
import pytest_asyncio

from node.services.resolve.spark import SparkWorker
from node.support.errors import SparkError, SparkStartError

pytestmark = pytest.mark.asyncio(loop_scope="module")

TURKISH = "tr_TR.UTF-8"
HOSTILE_JVM = "-Duser.language=tr -Duser.country=TR -Duser.timezone=Pacific/Kiritimati -Dfile.encoding=ISO-8859-9"
WORDS = ["iş", "IŞIK", "istanbul ıi", "İzmir", "straße", "ΣΑΣ", "plain"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
TIMES = [
    dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC),
    dt.datetime(2023, 12, 31, 23, 30, tzinfo=dt.UTC),
    dt.datetime(2024, 3, 10, 13, 45, 7, tzinfo=dt.UTC),
    dt.datetime(1999, 6, 30, 0, 0, tzinfo=dt.UTC),
    dt.datetime(2024, 2, 29, 14, 0, tzinfo=dt.UTC),
    dt.datetime(2030, 11, 3, 1, 59, 59, tzinfo=dt.UTC),
    dt.datetime(2000, 1, 1, 12, 0, tzinfo=dt.UTC),
]


# --- refused at start ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("spark.sql.legacy.timeParserPolicy", "LEGACY", "is fixed to CORRECTED"),
        ("spark.sql.mapKeyDedupPolicy", "LAST_WIN", "is fixed to EXCEPTION"),
        ("spark.sql.session.timeZone", "Asia/Tokyo", "is fixed to UTC"),
        ("spark.sql.legacy.allowParameterlessCount", "true", "cannot be set"),
        (
            "spark.sql.optimizer.excludedRules",
            "org.apache.spark.sql.catalyst.optimizer.ConstantFolding",
            "cannot be set",
        ),
        ("spark.driver.extraJavaOptions", "-Duser.language=tr", "is fixed to"),
        ("spark.default.parallelism", "7", "cannot be set"),
    ],
)
async def test_answer_changing_conf_is_refused_at_start(tmp_path: Path, key: str, value: str, says: str) -> None:
    w = SparkWorker(tmp_path / "bad.sock", conf={key: value})
    with pytest.raises(SparkStartError) as err:
        await w.start()
    assert f"{key} {says}" in err.value.message and "\n" not in err.value.message
    assert err.value.status == 503 and not w.alive()
    await w.stop()


async def test_spark_defaults_conf_cannot_slip_a_setting_in(tmp_path: Path) -> None:
    """A cluster's spark-defaults.conf bypasses --conf: the worker checks the running SparkConf too."""
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    # The forced key is overridden by the worker's own setting; the unknown one must stop it.
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.sql.mapKeyDedupPolicy LAST_WIN\nspark.sql.legacy.allowParameterlessCount true\n"
    )
    w = SparkWorker(tmp_path / "d.sock", warmup=False, start_timeout=600)
    own_env = w._env
    w._env = lambda: {**own_env(), "SPARK_CONF_DIR": str(conf_dir)}  # type: ignore[method-assign]
    with pytest.raises(SparkStartError) as err:
        await w.start()
    assert "spark.sql.legacy.allowParameterlessCount is set in the Spark configuration" in err.value.message
    assert "exit code 4" in err.value.message and not w.alive()
    await w.stop()


# --- two real workers, one in a hostile environment ----------------------------------------------------


def _turkish_locale(base: Path) -> dict[str, str]:
    """A compiled tr_TR.UTF-8 under ``base`` (LOCPATH), so the C library really runs in Turkish."""
    localedef = shutil.which("localedef")
    assert localedef, "localedef (glibc's locales) is needed to build the Turkish locale"
    out = base / "locales"
    out.mkdir()
    subprocess.run([localedef, "-i", "tr_TR", "-f", "UTF-8", str(out / TURKISH)], check=True, capture_output=True)
    return {"LOCPATH": str(out)}


@pytest.fixture(scope="module")
def words(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile-data") / "words.parquet"
    pq.write_table(
        pa.table(
            {
                "w": WORDS,
                "t": pa.array(TIMES, pa.timestamp("us", tz="UTC")),
                "s": [t.strftime("%d/%m/%Y %H:%M") for t in TIMES],
            }
        ),
        path,
    )
    return path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[SparkWorker, SparkWorker]]:
    base = tmp_path_factory.mktemp("profile-workers")
    hostile_env = {
        **_turkish_locale(base),
        "LANG": TURKISH,
        "LC_ALL": TURKISH,
        "LC_TIME": TURKISH,
        "TZ": "Pacific/Kiritimati",
        "JAVA_TOOL_OPTIONS": HOSTILE_JVM,
        "_JAVA_OPTIONS": HOSTILE_JVM,
    }
    # Generous start deadlines: two JVMs start at once on a shared 2-core machine.
    plain = SparkWorker(base / "plain.sock", warmup=False, start_timeout=600)
    hostile = SparkWorker(base / "hostile.sock", warmup=False, start_timeout=600)
    own_env = hostile._env

    def env() -> dict[str, str]:
        mine = own_env()  # keeps its scratch java.io.tmpdir after the hostile options
        return {**mine, **hostile_env, "SPARK_SUBMIT_OPTS": f"{HOSTILE_JVM} {mine['SPARK_SUBMIT_OPTS']}"}

    hostile._env = env  # type: ignore[method-assign]
    try:
        await asyncio.gather(plain.start(), hostile.start())
        yield plain, hostile
    finally:
        await asyncio.gather(plain.stop(), hostile.stop())


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


async def test_hostile_environment_is_really_hostile(pair: tuple[SparkWorker, SparkWorker]) -> None:
    _, hostile = pair
    env = _environ(hostile.pid)  # type: ignore[arg-type]
    assert env["LC_ALL"] == TURKISH and env["TZ"] == "Pacific/Kiritimati" and "tr" in env["_JAVA_OPTIONS"]
    # The locale exists: the C library of a child with that environment does switch to Turkish.
    probe = await asyncio.to_thread(
        subprocess.run,
        ["python3", "-c", "import locale; print(locale.setlocale(locale.LC_ALL, ''))"],
        env={**os.environ, **{k: env[k] for k in ("LOCPATH", "LC_ALL")}},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == TURKISH


async def test_profiles_are_equal_and_pinned(pair: tuple[SparkWorker, SparkWorker]) -> None:
    plain, hostile = pair
    assert dict(plain.profile) == dict(hostile.profile)
    jvm = hostile.profile["jvm"]
    assert (jvm["locale"], jvm["locale.format"], jvm["timezone"], jvm["charset"]) == ("en-US", "en-US", "UTC", "UTF-8")
    settings = hostile.profile["settings"]
    assert settings["spark.sql.legacy.timeParserPolicy"] == "CORRECTED"
    assert settings["spark.sql.mapKeyDedupPolicy"] == "EXCEPTION"
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert hostile.profile["versions"]["spark"] == pyspark.__version__
    assert hostile.profile["versions"]["pyarrow"] == pa.__version__


CASE_SQL = "SELECT col_0, upper(col_0), lower(col_0) FROM a ORDER BY col_0"
TIME_SQL = (
    "SELECT col_0, date_format(col_1, 'yyyy-MM-dd HH:mm:ss EEEE MMMM a'), hour(col_1), dayofweek(col_1), "
    "to_date(col_2, 'dd/MM/yyyy HH:mm'), unix_timestamp(col_2, 'dd/MM/yyyy HH:mm'), "
    "CAST(CAST(col_1 AS DATE) AS STRING), CAST(col_1 AS STRING), date_trunc('DAY', col_1) FROM a ORDER BY col_0"
)
MORE_SQL = "SELECT col_0, initcap(col_0), sort_array(array(col_0, 'ı', 'i', 'İ', 'I')) FROM a ORDER BY col_0"


def _view(words: Path) -> dict[str, tuple[list[Path], list[str]]]:
    return {"a": ([words], ["col_0", "col_1", "col_2"])}


async def test_case_mapping_is_the_same_and_locale_free(pair: tuple[SparkWorker, SparkWorker], words: Path) -> None:
    got = [(await w.run(CASE_SQL, _view(words))).table for w in pair]
    # Oracle: Python's str.upper/str.lower are Unicode's default (locale-free) case mappings.
    expected = [[w, w.upper(), w.lower()] for w in sorted(WORDS)]
    for table in got:
        assert [list(r.values()) for r in table.to_pylist()] == expected
    more = [(await w.run(MORE_SQL, _view(words))).table for w in pair]
    assert more[0].num_rows == len(WORDS) and more[0].equals(more[1])


async def test_date_functions_are_the_same_and_utc(pair: tuple[SparkWorker, SparkWorker], words: Path) -> None:
    tables = [(await w.run(TIME_SQL, _view(words))).table for w in pair]
    assert tables[0].equals(tables[1])
    by_word = dict(zip(WORDS, TIMES))
    for row in tables[0].to_pylist():
        v = list(row.values())
        t = by_word[v[0]]  # oracle: calendar arithmetic in UTC, English names from fixed lists
        minute = t.replace(second=0)
        assert (
            v[1] == f"{t:%Y-%m-%d %H:%M:%S} {DAYS[t.weekday()]} {MONTHS[t.month - 1]} {'AM' if t.hour < 12 else 'PM'}"
        )
        assert v[2] == t.hour and v[3] == (t.isoweekday() % 7) + 1
        assert v[4] == t.date() and v[5] == int(minute.timestamp())
        assert v[6] == t.date().isoformat() and v[7] == f"{t:%Y-%m-%d %H:%M:%S}"
        assert v[8] == dt.datetime(t.year, t.month, t.day, tzinfo=dt.UTC)


async def test_a_statement_cannot_set_a_forced_setting_for_later_jobs(pair: tuple[SparkWorker, SparkWorker]) -> None:
    plain, _ = pair
    dup = "SELECT map_from_arrays(array(1, 1), array(2, 3))"
    await plain.run("SET spark.sql.mapKeyDedupPolicy=LAST_WIN", {})
    with pytest.raises(SparkError) as err:  # EXCEPTION again: a duplicate key is an error, not the last value
        await plain.run(dup, {})
    assert err.value.condition == "DUPLICATED_MAP_KEY"
