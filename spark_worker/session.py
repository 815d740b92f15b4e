"""The worker's one warm SparkSession, the settings it is built with, and its engine profile.

DESIGN.md "Engine profile": every setting that can change an answer is pinned here (``FORCED``, the JVM's
locale/time zone/encoding in ``JVM_PINS``), a ``--conf`` may only set keys that cannot change an answer
(``ALLOWED_KEYS``/``ALLOWED_PREFIXES``: resources, addresses, UI, logging), and the worker reports what it
runs with (``engine_profile``) so that the node can record it as an ``ep_0`` linked from every receipt.
docs/spark.md has the table of forced, allowed and refused settings.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME = "cairn-spark-worker"

# The JVM's own defaults: Java formats, parses and case-maps with the default locale, and converts
# java.sql dates/times with the default time zone. Passed as the driver's (and executors')
# extraJavaOptions, which come after SPARK_SUBMIT_OPTS and JAVA_TOOL_OPTIONS on the java command
# line and so win over them; `_JAVA_OPTIONS` (which would win) is removed from the environment.
JVM_PINS: dict[str, str] = {
    "user.language": "en",
    "user.country": "US",
    "user.variant": "",
    "user.timezone": "UTC",
    "file.encoding": "UTF-8",
    "sun.jnu.encoding": "UTF-8",
}
JVM_EXIT_ON_OOM = "-XX:+ExitOnOutOfMemoryError"
JAVA_OPTIONS = " ".join(f"-D{k}={v}" for k, v in JVM_PINS.items())

# Settings the worker always uses. A --conf may repeat one with the same value; any other value is
# refused at start. Results are cached and shared under a key (iv_0) that does not name the engine,
# so every setting here is one that decides what a query returns (or is a wall, the first two).
FORCED: dict[str, str] = {
    # Static: blocks reflect / java_method / try_reflect and TRANSFORM … USING; SQL cannot unset it.
    "spark.sql.restrictedMode.enabled": "true",
    # Session config (a SET could turn it back on): the worker re-applies it before every job.
    "spark.sql.runSQLOnFiles": "false",
    "spark.sql.session.timeZone": "UTC",
    # ANSI SQL (Spark 4's default, pinned): overflow, bad casts and division by zero raise errors
    # instead of quietly giving NULL or wrapped numbers.
    "spark.sql.ansi.enabled": "true",
    # Result strings/binaries come back as Arrow `string`/`binary`, never `large_*`.
    "spark.sql.execution.arrow.useLargeVarTypes": "false",
    # Spark substitutes ${var} in the raw text before parsing; the canonicalizer refuses `${`, and this
    # is the second wall.
    "spark.sql.variable.substitute": "false",
    # The same partitioning on every peer: floating-point sums combine partial results per partition,
    # so a machine-dependent count (2 x cores) could change the last bits of a result that is shared.
    "spark.sql.shuffle.partitions": "4",
    # Input splits: Spark divides the input bytes by the core count (spark.default.parallelism)
    # unless minPartitionNum is set, so the split points (and float sums) would follow the machine.
    "spark.sql.files.minPartitionNum": "4",
    "spark.sql.files.maxPartitionBytes": "134217728",
    "spark.sql.files.openCostInBytes": "4194304",
    # Parsing and typing of the statement (the canonical text means one thing everywhere).
    "spark.sql.ansi.doubleQuotedIdentifiers": "false",
    "spark.sql.ansi.enforceReservedKeywords": "false",
    "spark.sql.ansi.relationPrecedence": "false",
    "spark.sql.parser.escapedStringLiterals": "false",
    "spark.sql.caseSensitive": "false",
    "spark.sql.orderByOrdinal": "true",
    "spark.sql.groupByOrdinal": "true",
    "spark.sql.groupByAliases": "true",
    "spark.sql.timestampType": "TIMESTAMP_LTZ",
    "spark.sql.storeAssignmentPolicy": "ANSI",
    "spark.sql.decimalOperations.allowPrecisionLoss": "true",
    "spark.sql.crossJoin.enabled": "true",
    # Functions whose result depends on a setting.
    "spark.sql.legacy.timeParserPolicy": "CORRECTED",  # LEGACY parses dates with SimpleDateFormat rules
    "spark.sql.mapKeyDedupPolicy": "EXCEPTION",  # LAST_WIN would quietly keep one of two duplicate keys
    "spark.sql.legacy.sizeOfNull": "true",  # (ANSI on: size(NULL) is NULL whatever this says)
    "spark.sql.legacy.statisticalAggregate": "false",  # stddev of one row: NULL, not NaN
    "spark.sql.legacy.percentileDiscCalculation": "false",
    "spark.sql.legacy.nullInEmptyListBehavior": "false",  # NULL IN () is false
    "spark.sql.legacy.followThreeValuedLogicInArrayExists": "true",
    "spark.sql.legacy.negativeIndexInArrayInsert": "false",
    "spark.sql.legacy.truncateForEmptyRegexSplit": "false",
    "spark.sql.legacy.lpadRpadAlwaysReturnString": "false",
    "spark.sql.legacy.castComplexTypesToString.enabled": "false",
    "spark.sql.legacy.allowNegativeScaleOfDecimal": "false",
    "spark.sql.legacy.exponentLiteralAsDecimal.enabled": "false",
    "spark.sql.legacy.decimal.retainFractionDigitsOnTruncate": "false",
    "spark.sql.legacy.integerGroupingId": "false",
    "spark.sql.legacy.ctePrecedencePolicy": "CORRECTED",
    "spark.sql.legacy.setopsPrecedence.enabled": "false",
    "spark.sql.legacy.typeCoercion.datetimeToString.enabled": "false",
    "spark.sql.legacy.disableMapKeyNormalization": "false",
    "spark.sql.legacy.scalarSubqueryCountBugBehavior": "false",
    "spark.sql.legacy.inSubqueryNullability": "false",
    "spark.sql.legacy.javaCharsets": "false",
    "spark.sql.legacy.codingErrorAction": "false",
    "spark.sql.legacy.collationAwareHashFunctions": "false",
    "spark.sql.legacy.allowHashOnMapType": "false",
    "spark.sql.legacy.interval.enabled": "false",
    "spark.sql.legacy.fromDayTimeString.enabled": "false",
    "spark.sql.legacy.histogramNumericPropagateInputType": "true",
    "spark.sql.legacy.literal.pickMinimumPrecision": "true",
    "spark.sql.legacy.allowZeroIndexInFormatString": "false",
    "spark.sql.legacy.bangEqualsNot": "false",
    "spark.sql.legacy.consecutiveStringLiterals.enabled": "false",
    "spark.sql.legacy.parser.havingWithoutGroupByAsWhere": "false",
    "spark.sql.legacy.groupingIdWithAppendedUserGroupBy": "false",
    "spark.sql.legacy.duplicateBetweenInput": "false",
    "spark.sql.legacy.earlyEvalCurrentTime": "false",
    "spark.sql.function.concatBinaryAsString": "false",
    "spark.sql.function.eltOutputAsString": "false",
    "spark.sql.jsonGenerator.ignoreNullFields": "true",
    "spark.sql.icu.caseMappings.enabled": "true",  # upper/lower by ICU's root rules, not the JVM locale
    # Reading the input Parquet files: values and types must not depend on reader settings.
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",  # our slices are proleptic Gregorian
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.binaryAsString": "false",
    "spark.sql.parquet.int96AsTimestamp": "true",
    "spark.sql.parquet.int96TimestampConversion": "false",
    "spark.sql.parquet.inferTimestampNTZ.enabled": "true",
    "spark.sql.parquet.mergeSchema": "false",
    "spark.sql.parquet.fieldId.read.enabled": "false",
    "spark.sql.legacy.parquet.nanosAsLong": "false",
    "spark.sql.legacy.parquet.returnNullStructIfAllFieldsMissing": "false",
    "spark.sql.files.ignoreCorruptFiles": "false",  # true would answer from part of the input
    "spark.sql.files.ignoreMissingFiles": "false",
    # The JVM (driver and, on a cluster, executors).
    "spark.driver.extraJavaOptions": JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": JAVA_OPTIONS,
}

# FORCED settings that only take effect when the session is built (SQL cannot change them).
STATIC = frozenset(
    {"spark.sql.restrictedMode.enabled", "spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"}
)

# Session-level settings among FORCED: set again before each job (a statement could have SET them).
SESSION_FORCED = tuple(k for k in FORCED if k not in STATIC)

# Keys a --conf may set: resources, addresses, security of the cluster's own links, UI and logging.
# None of them can change what a query returns; every other key is refused at start.
ALLOWED_KEYS = frozenset(
    {
        "spark.app.name",
        "spark.master",
        "spark.driver.memory",
        "spark.driver.memoryOverhead",
        "spark.driver.maxResultSize",
        "spark.driver.cores",
        "spark.driver.host",
        "spark.driver.bindAddress",
        "spark.driver.port",
        "spark.driver.blockManager.port",
        "spark.blockManager.port",
        "spark.port.maxRetries",
        "spark.network.timeout",
        "spark.executor.cores",
        "spark.executor.instances",
        "spark.executor.heartbeatInterval",
        "spark.cores.max",
        "spark.task.cpus",
        "spark.task.maxFailures",
        "spark.memory.fraction",
        "spark.memory.storageFraction",
        "spark.memory.offHeap.enabled",
        "spark.memory.offHeap.size",
        "spark.local.dir",
        "spark.sql.warehouse.dir",
        "spark.authenticate",
        "spark.authenticate.secret",
        "spark.network.crypto.enabled",
        "spark.io.encryption.enabled",
        "spark.logConf",
        "spark.log.level",
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.autoBroadcastJoinThreshold",
        "spark.sql.broadcastTimeout",
    }
)
ALLOWED_PREFIXES = ("spark.ui.", "spark.executor.memory", "spark.dynamicAllocation.", "spark.eventLog.", "spark.ssl.")

# Keys Spark itself puts in the SparkConf of a running context (never an answer-relevant setting).
_SPARK_INTERNAL = frozenset(
    {
        "spark.app.id",
        "spark.app.startTime",
        "spark.app.submitTime",
        "spark.app.initial.jar.urls",
        "spark.app.initial.file.urls",
        "spark.executor.id",
        "spark.rdd.compress",
        "spark.submit.deployMode",
        "spark.submit.pyFiles",
        "spark.serializer.objectStreamReset",
        "spark.driver.defaultJavaOptions",
        "spark.sql.artifact.isolation.enabled",
        "spark.sql.artifact.isolation.alwaysApplyClassloader",
        "spark.executor.extraClassPath",
        "spark.driver.extraClassPath",
        "spark.repl.local.jars",
        "spark.files",
        "spark.jars",
        "spark.submit.appArgs",
    }
)

UNSET = "<unset>"  # how the profile shows a setting with no value (Spark's "<undefined>" default)


def defaults(master: str) -> dict[str, str]:
    """Settings a --conf may override (cluster deployments must, e.g. ``spark.driver.host``)."""
    conf = {
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }
    return conf


def allowed(key: str) -> bool:
    return key in ALLOWED_KEYS or key.startswith(ALLOWED_PREFIXES)


def check_conf(conf: Mapping[str, str]) -> None:
    """Raise ValueError (one line) for a key that is neither allowed nor forced to the value given."""
    for key, value in conf.items():
        forced = FORCED.get(key)
        if forced is not None:
            if value.strip().lower() != forced.lower():
                raise ValueError(
                    f"{key} is fixed to {forced} in the Cairn Spark worker (got {value!r}): "
                    f"it can change answers (docs/spark.md)"
                )
        elif not allowed(key):
            raise ValueError(
                f"{key} cannot be set in the Cairn Spark worker: only resource, address, UI and "
                f"logging settings are allowed, because a setting can change answers (docs/spark.md)"
            )


def effective_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    check_conf(conf)
    return {**defaults(master), **conf, **FORCED, "spark.master": master}


def pin_process_env() -> None:
    """Give this process (and the JVM it starts) a fixed locale and time zone.

    The JVM's -D pins decide; this also covers what reads the environment directly (Python, native code).
    ``_JAVA_OPTIONS`` is read by the JVM *after* its command line, so it could undo the pins: it goes.
    """
    for var in ("_JAVA_OPTIONS", "LANGUAGE"):
        os.environ.pop(var, None)
    for var in list(os.environ):
        if var.startswith("LC_"):
            del os.environ[var]
    os.environ.update({"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"})
    time.tzset()
    # An OutOfMemoryError ends the JVM instead of leaving a job "running" at 0 % CPU forever (as
    # an OOM in the Arrow-serving thread did); the worker sees the JVM gone, answers "died" and exits,
    # and the node restarts it. Not an answer-relevant setting, so it is not part of the engine profile.
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if JVM_EXIT_ON_OOM not in opts.split():
        os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} {JVM_EXIT_ON_OOM}".strip()


def build_session(master: str, conf: Mapping[str, str]) -> SparkSession:
    """Start the JVM and the session (about 6-8 s on 2 cores); raises on a bad setting.

    Raises ValueError when the running engine is not what FORCED and JVM_PINS say (e.g. a
    spark-defaults.conf on a cluster set an answer-relevant key), after stopping it.
    """
    from pyspark.sql import SparkSession

    settings = effective_conf(master, conf)
    pin_process_env()
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        check_running(spark)
    except ValueError:
        spark.stop()
        raise
    return spark


def _jvm(spark: SparkSession) -> Any:
    """The driver JVM's py4j view (pyspark types it Optional: it is None once the context is stopped)."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        raise ValueError("the Spark context is stopped")
    return jvm


