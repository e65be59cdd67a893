"""Where a model's forwards spend their time, for profiled requests (``specd bench --scenario profile``).

A :class:`PhaseClock` attached to a model (``CausalLM.profile``) receives, for every forward, the
wall seconds of its phases, added up until the caller reads and clears it:

- ``forward``: the whole call; ``embed``, ``layers``, ``head`` (final norm and output head);
- the fused C layers split ``layers`` further (``models/csrc/profile.h``): ``matmul`` (the
  linears), ``attention``, ``layer_other`` (norms, rotary embeddings, the cache write, SwiGLU);
  and account for the OpenMP team in the linears' parallel regions: ``team`` thread-seconds held,
  ``busy`` of them computing (wall clock), ``busy_cpu`` on a CPU. ``team - busy`` is waiting for
  the team (fork, join, an uneven split), ``busy - busy_cpu`` a computing thread preempted.
  ``regions`` counts the parallel regions (a count, not seconds).

Off (no clock) a forward pays one ``is None`` test per phase.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterator


class PhaseClock:
    """Seconds per phase name, added up over forwards (see the module docstring)."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.forwards = 0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def take(self) -> dict[str, float]:
        """The seconds added since the last ``take`` (and the forwards as ``forwards``); clears."""
        out = dict(self.seconds)
        out["forwards"] = float(self.forwards)
        self.seconds.clear()
        self.forwards = 0
        return out
