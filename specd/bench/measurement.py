"""One measured completion: the raw numbers every summary and plot is computed from."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Measurement:
    task: str
    category: str
    mode: str
    rep: int
    order: int  # position in the run's interleaved sequence
    prompt_tokens: int
    new_tokens: int
    prefill_ms: float | None  # None where the runner cannot separate it (transformers generate)
    ttft_ms: float
    decode_ms_per_token: float  # (total - prefill) / new_tokens; after the first token when no prefill
    total_ms: float
    rounds: int | None = None
    drafted: int | None = None
    accepted: int | None = None
    acceptance_rate: float | None = None
    mean_accepted_len: float | None = None
    accepted_at: tuple[int, ...] = ()
    drafted_at: tuple[int, ...] = ()
    peak_rss_mb: float | None = None
    stop_reason: str = ""
    text: str = ""
    tokens: tuple[int, ...] = ()
    prefill_reused: int | None = None  # target prompt tokens whose KV was already cached (specd)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["accepted_at"], d["drafted_at"], d["tokens"] = list(self.accepted_at), list(self.drafted_at), list(self.tokens)
        for key in ("prefill_ms", "ttft_ms", "decode_ms_per_token", "total_ms", "peak_rss_mb"):
            if d[key] is not None:
                d[key] = round(d[key], 3)
        return d


def decode_ms_per_token(total_ms: float, prefill_ms: float | None, ttft_ms: float, new_tokens: int) -> float:
    if new_tokens <= 0:
        return 0.0
    if prefill_ms is not None:
        return (total_ms - prefill_ms) / new_tokens
    return (total_ms - ttft_ms) / (new_tokens - 1) if new_tokens > 1 else ttft_ms