def jvm_properties(spark: SparkSession) -> dict[str, str]:
    """The driver JVM's locale, time zone and encodings as the JVM itself reports them."""
    jvm = _jvm(spark)
    system, locale = jvm.java.lang.System, jvm.java.util.Locale
    props = {k: str(system.getProperty(k) or "") for k in JVM_PINS}
    props["locale"] = str(locale.getDefault().toLanguageTag())
    props["locale.format"] = str(locale.getDefault(locale.Category.FORMAT).toLanguageTag())
    props["timezone"] = str(jvm.java.util.TimeZone.getDefault().getID())
    props["charset"] = str(jvm.java.nio.charset.Charset.defaultCharset().name())
    return props


def check_running(spark: SparkSession) -> None:
    """Refuse an engine that does not run with the pinned settings (one-line ValueError)."""
    props = jvm_properties(spark)
    for key, want in {
        **JVM_PINS,
        "locale": "en-US",
        "locale.format": "en-US",
        "timezone": "UTC",
        "charset": "UTF-8",
    }.items():
        if props[key] != want:
            raise ValueError(
                f"the Spark driver JVM runs with {key}={props[key]!r}, not {want!r} "
                f"(is it overridden by _JAVA_OPTIONS or a spark-defaults.conf?)"
            )
    for key, want in FORCED.items():
        got = _read(spark, key)
        # Spark puts its own JVM module options before ours in extraJavaOptions: ours must come last.
        if got.lower() != want.lower() and not (key.endswith("extraJavaOptions") and got.endswith(" " + want)):
            raise ValueError(f"the Spark session runs with {key}={got!r}, not {want!r}")
    for key, _ in spark.sparkContext.getConf().getAll():
        if key not in FORCED and key not in _SPARK_INTERNAL and not allowed(key):
            raise ValueError(
                f"{key} is set in the Spark configuration (spark-defaults.conf?), and the Cairn "
                f"Spark worker does not allow it: it can change answers (docs/spark.md)"
            )


