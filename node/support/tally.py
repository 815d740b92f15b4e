"""Counts and latency histograms the node keeps for ``/metrics`` (node/faces/api/metrics.py renders them): plain numbers
here, so the core and services need no metrics library; the HTTP face turns them into Prometheus families."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class Timings:
    """Observations by label: count, sum of seconds, and per-bucket counts (cumulated when read)."""

    buckets: tuple[float, ...] = BUCKETS
    counts: Counter[str] = field(default_factory=Counter)
    sums: dict[str, float] = field(default_factory=dict)
    per_bucket: dict[str, list[int]] = field(default_factory=dict)

    def observe(self, label: str, seconds: float) -> None:
        self.counts[label] += 1
        self.sums[label] = self.sums.get(label, 0.0) + seconds
        slots = self.per_bucket.setdefault(label, [0] * (len(self.buckets) + 1))
        slots[bisect.bisect_left(self.buckets, seconds)] += 1

    def cumulative(self, label: str) -> list[tuple[str, int]]:
        """Prometheus ``le`` buckets: (upper bound, observations at or below it), ``+Inf`` last."""
        total, out = 0, []
        slots = self.per_bucket.get(label, [0] * (len(self.buckets) + 1))
        for bound, n in zip([*map(str, self.buckets), "+Inf"], slots):
            total += n
            out.append((bound, total))
        return out
