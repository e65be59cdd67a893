"""llama.cpp's ``llama-server`` through ``/infill``: the server lays out the FIM prompt itself
(prefix and suffix, in the model's own FIM tokens), keeps the prompt cached per slot
(``cache_prompt``), and stops generating when the connection closes."""

from __future__ import annotations

from typing import Any

from specd.remote.driver import Chunk, need, optional_int
from specd.remote.errors import RemoteError
from specd.remote.http import Cancel, HttpClient
from specd.remote.prompt import RemotePrompt
from specd.requests import CompletionRequest

STOP_TYPES = {"eos": "stop_token", "limit": "max_tokens", "word": "stop_string"}


class LlamaServerDriver:
    name = "llama-server"
    path = "/infill"
    end_marker = "a final event with stop: true"

    def __init__(self, max_predict_ms: int = 0) -> None:
        self.max_predict_ms = max_predict_ms

    def _common(self, request: CompletionRequest, prompt: RemotePrompt) -> dict[str, Any]:
        parts = prompt.infill_parts(request)
        return {"input_prefix": parts.prefix, "input_suffix": parts.suffix, "cache_prompt": True}

    def body(self, request: CompletionRequest, prompt: RemotePrompt, stream: bool = True) -> dict[str, Any]:
        body = self._common(request, prompt)
        body.update({"n_predict": request.max_tokens, "stream": stream, "temperature": request.temperature,
                     "top_p": request.top_p, "top_k": request.top_k,
                     "seed": request.seed if request.seed is not None else -1})
        if request.stop:
            body["stop"] = list(request.stop)
        if request.line_budget_ms is not None:  # the request's own budget wins over the server's setting
            body["t_max_predict_ms"] = max(1, round(request.line_budget_ms))  # llama-server: 0 means no limit
        elif self.max_predict_ms:
            body["t_max_predict_ms"] = self.max_predict_ms
        return body

    def warm_body(self, request: CompletionRequest, prompt: RemotePrompt) -> dict[str, Any]:
        # as llama.vscode warms its ring buffer: the prompt processed and cached, nothing generated
        return {**self._common(request, prompt), "n_predict": 0, "stream": False}

    def parse(self, event: Any) -> Chunk:
        what = "llama-server /infill"
        content = need(event, "content", str, what)
        if not event.get("stop"):
            return Chunk(text=content)
        timings = event.get("timings") if isinstance(event.get("timings"), dict) else {}
        return Chunk(text=content, stop_reason=STOP_TYPES.get(str(event.get("stop_type", "")), "stop_token"),
                     prompt_tokens=optional_int(event, "tokens_evaluated") or optional_int(timings, "prompt_n"),
                     cached_tokens=optional_int(timings, "cache_n"),
                     new_tokens=optional_int(event, "tokens_predicted") or optional_int(timings, "predicted_n"))

    def ended(self, final: bool, how: str | None) -> bool:
        return final  # the last event of every answer, streamed or not, has stop: true

    def prompt_tokens(self, request: CompletionRequest, prompt: RemotePrompt) -> int | None:
        return None  # the server lays the prompt out (and reports its length)

    def stop_strings(self) -> tuple[str, ...]:
        return ()  # /infill returns text; the server stops on the model's end-of-generation tokens

    def check(self, http: HttpClient, prompt: RemotePrompt, cancelled: Cancel = None) -> dict[str, Any]:
        health = http.get_json("/health", cancelled)
        if isinstance(health, dict) and health.get("status") not in (None, "ok"):
            raise RemoteError(f"llama-server at {http.spec.url} is not ready: {health}")
        facts: dict[str, Any] = {}
        try:
            props = http.get_json("/props", cancelled, retries=0)
        except RemoteError:
            return facts  # an older server without /props: serve without its facts
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        n_ctx = optional_int(settings, "n_ctx") or optional_int(props, "n_ctx")
        if n_ctx:
            facts["max_len"] = n_ctx
        if isinstance(props, dict) and isinstance(props.get("model_path"), str):
            facts["model"] = props["model_path"].rsplit("/", 1)[-1]
        return facts
