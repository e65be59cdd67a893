"""What decodes one request, chosen once before its first round (:meth:`specd.engine.engine.Engine.plan`).

- **policy**: picks K each round: the request's own fixed K, the engine's adaptive policy (K auto),
  or the engine's fixed K.
- **drafter**: proposes the K tokens; None when the target decodes alone (``mode="target"``, or
  nothing to draft with). With a greedy request whose text continues the last suggestion, the
  suggestion's rest is drafted first (``LookaheadDrafter``).
"""

from __future__ import annotations

from dataclasses import dataclass

from specd.engine.drafters import Drafter
from specd.engine.policy import KPolicy


@dataclass(frozen=True)
class Plan:
    policy: KPolicy
    drafter: Drafter | None
