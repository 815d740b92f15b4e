"""Settings of a Cairn node (defaults < config file < environment < flags)."""

from config.settings import (
    DEFAULT_API_PORT,
    ApiSettings,
    DatasetSettings,
    IpfsSettings,
    LogSettings,
    PeerSettings,
    QuerySettings,
    Settings,
    SettingsError,
    SparkSettings,
    default_home,
    flight_port,
    iter_fields,
    load_settings,
    spark_master_kind,
    staging_problem,
)

__all__ = [
    "DEFAULT_API_PORT",
    "ApiSettings",
    "DatasetSettings",
    "IpfsSettings",
    "LogSettings",
    "PeerSettings",
    "QuerySettings",
    "Settings",
    "SettingsError",
    "SparkSettings",
    "default_home",
    "flight_port",
    "iter_fields",
    "load_settings",
    "spark_master_kind",
    "staging_problem",
]
