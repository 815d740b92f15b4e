"""Queries: the canonicalizer (sqlglot, Spark SQL) and its determinism rules (docs/queries.md)."""

from node.domain.sql.canonical import CANONICALIZER_VERSION, CanonicalQuery, SortKey, abstract_table_name, canonicalize

__all__ = [
    "CANONICALIZER_VERSION",
    "CanonicalQuery",
    "SortKey",
    "abstract_table_name",
    "canonicalize",
]
