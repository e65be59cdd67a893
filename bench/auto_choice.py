#!/usr/bin/env python
"""Which drafter ``--drafter auto`` chose, request by request, on race tasks (in-process, one engine
as the daemon builds it): per request the rounds, drafts and accepted drafts by source, K auto's
first-position estimates per drafter for code, and each drafter's live step cost.

    python bench/auto_choice.py TASKS.jsonl ID [ID ...]
"""

from __future__ import annotations

import json
import sys

from specd.app import build_engine
from specd.engine.config import EngineConfig
from specd.engine.engine import CompletionRequest


def main() -> int:
    tasks = {t["id"]: t for t in map(json.loads, open(sys.argv[1]))}
    engine = build_engine(EngineConfig(drafter="auto"))
    for tid in sys.argv[2:]:
        t = tasks[tid]
        # another suffix first, as bench/decode_race.py does: no free drafts from a remembered answer
        engine.complete(CompletionRequest(t["prefix"], t["suffix"] + "\n#", max_tokens=1))
        c = engine.complete(CompletionRequest(t["prefix"], t["suffix"], max_tokens=40, temperature=0))
        policy = engine.policy
        code = {s: [round(a, 2) for a in p["code"].alpha[:3]] for s, p in policy.by_drafter.items()}
        print(tid, "by_source", c.stats.by_source, "ms/token", round(c.stats.as_dict()["decode_ms_per_token"], 1),
              "alpha(code)", code, "steps", {s: round(v, 2) for s, v in policy.live.steps.items()}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
