"""The worker's one warm SparkSession and the settings it is built with (docs/spark.md explains each)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME = "cairn-spark-worker"

# Settings the worker always uses; a --conf that tries to change one is refused (the worker exits
# with an error). The first two are the second wall behind the canonicalizer; the others decide
# what a query returns, so every peer must run with the same values (a result is cached and shared
# under a key that does not name the worker's settings).
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
}

# Session-level settings among FORCED: set again before each job (a statement could have SET them).
SESSION_FORCED = (
    "spark.sql.runSQLOnFiles",
    "spark.sql.session.timeZone",
    "spark.sql.ansi.enabled",
    "spark.sql.execution.arrow.useLargeVarTypes",
    "spark.sql.variable.substitute",
    "spark.sql.shuffle.partitions",
)

_LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?")


def local_cores(master: str) -> int | None:
    """Cores of a ``local``/``local[N]``/``local[*]``/``local[N,F]`` master; None for a cluster."""
    m = _LOCAL.fullmatch(master.strip())
    if not m:
        return None
    n = m.group(1)
    if n is None:
        return 1
    if n == "*":
        return os.cpu_count() or 1
    return max(1, int(n))


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


def check_conf(conf: Mapping[str, str]) -> None:
    """Raise ValueError if ``conf`` tries to change a forced setting."""
    for key, value in conf.items():
        forced = FORCED.get(key)
        if forced is not None and value.strip().lower() != forced:
            raise ValueError(f"{key} is fixed to {forced} in the Cairn Spark worker (got {value!r})")


def effective_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    check_conf(conf)
    return {**defaults(master), **conf, **FORCED, "spark.master": master}


def build_session(master: str, conf: Mapping[str, str]) -> SparkSession:
    """Start the JVM and the session (about 6-8 s on 2 cores); raises on a bad setting."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in effective_conf(master, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
