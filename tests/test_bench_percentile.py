"""The one percentile (``specd.percentile``): nearest rank, the definition the daemon's ``stats``
reports its latency p50/p95 with, and the one every bench figure uses."""

from __future__ import annotations

import random

from specd.percentile import percentile


def test_nearest_rank_definition() -> None:
    # the smallest value with at least q % of the values <= it: rank ceil(q/100 * n), 1-based
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0  # not 2.5: always one of the values
    assert percentile([1, 2, 3, 4], 25) == 1 and percentile([1, 2, 3, 4], 75) == 3
    assert percentile([1, 2, 3, 4], 26) == 2
    assert percentile([1.0] * 19 + [9.0], 95) == 1.0  # the 19th of 20
    assert percentile([1.0] * 18 + [9.0, 9.0], 95) == 9.0
    assert percentile(range(1, 11), 90) == 9 and percentile(range(1, 11), 91) == 10
    assert percentile([7.0], 0) == 7.0 and percentile([7.0], 100) == 7.0
    assert percentile([3, 1, 2], 0) == 1 and percentile([3, 1, 2], 100) == 3
    assert percentile([], 50) == 0.0
    assert percentile(iter([2.0, 1.0]), 50) == 1.0  # any iterable, any order


def test_by_its_definition_on_random_values() -> None:
    rng = random.Random(7)
    for _ in range(500):
        values = [rng.choice([rng.random(), float(rng.randrange(5))]) for _ in range(rng.randrange(1, 40))]
        q = rng.choice([1, 5, 10, 25, 50, 75, 90, 95, 99, rng.uniform(0, 100)])
        p = percentile(values, q)
        assert p in values
        need = q / 100 * len(values)
        assert sum(v <= p for v in values) >= need  # at least q % of the values are <= it ...
        smaller = [v for v in values if v < p]
        assert not smaller or sum(v <= max(smaller) for v in values) < need  # ... and of no smaller value


def test_the_daemon_reports_with_the_one_percentile() -> None:
    from specd.daemon import stats

    assert stats.percentile is percentile  # no copy of its own
