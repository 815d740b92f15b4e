"""What a deterministic Cairn query may use: the allowlist and the rule set (docs/queries.md).

Everything here is part of the canonicalizer's version (``CANONICALIZER_VERSION`` digests it): adding,
removing or renaming an entry changes the canonical form's identity, hence every query CID. Bump
``RULES_REVISION`` when a rule changes in code without an entry changing here.

Function names are Spark 4.3 built-ins (``FunctionRegistry.builtin``), lower case. A function on one of the
allowlists below is parsed *verbatim* (its name and arguments, nothing translated), so what Spark runs is what
the user wrote; the few that keep special syntax (``CAST``, ``EXTRACT``, ``TRIM(BOTH … FROM …)``,
``SUBSTRING(… FROM … FOR …)``, ``POSITION(… IN …)``, ``OVERLAY``, ``IF``, ``CASE``, struct construction, the
higher-order ``transform``/``exists``) are listed in ``SPECIAL_SYNTAX_NODES``.
"""

from __future__ import annotations

RULES_REVISION = 2  # 2: clock-value, float-format, collation (values that depended on the environment)

# --- functions ---------------------------------------------------------------------------------------

#: Deterministic scalar built-ins (math, string, date without the clock, collections, conditionals, hashing).
SCALAR_FUNCTIONS = frozenset(
    """
    abs acos acosh asin asinh atan atan2 atanh bin bround cbrt ceil ceiling conv cos cosh cot csc degrees e exp
    expm1 factorial floor greatest hex hypot least ln log log10 log1p log2 mod negative pi pmod positive pow power
    radians rint round sec sign signum sin sinh sqrt tan tanh try_add try_divide try_mod try_multiply try_subtract
    unhex width_bucket bit_count bit_get getbit shiftleft shiftright shiftrightunsigned array array_append
    array_compact array_contains array_distinct array_except array_insert array_intersect array_join array_max
    array_min array_position array_prepend array_remove array_repeat array_size array_union arrays_overlap
    arrays_zip flatten get sequence slice sort_array array_sort cardinality concat element_at reverse size
    try_element_at coalesce if ifnull nanvl nullif nullifzero nvl nvl2 zeroifnull bigint binary boolean date decimal
    double float int smallint string timestamp tinyint add_months convert_timezone date_add dateadd date_diff
    datediff date_format date_from_unix_date date_part datepart date_sub date_trunc day dayname dayofmonth dayofweek
    dayofyear from_unixtime from_utc_timestamp hour last_day make_date make_dt_interval make_interval make_timestamp
    make_timestamp_ltz make_timestamp_ntz make_ym_interval minute month monthname months_between next_day quarter
    second timestamp_micros timestamp_millis timestamp_seconds to_date to_timestamp to_timestamp_ltz
    to_timestamp_ntz to_unix_timestamp to_utc_timestamp trunc try_make_interval try_make_timestamp
    try_make_timestamp_ltz try_make_timestamp_ntz try_to_date try_to_timestamp unix_date unix_micros unix_millis
    unix_seconds unix_timestamp weekday weekofyear year crc32 hash md5 sha sha1 sha2 xxhash64 from_json
    get_json_object json_array_length json_object_keys schema_of_json to_json from_csv schema_of_csv to_csv map
    map_concat map_contains_key map_entries map_from_arrays map_from_entries map_keys map_values str_to_map typeof
    equal_null isnan isnotnull isnull regexp regexp_like rlike ascii base64 bit_length btrim char char_length
    character_length chr concat_ws contains decode elt encode endswith find_in_set format_number format_string
    initcap instr is_valid_utf8 lcase left len length levenshtein locate lower lpad ltrim luhn_check make_valid_utf8
    mask octet_length printf quote regexp_count regexp_extract regexp_extract_all regexp_instr regexp_replace
    regexp_substr repeat replace right rpad rtrim soundex space split split_part startswith substring_index
    to_binary to_char to_number to_varchar translate try_to_binary try_to_number try_validate_utf8 ucase unbase64
    upper validate_utf8 named_struct parse_url try_parse_url url_decode try_url_decode url_encode aggregate reduce
    filter forall map_filter map_zip_with transform_keys transform_values zip_with
    """.split()
)

#: Deterministic aggregates (floating-point sums are only as deterministic as Spark's summation order:
#: see "Known gaps" in docs/queries.md).
AGGREGATE_FUNCTIONS = frozenset(
    """
    avg mean sum try_avg try_sum count count_if min max bit_and bit_or bit_xor bool_and bool_or every some corr
    covar_pop covar_samp kurtosis skewness median percentile percentile_cont percentile_disc regr_avgx regr_avgy
    regr_count regr_intercept regr_r2 regr_slope regr_sxx regr_sxy regr_syy std stddev stddev_pop stddev_samp
    var_pop var_samp variance grouping grouping_id
    """.split()
)

