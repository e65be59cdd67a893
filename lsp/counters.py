"""What the completion service did, counted (tests and the editor bench read them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServiceCounters:
    answered_locally: int = 0  # typed along a shown suggestion: no request
    answered_ahead: int = 0  # answered by a request sent ahead after an accept
    debounced: int = 0  # dropped while waiting: a newer edit or request came
    requests: int = 0  # completions sent to the backend
    warms: int = 0  # warms sent
    warm_errors: int = 0
    aheads: int = 0  # requests sent ahead after an accepted suggestion
    accepts: int = 0
