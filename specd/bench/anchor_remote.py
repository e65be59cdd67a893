"""Mode ``remote``: the bench's tasks through a remote backend (``--backend llama-server:URL`` or
``openai:URL/v1``), the same :class:`~specd.remote.backend.RemoteBackend` that ``specd serve
--backend`` serves from: specd's prompt windows and post-processing, the server's model and
decoding. So a team compares "specd local" (``target``, ``spec``) with "specd → shared server" on
the same tasks, greedy, in one run.

Times are wall-clock from specd's side of the HTTP connection (what an editor waits for):
TTFT = the first streamed text, decode ms/token = (total − TTFT) / (new tokens − 1). The server's
own prompt cache is its business: a shared server is warm as its other users leave it (the note
says so); ``prefill_reused`` reports what it says it reused.
"""

from __future__ import annotations

from specd.bench.measurement import Measurement, decode_ms_per_token
from specd.bench.modes import Mode
from specd.bench.tasks import Task
from specd.engine.config import EngineConfig
from specd.remote.build import build_remote
from specd.remote.config import RemoteConfig
from specd.requests import CompletionRequest

NOTE = ("remote: the tasks through specd's remote backend ({backend}, model {model}): specd's windows and "
        "post-processing, the server's model and decoding (greedy); times are wall-clock at specd's end of the "
        "HTTP stream; the server's prompt cache is left as it is (not cold)")


def unavailable(remote: RemoteConfig | None, mode: Mode) -> str | None:
    if remote is None or remote.spec is None:
        return f"{mode.name}: skipped, give the server with --backend llama-server:URL or openai:URL/v1"
    return None


class RemoteRunner:
    def __init__(self, mode: Mode, remote: RemoteConfig, engine: EngineConfig) -> None:
        self.mode = mode
        self.backend = build_remote(remote, engine.windows, tokenizer=engine.target, max_len=engine.max_len)
        self.backend.check()  # a server that is down or wrong: the mode is skipped with the reason
        self.settings = NOTE.format(backend=remote.spec, model=self.backend.describe().get("model"))

    def run(self, task: Task, prompt: list[int], max_tokens: int, rep: int, order: int) -> Measurement:
        request = CompletionRequest(prefix=task.prefix, suffix=task.suffix, max_tokens=max_tokens, temperature=0.0)
        completion = self.backend.complete(request)
        s = completion.stats
        return Measurement(
            task=task.id, category=task.category, mode=self.mode.name, rep=rep, order=order,
            prompt_tokens=s.prompt_tokens, new_tokens=s.new_tokens, prefill_ms=None, ttft_ms=s.ttft_ms,
            decode_ms_per_token=decode_ms_per_token(s.total_ms, None, s.ttft_ms, s.new_tokens),
            total_ms=s.total_ms, stop_reason=s.stop_reason, text=completion.text, tokens=(),
            prefill_reused=s.prefill_reused,
        )