def _read(spark: SparkSession, key: str) -> str:
    """A setting's effective value: SQL settings from the session, core ones from the SparkConf."""
    if key.startswith("spark.sql."):
        try:
            return str(spark.conf.get(key))  # the setting's own default when unset (a default here is not)
        except Exception:  # noqa: BLE001 - Spark raises for an optional setting with no value
            return UNSET
    return str(spark.sparkContext.getConf().get(key, UNSET))


def _defined_keys(spark: SparkSession, prefix: str) -> list[str]:
    """Every SQL setting this Spark defines under ``prefix`` (internal ones included)."""
    jvm = _jvm(spark)
    sqlconf = getattr(getattr(jvm.org.apache.spark.sql.internal, "SQLConf$"), "MODULE$")
    keys, it = [], sqlconf.getConfigEntries().iterator()
    while it.hasNext():
        key = str(it.next().key())
        if key.startswith(prefix):
            keys.append(key)
    return sorted(keys)


def engine_profile(spark: SparkSession) -> dict[str, Any]:
    """What the node writes as the ``ep_0`` (all strings): versions, JVM pins, every answer-relevant setting.

    Settings are read back from the running session: the FORCED ones, plus every ``spark.sql.legacy.*``
    this Spark defines (pinned to Spark's defaults by the allowlist; a value that drifts shows here).
    """
    import pyarrow

    jvm = _jvm(spark)
    system = jvm.java.lang.System
    settings: dict[str, str] = {}
    for key in sorted({*FORCED, *_defined_keys(spark, "spark.sql.legacy.")}):
        settings[key] = _read(spark, key)
    props = jvm_properties(spark)
    return {
        "engine": "spark",
        "versions": {
            "spark": str(spark.version),
            "scala": str(jvm.scala.util.Properties.versionNumberString()),
            "java": f"{system.getProperty('java.vendor')} {system.getProperty('java.runtime.version')}",
            "pyarrow": pyarrow.__version__,
        },
        "jvm": {
            "locale": props["locale"],
            "locale.format": props["locale.format"],
            "timezone": props["timezone"],
            "charset": props["charset"],
            "file.encoding": props["file.encoding"],
        },
        "settings": settings,
    }


