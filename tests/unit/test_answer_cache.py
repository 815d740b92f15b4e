"""The kept answers of node/services/resolve/answers.py: an entry made at one index generation only, bounded by
bytes."""

from __future__ import annotations

from node.services.resolve.answers import AnswerCache, key_of


def test_an_answer_is_kept_for_its_generation_only() -> None:
    cache = AnswerCache()
    key = key_of("SELECT 1 FROM t", {"t": "t"}, 100, "community", True)
    cache.put(key, 7, {"rows": [[1]], "elapsed_ms": 1.0})
    got = cache.get(key, 7)
    assert got == {"rows": [[1]], "elapsed_ms": 1.0}
    got["elapsed_ms"] = 2.0  # the caller's copy: the kept one is unchanged
    assert cache.get(key, 7) == {"rows": [[1]], "elapsed_ms": 1.0}
    assert cache.get(key, 8) is None and len(cache) == 0  # the index moved: dropped on sight


def test_requests_that_differ_in_anything_are_different_keys() -> None:
    base = ("SELECT 1 FROM t", {"t": "t"}, 100, "community", True)
    variants = [
        ("SELECT 2 FROM t", {"t": "t"}, 100, "community", True),
        ("SELECT 1 FROM t", {"t": "u"}, 100, "community", True),
        ("SELECT 1 FROM t", {"t": "t"}, 5, "community", True),
        ("SELECT 1 FROM t", {"t": "t"}, 100, "self", True),
        ("SELECT 1 FROM t", {"t": "t"}, 100, "community", False),
    ]
    assert len({key_of(*v) for v in [base, *variants]}) == 1 + len(variants)  # type: ignore[arg-type]


def test_bounded_by_bytes_least_recent_out() -> None:
    cache = AnswerCache(max_bytes=300)
    keys = [key_of(f"q{i}", {}, 1, "self", True) for i in range(4)]
    for k in keys[:3]:
        cache.put(k, 0, {"rows": ["x" * 80]})
    assert cache.get(keys[0], 0) is not None  # now the most recent
    cache.put(keys[3], 0, {"rows": ["x" * 80]})
    assert cache.get(keys[1], 0) is None and cache.get(keys[0], 0) is not None and cache.get(keys[3], 0) is not None