#: Aggregates whose result is a list in row order: allowed only as the sole argument of a sorting wrapper.
COLLECTING_AGGREGATES = frozenset({"collect_list", "collect_set", "array_agg"})
SORTING_WRAPPERS = frozenset({"sort_array", "array_sort"})

#: Window functions. Ranking ones are deterministic given any ORDER BY (ties share a rank); row ones are
#: completed to a total window order; value ones need a ROWS frame (then they are completed too).
RANKING_WINDOW_FUNCTIONS = frozenset({"rank", "dense_rank", "percent_rank", "cume_dist"})
ROW_WINDOW_FUNCTIONS = frozenset({"row_number", "ntile", "lag", "lead"})
VALUE_WINDOW_FUNCTIONS = frozenset({"first_value", "last_value", "nth_value"})
WINDOW_FUNCTIONS = RANKING_WINDOW_FUNCTIONS | ROW_WINDOW_FUNCTIONS | VALUE_WINDOW_FUNCTIONS

#: Exact synonyms (the same Spark expression class), written one way in the canonical form.
SYNONYMS = {
    "array_agg": "collect_list",
    "cardinality": "size",
    "ceiling": "ceil",
    "char": "chr",
    "char_length": "length",
    "character_length": "length",
    "date_diff": "datediff",
    "dateadd": "date_add",
    "datepart": "date_part",
    "dayofmonth": "day",
    "every": "bool_and",
    "ifnull": "nvl",
    "lcase": "lower",
    "len": "length",
    "mean": "avg",
    "pow": "power",
    "printf": "format_string",
    "regexp": "rlike",
    "regexp_like": "rlike",
    "sha": "sha1",
    "sign": "signum",
    "some": "bool_or",
    "std": "stddev_samp",
    "stddev": "stddev_samp",
    "to_varchar": "to_char",
    "ucase": "upper",
    "variance": "var_samp",
}

#: Refused: the result depends on the clock, randomness, partitioning, the session or the machine.
NONDETERMINISTIC_FUNCTIONS = frozenset(
    """
    rand randn random uniform randstr uuid shuffle current_date curdate current_timestamp now localtimestamp
    current_time localtime current_timezone current_user user session_user current_database current_schema
    current_catalog current_path version monotonically_increasing_id spark_partition_id input_file_name
    input_file_block_start input_file_block_length aes_encrypt approx_count_distinct approx_percentile
    percentile_approx approx_top_k approx_top_k_accumulate approx_top_k_combine histogram_numeric count_min_sketch
    hll_sketch_agg hll_union_agg python_worker_logs
    """.split()
)

#: Refused: they reach the JVM, the file system or the network.
OUTSIDE_REACH_FUNCTIONS = frozenset(
    ["reflect", "java_method", "try_reflect", "from_protobuf", "to_protobuf", "from_avro", "to_avro", "schema_of_avro"]
)

#: Refused: the result depends on the order rows arrive in (unless wrapped as described above).
ORDER_SENSITIVE_FUNCTIONS = frozenset(
    """
    first last first_value last_value nth_value any_value collect_list collect_set array_agg collect_union listagg
    string_agg max_by min_by mode
    """.split()
)

#: Spark's table-valued functions (and other engines' file readers): never allowed in FROM.
TABLE_FUNCTIONS = frozenset(
    """
    range explode explode_outer inline inline_outer posexplode posexplode_outer stack json_tuple variant_explode
    variant_explode_outer sql_keywords collations python_worker_logs read_files
    """.split()
)

#: Data source names Spark accepts in ``format.`path``` (run SQL on files).
FILE_FORMATS = frozenset(
    """
    parquet orc json csv text avro binaryfile delta xml hive jdbc libsvm image noop console rate
    """.split()
)

# --- syntax ------------------------------------------------------------------------------------------

#: sqlglot expression classes a statement may contain (besides the verbatim calls above). Anything else is
#: refused; a few get a more specific rule (see ``FORBIDDEN_NODES``).
ALLOWED_NODES = frozenset(
    """
    Select Union Except Intersect Subquery With CTE TableAlias From Join Where Group Having Order Ordered Limit
    Offset Table Identifier Column Star Alias Distinct Paren Tuple Window WindowSpec Rollup Cube GroupingSets Lambda
    Dot Bracket Literal Boolean Null HexString Interval IntervalSpan Var DataType DataTypeParam ColumnDef And Or Not
    EQ NEQ GT GTE LT LTE NullSafeEQ NullSafeNEQ Is In Between Like ILike RegexpLike Escape Add Sub Mul Div IntDiv
    Mod Neg BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitwiseLeftShift BitwiseRightShift DPipe Exists Case If Cast
    TryCast Extract Trim Substring StrPosition Overlay Concat Struct PropertyEQ Filter WithinGroup IgnoreNulls
    RespectNulls Transform
    """.split()
)