def session_pinner(spark: SparkSession) -> Callable[[], None]:
    """A function that sets every session-level FORCED setting again, in one JVM call (about 0.3 ms;
    one ``spark.conf.set`` per key took 10 ms). The worker calls it before each job: a statement
    could have SET one of them."""
    props = _jvm(spark).java.util.Properties()
    for key in SESSION_FORCED:
        props.setProperty(key, FORCED[key])
    jconf = spark._jsparkSession.sessionState().conf()
    return lambda: jconf.setConf(props)


# --- Spark Connect (spark.mode = connect; docs/spark.md "Modes") ---------------------------------------------------
# The session lives on the server: static settings cannot be set from here, so every FORCED one is read back from the
# server and any difference refuses the start (an answer computed under other settings would not be reproducible).


# Case mapping follows the server JVM's default locale (docs/spark.md, forced extraJavaOptions), which reflection
# (blocked by restricted mode) cannot read over Connect: a Turkish JVM maps these differently.
LOCALE_PROBE = "SELECT upper('iş') AS u, lower('IŞ') AS l"
LOCALE_WANT = ("IŞ", "iş")
START_RETRIES = (
    4  # an unreachable server: about 3 s of retries (50 ms x 4^n backoff, at most 2 s) before the start fails
)


def remote_url(remote: str, token: str | None) -> str:
    """``sc://host:port`` plus the token parameter. The URL is never logged: it holds the token."""
    base = remote.rstrip("/")
    return f"{base}/;token={token}" if token else base


