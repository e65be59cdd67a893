"""The one percentile of specd's numbers: the daemon's latency p50/p95, the bench's quartiles,
p10/p90 and p95. Torch-free and import-free, so every layer may use it.

Definition: the **nearest rank**. The q-th percentile of n values is the smallest value such that
at least q % of the values are less than or equal to it: the value of rank ``ceil(q / 100 * n)``
(1-based) in ascending order, clamped to 1..n. It is always one of the values (no interpolation):
``percentile([1, 2, 3, 4], 50) == 2``, ``percentile([1, 2, 3, 4], 75) == 3``, and p95 of 20 values
is the 19th. No values give 0.0 (the daemon's ``stats`` reports 0 before its first request);
callers for whom "no values" means "no figure" check for it themselves.

The daemon's ``stats`` (``specd.daemon.stats``) and the bench both import it.
"""

from __future__ import annotations

import math
from typing import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (``q`` in percent, 0..100) of ``values``, in any
    order; 0.0 for no values."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]