#: The special-syntax functions kept as sqlglot nodes (documentation; they are in ALLOWED_NODES).
SPECIAL_SYNTAX_NODES = frozenset(
    """
    Cast TryCast Extract Trim Substring StrPosition Overlay If Case Concat Struct Exists Transform
    """.split()
)

#: sqlglot classes refused with a specific rule and reason.
FORBIDDEN_NODES = {
    "Hint": ("forbidden-clause", "hints change how Spark runs a query and are not allowed"),
    "TableSample": ("forbidden-clause", "TABLESAMPLE reads a random sample"),
    "QueryTransform": ("outside-reach", "TRANSFORM … USING runs an external program"),
    "Lateral": ("unsupported-construct", "LATERAL VIEW and generators are not supported"),
    "Pivot": ("unsupported-construct", "PIVOT/UNPIVOT is not supported"),
    "Values": ("unsupported-construct", "inline VALUES tables are not supported"),
    "Placeholder": ("forbidden-clause", "parameters and variables are not allowed"),
    "Parameter": ("forbidden-clause", "parameters and variables are not allowed"),
    "SessionParameter": ("forbidden-clause", "parameters and variables are not allowed"),
    "Any": ("unsupported-construct", "ANY/SOME is not supported (use bool_or for the aggregate)"),
    "All": ("unsupported-construct", "ALL is not supported"),
    # Only the default collation: ICU collations compare by the ICU data the engine ships, so an answer would
    # depend on the engine's version.
    "Collate": ("collation", "COLLATE is not allowed: only the default (binary) collation"),
}

#: Clauses of SELECT / set operations / subqueries (sqlglot arg names) that are refused.
FORBIDDEN_CLAUSES = {
    "hint": "hints are not allowed",
    "sample": "TABLESAMPLE reads a random sample",
    "distribute": "DISTRIBUTE BY is not allowed",
    "sort": "SORT BY orders rows within partitions only",
    "cluster": "CLUSTER BY is not allowed",
    "laterals": "LATERAL VIEW is not supported",
    "pivots": "PIVOT/UNPIVOT is not supported",
    "qualify": "QUALIFY is not supported",
    "windows": "named windows (WINDOW w AS …) are not supported: write the window inline",
    "into": "SELECT … INTO writes a table",
    "locks": "locking clauses are not allowed",
    "connect": "CONNECT BY is not supported",
    "match": "MATCH_RECOGNIZE is not supported",
    "prewhere": "PREWHERE is not supported",
    "settings": "SETTINGS is not supported",
    "format": "FORMAT is not supported",
    "options": "OPTIONS is not supported",
    "for_": "FOR clauses are not supported",
    "exclude": "SELECT * EXCEPT/EXCLUDE is not supported",
    "operation_modifiers": "query modifiers are not supported",
    "by_name": "UNION BY NAME is not supported",
}


def manifest() -> dict[str, object]:
    """Everything above as plain data, for the canonicalizer version digest."""
    return {
        "rules_revision": RULES_REVISION,
        "scalar": sorted(SCALAR_FUNCTIONS),
        "aggregate": sorted(AGGREGATE_FUNCTIONS),
        "collecting": sorted(COLLECTING_AGGREGATES),
        "sorting_wrappers": sorted(SORTING_WRAPPERS),
        "ranking_window": sorted(RANKING_WINDOW_FUNCTIONS),
        "row_window": sorted(ROW_WINDOW_FUNCTIONS),
        "value_window": sorted(VALUE_WINDOW_FUNCTIONS),
        "synonyms": sorted(SYNONYMS.items()),
        "nondeterministic": sorted(NONDETERMINISTIC_FUNCTIONS),
        "outside_reach": sorted(OUTSIDE_REACH_FUNCTIONS),
        "order_sensitive": sorted(ORDER_SENSITIVE_FUNCTIONS),
        "table_functions": sorted(TABLE_FUNCTIONS),
        "file_formats": sorted(FILE_FORMATS),
        "nodes": sorted(ALLOWED_NODES),
        "forbidden_nodes": sorted((k, v[0]) for k, v in FORBIDDEN_NODES.items()),
        "forbidden_clauses": sorted(FORBIDDEN_CLAUSES),
    }