def build_remote_session(remote: str, token: str | None) -> SparkSession:
    """A session on the Spark Connect server at ``remote``; ValueError (one line, no token) when the server's
    settings are not Cairn's forced ones, or when it cannot be reached or refuses the token."""
    import warnings

    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.client.retries import DefaultPolicy

    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")  # pandas 3 "not yet supported"
    try:
        spark = SparkSession.builder.remote(remote_url(remote, token)).create()
        client = spark.client  # a Connect session's gRPC client
        # The client retries an unreachable server for 10+ minutes by default: a start gives up in seconds
        # (START_RETRIES), jobs keep the default (they are bounded by spark.query_timeout).
        client.set_retry_policies([DefaultPolicy(max_retries=START_RETRIES, max_backoff=2000)])
        spark.version  # noqa: B018 - the first RPC: a wrong or missing token fails here, at once
        client.set_retry_policies([DefaultPolicy()])
    except PySparkException as e:
        raise ValueError(f"no session on the Spark Connect server at {remote}: {_grpc_why(e, token)}") from None
    try:
        check_remote(spark)
    except ValueError:
        spark.stop()
        raise
    return spark


def _grpc_why(exc: BaseException, token: str | None) -> str:
    """gRPC's own reason (``details = "…"``) if there is one, else the first line; never the token."""
    text = str(exc)
    m = re.search(r'details = "([^"]*)"', text)
    why = m.group(1) if m else (text.strip().splitlines() or [type(exc).__name__])[0]
    return why.replace(token, "***") if token else why


def check_remote(spark: SparkSession) -> None:
    """Refuse a Connect server whose settings differ from FORCED, or whose JVM case-maps with another locale."""
    for key, want in FORCED.items():
        got = read_remote(spark, key)
        if got.lower() != want.lower() and not (key.endswith("extraJavaOptions") and got.endswith(" " + want)):
            raise ValueError(
                f"the Spark Connect server runs with {key}={got!r}, not {want!r}: start it with "
                f'--conf {key}=… (docs/spark.md "Modes"); its answers would not be reproducible'
            )
    # As check_running does with a cluster's spark-defaults.conf: a key outside the allowlist can change answers.
    for key in spark.conf.getAll:
        if (
            key not in FORCED
            and key not in _SPARK_INTERNAL
            and not allowed(key)
            and not key.startswith("spark.connect.")
        ):
            raise ValueError(
                f"the Spark Connect server sets {key}, which the Cairn Spark worker does not allow: "
                f"it can change answers (docs/spark.md)"
            )
    row = spark.sql(LOCALE_PROBE).collect()[0]
    if (row[0], row[1]) != LOCALE_WANT:
        raise ValueError(
            f"the Spark Connect server's JVM case-maps with another locale (upper('iş') = {row[0]!r}): "
            f"start it with spark.driver.extraJavaOptions={JAVA_OPTIONS!r}"
        )


def read_remote(spark: SparkSession, key: str) -> str:
    try:
        return str(spark.conf.get(key))
    except Exception:  # noqa: BLE001 - the server raises for a setting with no value
        return UNSET


def remote_profile(spark: SparkSession) -> dict[str, Any]:
    """The engine profile of a Connect server: its Spark version and every FORCED setting as it reports them. The
    server JVM's Java/Scala versions and properties cannot be read over Connect (restricted mode blocks reflection);
    the locale and encodings are pinned through its extraJavaOptions, checked above."""
    import pyarrow

    return {
        "engine": "spark",
        "versions": {"spark": str(spark.version), "pyarrow": pyarrow.__version__},
        "jvm": {},
        "settings": {key: read_remote(spark, key) for key in sorted(FORCED)},
    }


def remote_pinner(spark: SparkSession) -> Callable[[], None]:
    """Like ``session_pinner``: every session-level FORCED setting set again, in one Connect config call."""
    values = {key: FORCED[key] for key in SESSION_FORCED}
    # type stubs name the classic RuntimeConfig; a Connect session has the batched _set_all
    return lambda: spark.conf._set_all(values, silent=False)  # type: ignore[attr-defined]  # Connect-only method
